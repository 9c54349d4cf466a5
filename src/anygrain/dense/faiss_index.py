"""FAISS indexes over passage vectors, chosen by factory string, scored by inner product.

Supported factories (any other FAISS factory string is passed through as is):

- ``Flat``: exact search; every query scans every vector.
- ``HNSW32``: graph search, no training; ``ef_search`` trades speed for recall.
- ``IVF{n},Flat``: ``n`` k-means cells, a query scans ``nprobe`` of them.
- ``IVF{n},PQ{m}``: as above, vectors compressed to ``m`` bytes (``m`` divides the dimension).
- ``OPQ{m},IVF{n},PQ{m}``: a learned rotation before PQ, for better compressed recall.

:func:`default_factory` picks one from the corpus size (see its docstring for the rule).
Indexes are written with ``faiss.write_index`` and read back memory-mapped
(``IO_FLAG_MMAP_IFC``: in faiss 1.15 this maps the codes of Flat, PQ and SQ
indexes, the storage of HNSW, and the inverted lists of IVF indexes; the HNSW graph
and IVF centroids are small and read into memory), so opening a large index is cheap
and its vectors live in the page cache rather than in the process's own memory.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import faiss
import numpy as np

from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_path
from anygrain.utils.memory import trim_heap
from anygrain.utils.progress import progress_bar

#: Below this many vectors exact search is fast enough (a few ms per query on CPU).
FLAT_LIMIT = 100_000
#: Above this many vectors uncompressed IVF cells get large (GBs); PQ codes keep RAM low.
PQ_LIMIT = 2_000_000
#: FAISS warns when k-means has fewer than this many points per centroid.
MIN_POINTS_PER_CENTROID = 39
DEFAULT_EF_SEARCH = 64
_HNSWParams: Any = getattr(faiss, "SearchParametersHNSW")  # noqa: B009  (missing from faiss's stubs)


@dataclass(frozen=True)
class FactoryInfo:
    """What a factory string asks for, as far as training and search parameters go."""

    spec: str
    nlist: int | None = None  # IVF cells
    pq_m: int | None = None  # PQ sub-quantizers
    pq_bits: int = 8
    opq_m: int | None = None
    hnsw: bool = False  # an HNSW graph over the vectors (not as IVF quantizer)
    hnsw_quantizer: bool = False  # IVF{n}_HNSW{M}: an HNSW graph over the centroids

    @property
    def clusters(self) -> int:
        """The largest k-means the training runs (0 when it needs no training)."""
        ks = [self.nlist or 0]
        if self.pq_m or self.opq_m:
            ks.append(2**self.pq_bits)
        return max(ks)

    @property
    def min_train(self) -> int:
        """FAISS refuses to train k-means on fewer points than centroids."""
        return self.clusters

    @property
    def recommended_train(self) -> int:
        return MIN_POINTS_PER_CENTROID * self.clusters


def parse_factory(spec: str) -> FactoryInfo:
    """Read the parts of ``spec`` that matter for training and search (the rest is FAISS's)."""
    nlist = pq_m = opq_m = None
    bits = 8
    hnsw = hnsw_q = False
    for part in (p.strip() for p in spec.split(",")):
        if m := re.fullmatch(r"OPQ(\d+)(?:_\d+)?", part):
            opq_m = int(m.group(1))
        elif m := re.fullmatch(r"IVF(\d+)(_HNSW\d+)?", part):
            nlist, hnsw_q = int(m.group(1)), bool(m.group(2))
        elif m := re.fullmatch(r"PQ(\d+)(?:x(\d+))?(?:fs|fsr|np)?", part):
            pq_m, bits = int(m.group(1)), int(m.group(2) or 8)
        elif re.fullmatch(r"HNSW\d+(_.*)?", part):
            hnsw = True
    return FactoryInfo(spec, nlist, pq_m, bits, opq_m, hnsw, hnsw_q)


def _pq_m(dim: int) -> int | None:
    """Sub-quantizers for PQ: about 8 dimensions each (dim/8 bytes per vector), dividing ``dim``."""
    for m in range(max(1, dim // 8), 0, -1):
        if dim % m == 0 and dim // m <= 16:
            return m
    return None


def ivf_cells(n_vectors: int) -> int:
    """``4·sqrt(N)`` cells, the usual FAISS guidance, kept trainable (>= 39 points per cell)."""
    return max(1, min(int(round(4 * math.sqrt(n_vectors))), n_vectors // MIN_POINTS_PER_CENTROID))


def default_factory(n_vectors: int, dim: int) -> str:
    """The factory anygrain uses when none is given.

    - ``N < 100k``: ``Flat``. Exact, and a scan of 100k vectors is a few ms.
    - ``100k <= N < 2M``: ``IVF{4·sqrt(N)},Flat``. Uncompressed, so scores stay exact
      within the cells scanned; 2M 768-d vectors are ~6 GB, memory-mapped.
    - ``N >= 2M``: ``IVF{4·sqrt(N)},PQ{dim/8}``: 8 dimensions per byte (16x smaller
      than float32 for 384-/768-d models); ``Flat`` cells when no ``m`` divides ``dim``.
    """
    if n_vectors < FLAT_LIMIT:
        return "Flat"
    nlist = ivf_cells(n_vectors)
    if n_vectors < PQ_LIMIT:
        return f"IVF{nlist},Flat"
    m = _pq_m(dim)
    return f"IVF{nlist},PQ{m}" if m else f"IVF{nlist},Flat"


def default_nprobe(nlist: int) -> int:
    """Cells scanned per query by default: ``sqrt(nlist)`` (FAISS's default of 1 loses recall)."""
    return max(1, min(nlist, int(math.ceil(math.sqrt(nlist)))))


def check_factory(spec: str, n_train: int, dim: int) -> FactoryInfo:
    """Raise a clear error (instead of a FAISS crash) when ``spec`` cannot be trained here."""
    info = parse_factory(spec)
    for name, m in (("PQ", info.pq_m), ("OPQ", info.opq_m)):
        if m is not None and dim % m:
            divisors = [d for d in range(1, dim + 1) if dim % d == 0 and d <= 128]
            raise AnygrainError(
                f"FAISS factory {spec!r}: {name}{m} needs {m} to divide the vector dimension {dim}; "
                f"choose one of {divisors[-6:]}"
            )
    if info.min_train and n_train < info.min_train:
        what = []
        if info.nlist:
            what.append(f"IVF{info.nlist} needs >= {info.nlist} (one per centroid)")
        if info.pq_m or info.opq_m:
            what.append(f"PQ with {info.pq_bits}-bit codes needs >= {2**info.pq_bits}")
        suggest = ["'Flat' (exact)"]
        if n_train >= MIN_POINTS_PER_CENTROID:
            suggest.append(f"'IVF{max(1, n_train // MIN_POINTS_PER_CENTROID)},Flat'")
        raise AnygrainError(
            f"FAISS factory {spec!r} needs at least {info.min_train} training vectors "
            f"({'; '.join(what)}; FAISS recommends {info.recommended_train}), but only {n_train} "
            f"are available. Use a smaller factory, e.g. {' or '.join(suggest)}."
        )
    return info


def plan_training(
    n_vectors: int, dim: int, factory: str | None, train_size: int | None = None
) -> tuple[str, FactoryInfo, int]:
    """``(factory, info, train_size)`` for ``n_vectors``, checked before any work is done.

    Call it before encoding a corpus, so a factory that cannot be trained fails in
    seconds rather than after hours of encoding.  The default training sample is
    ``min(N, max(64·k, 50k), 500k)`` vectors for the largest k-means ``k`` in the factory
    (FAISS itself subsamples to 256 points per centroid).
    """
    spec = factory or default_factory(n_vectors, dim)
    info = parse_factory(spec)
    if train_size is None:
        train_size = min(max(64 * info.clusters, 50_000), 500_000)
    train_size = min(train_size, n_vectors)
    check_factory(spec, train_size, dim)
    return spec, info, train_size


class VectorSource(Protocol):
    """What :func:`build_faiss_index` reads: a :class:`~anygrain.dense.shards.ShardSet` fits."""

    def __len__(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray: ...

    def iter_batches(self, batch_size: int = 65536) -> Any: ...


class RangeVectorSource(VectorSource, Protocol):
    """A :class:`VectorSource` that also reads a range: what a blocked build needs."""

    def iter_batches(
        self, batch_size: int = 65536, *, start: int = 0, stop: int | None = None
    ) -> Any:
        """``(position, batch)`` pairs over vectors ``start:stop``."""
        ...


class ArrayVectors:
    """An in-memory array seen as a :class:`VectorSource` (tests, small corpora)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.x)

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray:
        if n >= len(self.x):
            return self.x
        return self.x[
            np.sort(np.random.default_rng(seed).choice(len(self.x), size=n, replace=False))
        ]

    def iter_batches(
        self, batch_size: int = 65536, *, start: int = 0, stop: int | None = None
    ) -> Any:
        end = len(self.x) if stop is None else min(stop, len(self.x))
        for i in range(start, end, batch_size):
            yield i, self.x[i : min(i + batch_size, end)]


def unwrap_index(index: faiss.Index) -> faiss.Index:
    """The index under pre-transforms (OPQ, PCA) and id maps."""
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform | faiss.IndexIDMap):
        index = faiss.downcast_index(index.index)
    return index


def _quiet_kmeans(index: faiss.Index) -> None:
    """We already warned once about a small training set; stop FAISS repeating it per sub-quantizer."""
    base = unwrap_index(index)
    cps = []
    if isinstance(base, faiss.IndexIVF):
        cps.append(base.cp)
    pq = getattr(base, "pq", None)
    if pq is not None:
        cps.append(pq.cp)
    for cp in cps:
        cp.min_points_per_centroid = 1


class FaissIndex:
    """A FAISS index plus what search needs to know about it (IVF? HNSW?), found once."""

    def __init__(self, index: faiss.Index, factory: str = "") -> None:
        self.index = index
        self.factory = factory
        self._d = int(index.d)  # cached: SWIG attribute reads cost more than the check itself
        base = unwrap_index(index)
        self.ivf: faiss.IndexIVF | None = base if isinstance(base, faiss.IndexIVF) else None
        self.hnsw: faiss.IndexHNSW | None = base if isinstance(base, faiss.IndexHNSW) else None
        q = faiss.downcast_index(self.ivf.quantizer) if self.ivf is not None else None
        self.hnsw_quantizer: faiss.IndexHNSW | None = q if isinstance(q, faiss.IndexHNSW) else None
        self._parts: list[faiss.Index] = []  # the blocks of a blocked index (load(blocks=))

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def nprobe(self) -> int | None:
        return int(self.ivf.nprobe) if self.ivf is not None else None

    @property
    def ef_search(self) -> int | None:
        h = self.hnsw or self.hnsw_quantizer
        return int(h.hnsw.efSearch) if h is not None else None

    # --- building --------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        vectors: VectorSource | np.ndarray,
        factory: str | None = None,
        *,
        train_size: int | None = None,
        seed: int = 0,
        add_batch: int = 65536,
        nprobe: int | None = None,
        ef_search: int | None = None,
        progress: bool = False,
    ) -> FaissIndex:
        """Train on a sample of ``vectors`` (see :func:`plan_training`) and add them all in
        batches, so memory stays bounded by the sample and one batch (and the index)."""
        src: VectorSource = ArrayVectors(vectors) if isinstance(vectors, np.ndarray) else vectors
        index, spec = cls._trained(src, factory, train_size, seed)
        _add(index, src, 0, len(src), add_batch, progress)
        return cls._ready(index, spec, nprobe, ef_search)

    @classmethod
    def build_blocks(
        cls,
        vectors: RangeVectorSource,
        path: str | Path,
        factory: str,
        *,
        block_bytes: int,
        train_size: int | None = None,
        seed: int = 0,
        add_batch: int = 65536,
        progress: bool = False,
    ) -> int:
        """Build an IVF index at ``path`` whose codes never are all in memory at once.

        The trained, empty index is written at ``path`` and the vectors are added in blocks
        of at most ``block_bytes`` of codes and ids, each a copy of the trained index with
        its share of the vectors (ids: their positions in ``vectors``), written to
        :func:`block_path` and freed before the next.  :meth:`load` with ``blocks`` stacks
        the blocks' memory-mapped inverted lists under the trained index (FAISS's
        ``HStackInvertedLists``): the same search results as one index holding every
        vector.  Returns the number of blocks."""
        index, spec = cls._trained(vectors, factory, train_size, seed)
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = default_nprobe(ivf.nlist)  # saved with the index, as build() does
        per_block = max(1, block_bytes // (int(ivf.code_size) + 8))  # codes + int64 id
        n = len(vectors)
        if n <= per_block:  # it fits: one index, the usual layout
            _add(index, vectors, 0, n, add_batch, progress)
            cls(index, spec).save(path)
            return 0
        with atomic_path(path) as tmp:
            faiss.write_index(index, str(tmp))
        starts = range(0, n, per_block)
        for b, lo in enumerate(starts):
            block = faiss.clone_index(index)
            _add(block, vectors, lo, min(n, lo + per_block), add_batch, progress, with_ids=True)
            with atomic_path(block_path(path, b)) as tmp:
                faiss.write_index(block, str(tmp))
            del block
            trim_heap()  # the block's codes back to the system before the next block
        return len(starts)

    @classmethod
    def _trained(
        cls, src: VectorSource, factory: str | None, train_size: int | None, seed: int
    ) -> tuple[faiss.Index, str]:
        """The empty index of ``factory``, trained on a sample of ``src``."""
        spec, info, train_size = plan_training(len(src), src.dim, factory, train_size)
        dim = src.dim
        try:
            index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise AnygrainError(
                f"FAISS cannot build factory {spec!r}: {_faiss_message(e)}"
            ) from None
        base: Any = unwrap_index(index)
        if getattr(base, "do_polysemous_training", False):
            # Polysemous codes only help with polysemous_ht search, which anygrain never sets;
            # their training takes tens of seconds.
            base.do_polysemous_training = False
        if not index.is_trained:
            if train_size < info.recommended_train:
                warnings.warn(
                    f"training FAISS {spec!r} on {train_size} vectors; it recommends at least "
                    f"{info.recommended_train} ({MIN_POINTS_PER_CENTROID} per centroid), so recall may suffer",
                    stacklevel=2,
                )
                _quiet_kmeans(index)
            # what an earlier index freed (the other side's blocks) back first: the sample
            # and its residuals are the training's peak
            trim_heap()
            index.train(src.sample(train_size, seed=seed))
            trim_heap()  # the sample is freed: its pages back before the codes are added
        return index, spec

    @classmethod
    def _ready(
        cls, index: faiss.Index, spec: str, nprobe: int | None, ef_search: int | None
    ) -> FaissIndex:
        out = cls(index, spec)
        if out.ivf is not None:
            out.ivf.nprobe = nprobe or default_nprobe(out.ivf.nlist)
        for h in (out.hnsw, out.hnsw_quantizer):
            if h is not None:
                h.hnsw.efSearch = ef_search or DEFAULT_EF_SEARCH
        return out

    def save(self, path: str | Path) -> None:
        """``faiss.write_index`` under a temporary name, then rename (never half an index)."""
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(
        cls, path: str | Path, *, factory: str = "", mmap: bool = True, blocks: int = 0
    ) -> FaissIndex:
        """Read an index, memory-mapped where the index type allows it (see module
        docstring); ``blocks``: the number of blocks :meth:`build_blocks` wrote beside it."""
        if blocks:
            return cls._load_blocks(Path(path), factory, blocks)
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
                return cls(faiss.read_index(p, flag), factory)
            except RuntimeError:
                continue  # this index type cannot be mapped: read it normally
        try:
            return cls(faiss.read_index(p), factory)
        except RuntimeError as e:
            raise AnygrainError(f"{p}: cannot read FAISS index ({_faiss_message(e)})") from None

    @classmethod
    def _load_blocks(cls, path: Path, factory: str, n_blocks: int) -> FaissIndex:
        index = cls.load(path, mmap=False).index  # trained and empty: centroids, codebooks
        parts = [cls.load(block_path(path, b), factory=factory).index for b in range(n_blocks)]
        ivf = faiss.extract_index_ivf(index)
        lists = faiss.InvertedListsPtrVector()  # type: ignore[attr-defined]
        for part in parts:
            pivf = faiss.extract_index_ivf(part)
            if pivf.nlist != ivf.nlist or pivf.code_size != ivf.code_size:
                raise AnygrainError(
                    f"{block_path(path, 0).parent}: FAISS blocks do not match {path}"
                )
            lists.push_back(pivf.invlists)
        stacked = faiss.HStackInvertedLists(lists.size(), lists.data())
        ivf.replace_invlists(stacked, True)
        stacked.this.disown()  # type: ignore[attr-defined]  # the index owns the stack now; the blocks own their lists
        ntotal = sum(int(p.ntotal) for p in parts)
        ivf.ntotal = ntotal
        index.ntotal = ntotal
        out = cls(index, factory)
        out._parts = parts  # the stacked lists point into the blocks: keep them alive
        return out

    # --- search ----------------------------------------------------------------------
    def params(
        self, *, nprobe: int | None = None, ef_search: int | None = None
    ) -> faiss.SearchParameters | None:
        """Per-call search parameters; the index itself is left untouched (thread-safe)."""
        if nprobe is None and ef_search is None:
            return None
        name = self.factory or type(unwrap_index(self.index)).__name__
        if nprobe is not None and self.ivf is None:
            raise AnygrainError(f"nprobe applies to IVF indexes; this index is {name!r}")
        if ef_search is not None and self.hnsw is None and self.hnsw_quantizer is None:
            raise AnygrainError(f"ef_search applies to HNSW indexes; this index is {name!r}")
        if self.ivf is not None:
            p = faiss.SearchParametersIVF()
            p.nprobe = int(nprobe) if nprobe is not None else int(self.ivf.nprobe)
            if ef_search is not None:
                qp = _HNSWParams()
                qp.efSearch = int(ef_search)
                p.quantizer_params = qp
                p._keep = qp  # type: ignore[attr-defined]  # C++ does not own it: keep it alive
            return p
        hp = _HNSWParams()
        hp.efSearch = int(ef_search)  # type: ignore[arg-type]
        return hp

    def search(
        self, q: np.ndarray, k: int, *, nprobe: int | None = None, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of shape (n, k), best first; rows are -1 past the last match."""
        if q.dtype != np.float32 or not q.flags.c_contiguous:
            q = np.ascontiguousarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self._d:
            raise AnygrainError(f"query vectors have shape {q.shape}, expected (n, {self._d})")
        if nprobe is None and ef_search is None and k > 0:
            scores, rows = self.index.search(q, k)  # the common case: nothing between us and FAISS
            return rows, scores
        if k <= 0 or len(q) == 0:
            return np.zeros((len(q), max(k, 0)), dtype=np.int64), np.zeros(
                (len(q), max(k, 0)), dtype=np.float32
            )
        p = self.params(nprobe=nprobe, ef_search=ef_search)
        scores, rows = self.index.search(q, k) if p is None else self.index.search(q, k, params=p)
        return rows, scores


def block_path(path: str | Path, b: int) -> Path:
    """Where block ``b`` of the blocked index at ``path`` lives: ``start.faiss`` ->
    ``start.b0.faiss`` (a ``.faiss`` file: servers watch it as they watch the index)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.b{b}{p.suffix}")


def split_whole(path: str | Path) -> None:
    """Turn the whole IVF index at ``path`` into the blocked layout without reading its codes:
    the file becomes block 0 (its ids are already the vectors' positions) and ``path`` the
    trained, empty index (read memory-mapped, its lists replaced by empty ones).  An update
    can then add a block instead of loading every code to append to them."""
    p = Path(path)
    base = FaissIndex.load(p).index  # memory-mapped: the codes are not read
    ivf = faiss.extract_index_ivf(base)
    empty = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    ivf.replace_invlists(empty, True)
    empty.this.disown()  # type: ignore[attr-defined]  # the index owns the lists now
    ivf.ntotal = 0
    base.ntotal = 0
    os.replace(p, block_path(p, 0))
    with atomic_path(p) as tmp:
        faiss.write_index(base, str(tmp))


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
    with atomic_path(block_path(path, b)) as tmp:
        faiss.write_index(block, str(tmp))


def _add(
    index: faiss.Index,
    src: VectorSource,
    lo: int,
    hi: int,
    add_batch: int,
    progress: bool,
    *,
    with_ids: bool = False,
) -> None:
    """Add vectors ``lo:hi`` of ``src`` to ``index`` in batches (``with_ids``: with their
    positions in ``src`` as ids, for a block of a larger index)."""
    ivf = _array_ivf(index)
    if ivf is not None and not ivf.ntotal:
        _add_reserved(index, ivf, src, lo, hi, add_batch, progress, with_ids=with_ids)
        return
    for i, batch in progress_bar(
        _batches(src, lo, hi, add_batch),
        desc="adding to FAISS",
        unit="batch",
        total=-(-(hi - lo) // add_batch),
        disable=not progress,
    ):
        x = np.ascontiguousarray(batch, dtype=np.float32)
        if with_ids:
            index.add_with_ids(x, np.arange(i, i + len(x), dtype=np.int64))
        else:
            index.add(x)


def _array_ivf(index: faiss.Index) -> Any:
    """The IVF index ``index`` is, or is under pre-transforms (OPQ), when its lists are plain
    in-memory arrays; else None (an id map, say, keeps ids of its own: it adds as usual)."""
    ivf = faiss.downcast_index(index)
    if isinstance(ivf, faiss.IndexPreTransform):
        ivf = faiss.downcast_index(ivf.index)
    if not isinstance(ivf, faiss.IndexIVF):
        return None
    lists = ivf.invlists
    if lists is None:
        return None
    return (
        ivf if isinstance(faiss.downcast_InvertedLists(lists), faiss.ArrayInvertedLists) else None
    )


def _batches(src: VectorSource, lo: int, hi: int, add_batch: int) -> Any:
    if lo or hi < len(src):
        return cast(RangeVectorSource, src).iter_batches(add_batch, start=lo, stop=hi)
    return src.iter_batches(add_batch)


def _add_reserved(
    index: faiss.Index,
    ivf: Any,
    src: VectorSource,
    lo: int,
    hi: int,
    add_batch: int,
    progress: bool,
    *,
    with_ids: bool,
) -> None:
    """:func:`_add` into an empty IVF index, each inverted list allocated once at its final size.

    Appending one batch at a time grows each list's arrays by doubling, so the codes took up
    to twice their size (measured: 560 MB over the baseline to add a 250 MB block).  The
    vectors are assigned to their lists first (8 bytes each), each list reserved at its
    count, then encoded with those assignments: the coarse quantizer runs once, as before.
    """
    chain: list[Any] = []  # the pre-transforms (OPQ): the IVF index's inputs are their outputs
    if isinstance(index, faiss.IndexPreTransform):
        vts: Any = index.chain  # a SWIG vector (the stubs say list)
        chain = [vts.at(j) for j in range(vts.size())]

    def coarse(batch: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(batch, dtype=np.float32)
        for vt in chain:
            x = vt.apply(x)
        return x

    n = hi - lo
    assign = np.empty(n, dtype=np.int64)
    for i, batch in _batches(src, lo, hi, add_batch):
        x = np.ascontiguousarray(coarse(batch))
        assign[i - lo : i - lo + len(x)] = ivf.quantizer.assign(x, 1).ravel()
    counts = np.bincount(assign, minlength=ivf.nlist)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    for list_no in np.flatnonzero(counts):
        # resize allocates exactly; shrinking back keeps the capacity for the appends below
        lists.resize(int(list_no), int(counts[list_no]))
        lists.resize(int(list_no), 0)
    for i, batch in progress_bar(
        _batches(src, lo, hi, add_batch),
        desc="adding to FAISS",
        unit="batch",
        total=-(-n // add_batch),
        disable=not progress,
    ):
        x = np.ascontiguousarray(coarse(batch))
        first = i if with_ids else int(ivf.ntotal)
        ids = np.arange(first, first + len(x), dtype=np.int64)
        idx = np.ascontiguousarray(assign[i - lo : i - lo + len(x)])
        ivf.add_core(len(x), faiss.swig_ptr(x), faiss.swig_ptr(ids), faiss.swig_ptr(idx))
    index.ntotal = ivf.ntotal


def _faiss_message(e: BaseException) -> str:
    """The useful line of a FAISS C++ exception (they carry file and function noise)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Error:"):
            return ln.removeprefix("Error:").strip().strip("'")
    return lines[-1] if lines else type(e).__name__
