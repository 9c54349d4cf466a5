"""FAISS indexes on disk: read memory-mapped, written atomically, and laid out in blocks.

Indexes are written with ``faiss.write_index`` and read back memory-mapped
(``IO_FLAG_MMAP_IFC``: in faiss 1.15 this maps the codes of Flat, PQ and SQ indexes, the
storage of HNSW, and the inverted lists of IVF indexes; the HNSW graph and IVF centroids
are small and read into memory), so opening a large index is cheap and its vectors live
in the page cache rather than in the process's own memory.

An IVF index larger than its memory budget is written in blocks: its trained, empty index
at ``path`` and blocks of its vectors beside it (:func:`block_path`), each a copy of the
trained index with its share of the vectors; :func:`stack_blocks` reads them back as one.
"""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np

from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_path
from anygrain.utils.memory import trim_heap
from anygrain.vectors.adding import add_vectors
from anygrain.vectors.sources import RangeVectorSource


def faiss_message(e: BaseException) -> str:
    """The useful line of a FAISS C++ exception (they carry file and function noise)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Error:"):
            return ln.removeprefix("Error:").strip().strip("'")
    return lines[-1] if lines else type(e).__name__


def write_index(index: faiss.Index, path: str | Path) -> None:
    """``faiss.write_index`` under a temporary name, then rename (never half an index)."""
    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))


def read_index(path: str | Path, *, mmap: bool = True) -> faiss.Index:
    """The index at ``path``, memory-mapped where its type allows it (see module docstring)."""
    p = str(path)
    if not Path(p).exists():
        raise AnygrainError(f"{p}: FAISS index file missing")
    flags = (
        [f for f in (getattr(faiss, "IO_FLAG_MMAP_IFC", None), faiss.IO_FLAG_MMAP) if f]
        if mmap
        else []
    )
    for flag in flags:
        try:
            return faiss.read_index(p, flag)
        except RuntimeError:
            continue  # this index type cannot be mapped: read it normally
    try:
        return faiss.read_index(p)
    except RuntimeError as e:
        raise AnygrainError(f"{p}: cannot read FAISS index ({faiss_message(e)})") from None


def block_path(path: str | Path, b: int) -> Path:
    """Where block ``b`` of the blocked index at ``path`` lives: ``start.faiss`` ->
    ``start.b0.faiss`` (a ``.faiss`` file: servers watch it as they watch the index)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.b{b}{p.suffix}")


def write_blocks(
    index: faiss.Index,
    vectors: RangeVectorSource,
    path: str | Path,
    per_block: int,
    add_batch: int,
    progress: bool,
) -> int:
    """Write the trained, empty ``index`` at ``path`` and ``vectors`` in blocks of at most
    ``per_block`` beside it, each block's codes freed before the next (ids: the vectors'
    positions); returns the number of blocks, 0 when they fit in one index at ``path``."""
    n = len(vectors)
    if n <= per_block:  # it fits: one index, the usual layout
        add_vectors(index, vectors, 0, n, add_batch, progress)
        write_index(index, path)
        return 0
    write_index(index, path)
    starts = range(0, n, per_block)
    for b, lo in enumerate(starts):
        block = faiss.clone_index(index)
        add_vectors(block, vectors, lo, min(n, lo + per_block), add_batch, progress, with_ids=True)
        write_index(block, block_path(path, b))
        del block
        trim_heap()  # the block's codes back to the system before the next block
    return len(starts)


def stack_blocks(path: Path, n_blocks: int) -> tuple[faiss.Index, list[faiss.Index]]:
    """The blocked index at ``path`` as one index, and the blocks it reads from.

    The blocks' memory-mapped inverted lists are stacked under the trained index (FAISS's
    ``HStackInvertedLists``): the same search results as one index holding every vector.
    The stacked lists point into the blocks: the caller keeps the blocks alive."""
    index = read_index(path, mmap=False)  # trained and empty: centroids, codebooks
    parts = [read_index(block_path(path, b)) for b in range(n_blocks)]
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.InvertedListsPtrVector()  # type: ignore[attr-defined]
    for part in parts:
        pivf = faiss.extract_index_ivf(part)
        if pivf.nlist != ivf.nlist or pivf.code_size != ivf.code_size:
            raise AnygrainError(f"{block_path(path, 0).parent}: FAISS blocks do not match {path}")
        lists.push_back(pivf.invlists)
    stacked = faiss.HStackInvertedLists(lists.size(), lists.data())
    ivf.replace_invlists(stacked, True)
    stacked.this.disown()  # type: ignore[attr-defined]  # the index owns the stack now; the blocks own their lists
    ntotal = sum(int(p.ntotal) for p in parts)
    ivf.ntotal = ntotal
    index.ntotal = ntotal
    return index, parts


def split_whole(path: str | Path) -> None:
    """Turn the whole IVF index at ``path`` into the blocked layout without reading its codes:
    the file becomes block 0 (its ids are already the vectors' positions) and ``path`` the
    trained, empty index (read memory-mapped, its lists replaced by empty ones).  An update
    can then add a block instead of loading every code to append to them."""
    p = Path(path)
    base = read_index(p)  # memory-mapped: the codes are not read
    ivf = faiss.extract_index_ivf(base)
    empty = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    ivf.replace_invlists(empty, True)
    empty.this.disown()  # type: ignore[attr-defined]  # the index owns the lists now
    ivf.ntotal = 0
    base.ntotal = 0
    os.replace(p, block_path(p, 0))
    write_index(base, p)


def add_block(path: str | Path, b: int, vectors: np.ndarray, first_id: int) -> None:
    """Write block ``b`` of the blocked index at ``path``: ``vectors`` added, with ids from
    ``first_id``, to a copy of its trained, empty index (an update's new vectors)."""
    block = faiss.read_index(str(path))
    if block.ntotal:
        raise AnygrainError(f"{path}: not the trained base of a blocked index")
    block.add_with_ids(
        np.ascontiguousarray(vectors, dtype=np.float32),
        np.arange(first_id, first_id + len(vectors), dtype=np.int64),
    )
    write_index(block, block_path(path, b))
