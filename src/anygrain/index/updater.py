"""Adding documents to an index, deleting them and compacting, each atomic.

The index is staged as a sibling of hard links, the kind's own hooks
(:meth:`~anygrain.index.base.Index.add_rows`, :meth:`~anygrain.index.base.Index.compact_rows`,
in the kind's ``update.py``) replace the files they change there, and the staged directory is
swapped in (:func:`anygrain.utils.atomic.atomic_dir`): a crash leaves the old index as it
was.  This module imports no kind.  Deleting writes tombstones
(:mod:`anygrain.index.tombstones`); a source that tracks files is read against what the
index holds (:class:`~anygrain.corpus.files.KnownFiles`).  What each kind recomputes:
docs/scale.md.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anygrain.corpus.append import append_segment, write_subset
from anygrain.corpus.fields import FieldMap, with_read_options
from anygrain.corpus.files import KnownFiles
from anygrain.corpus.formats import Source, parse_source
from anygrain.corpus.splitters import SplitSpec
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog, InputError
from anygrain.index.base import Index, UpdateOp
from anygrain.index.manifest import MANIFEST, read_manifest, rewrite_manifest
from anygrain.index.registry import IndexKind, index_class
from anygrain.index.tombstones import Tombstones, read_tombstones, tombstone_name
from anygrain.utils.atomic import atomic_dir, atomic_write_text, is_temporary_name
from anygrain.utils.checksums import ALGORITHM, hash_file
from anygrain.utils.device import check_device
from anygrain.utils.lock import writer_lock
from anygrain.utils.targets import resolved


# --- staging ------------------------------------------------------------------------------
def _link_tree(src: Path, dst: Path) -> None:
    """Mirror ``src`` into the empty ``dst`` with hard links (a copy where links fail)."""
    for dirpath, _dirs, files in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(dirpath) / name, dst / rel / name)
            except OSError:
                shutil.copy2(Path(dirpath) / name, dst / rel / name)


@contextmanager
def staged_index(path: Path) -> Iterator[tuple[Path, Path]]:
    """``(staged index dir, scratch dir)``: the index is replaced by the staged directory
    when the block ends without an exception; scratch is removed either way.  The staged
    directory's files are hard links to the live ones: replace a file there, never write
    into it (:func:`fresh`).  The caller holds the index's writer lock
    (:func:`anygrain.utils.lock.writer_lock`)."""
    # named as atomic_dir names its own, so a killed run's scratch is removed by the next
    work = Path(
        tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.pid{os.getpid()}.", suffix=".tmp")
    )
    # files a user put inside the index: carried over (the staged directory replaces the
    # index), but never recorded as the index's own, so --overwrite still refuses them
    listed = set((read_manifest(path).get("files") or {}).keys())
    foreign = sorted(
        rel
        for rel in _relative_files(path)
        if rel not in listed and rel != MANIFEST and not is_temporary_name(Path(rel).name)
    )
    try:
        with atomic_dir(path) as tmp:
            _link_tree(path, tmp)
            yield tmp, work
            if foreign:
                m = read_manifest(tmp)
                m["files"] = {k: v for k, v in (m.get("files") or {}).items() if k not in foreign}
                atomic_write_text(tmp / MANIFEST, json.dumps(m, indent=2, ensure_ascii=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def real_index_path(path: str | Path) -> Path:
    """``path``, or where it points when it is a symbolic link: an update swaps the index
    directory whole, and swapping the link would leave the index it names as it was and
    turn the link into a separate copy."""
    p = Path(path)
    return resolved(p) if p.is_symlink() or p.name in ("", ".", "..") else p


def _relative_files(root: Path) -> list[str]:
    return [
        str((Path(d) / n).relative_to(root)) for d, _dirs, names in os.walk(root) for n in names
    ]


def _corpus_rel(path: Path, manifest: dict[str, Any], store: CorpusStore) -> Path:
    """Where the corpus sits inside the index; an outside corpus is refused (it could not
    be swapped together with the index)."""
    c, root = store.path.resolve(), path.resolve()
    if not c.is_relative_to(root):
        raise AnygrainError(
            f"{path}: its corpus lives outside the index ({store.path}), maybe shared with other "
            "indexes; adding, deleting or compacting needs an index that holds its corpus "
            "(build it from the source instead of an existing corpus directory)"
        )
    return c.relative_to(root)


# --- what a kind's update is given ---------------------------------------------------------
def corpus_field(old: dict[str, Any], store: CorpusStore) -> dict[str, Any]:
    """The ``corpus`` field of manifest ``old`` for the updated ``store``."""
    return {**old["corpus"], "checksum": store.checksum, "n_passages": len(store)}


def fresh(path: Path) -> Path:
    """Unlink ``path`` before writing it: it may be a hard link to the live index."""
    path.unlink(missing_ok=True)
    return path


@dataclass(eq=False)
class StagedUpdate:
    """What a kind's update (:meth:`Index.add_rows`, :meth:`Index.compact_rows`) is given:
    the index as open, the staged directory to write in (its files are hard links to the
    live ones: replace a file, never write into it, see :func:`fresh`), the grown (or
    compacted) corpus in it, scratch space, and the new documents' own store (add) or
    the rows kept, in order (compact).  The kind rewrites the staged ``index.json`` last."""

    index: Index
    staged: Path
    store: CorpusStore
    work: Path
    segment: CorpusStore | None = None  # add: the new passages, rows after the old ones
    keep_rows: np.ndarray | None = None  # compact: the old rows kept
    progress: bool = False
    device: str | None = None  # where new passages are encoded (None: auto)
    runtime: str | None = None  # what encodes them: auto | onnx | torch (None: auto)


# --- operations ---------------------------------------------------------------------------
def _update_class(index: Index, op: UpdateOp) -> type[Index]:
    """The class whose hooks update ``index``, once it has checked it can do ``op`` (it
    refuses, naming the index, with a UsageError).  Found by the kind ``index.json``
    records: a sharded index opens as a view of its shards' kind, but is updated (or
    refused) as a sharded one."""
    cls = index_class(IndexKind(index.manifest["kind"]))
    cls.check_update(index, op)
    return cls


class _NothingNew(Exception):
    """Every file of a tracked source is unchanged: nothing to add."""


def add_documents(
    path: str | Path,
    source: Any,
    *,
    split: str | SplitSpec | None = None,
    model: Any = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
    device: str | None = None,
    runtime: str | None = None,
    fields: FieldMap | None = None,
) -> Index:
    """Add the documents of ``source`` to the index at ``path`` (see the module docstring
    for what each kind recomputes); returns the index reopened.  ``device``: where the new
    passages are encoded (None: auto); ``runtime``: what encodes them (None: auto);
    ``fields``: the fields of a CSV, TSV or JSONL source.

    ``split`` defaults to the one the corpus was built with.  ``model`` must be the
    index's own encoder (same fingerprint; by default the one stored in the index).
    Passage or document ids the index already holds are refused, naming them, but for a
    source of files: there only new and changed files are read (the module docstring),
    and when none is, the index is returned unchanged.  Another writer of the index at
    work is refused at once (:mod:`anygrain.utils.lock`)."""
    p = real_index_path(path)
    check_device(device)  # a missing GPU is refused before anything is read
    if runtime is not None:
        from anygrain.encode.onnx_runtime import parse_runtime

        parse_runtime(runtime)  # so is --runtime torch where torch is missing
    errors = errors if errors is not None else ErrorLog()
    try:
        with writer_lock(p, UpdateOp.ADD.value):  # held from the read to the swap
            return _add_documents(
                p, source, split, model, errors, progress, device, runtime, fields or FieldMap()
            )
    except _NothingNew:
        return Index.load(p)


def _tracked_source(
    p: Path, idx: Index, source: Any, fields: FieldMap
) -> tuple[Any, KnownFiles | None]:
    """``source`` to be read with ``fields`` and, for a source of files, against the
    files the index holds."""
    if not isinstance(source, str | os.PathLike | Source):
        return with_read_options(source, fields), None
    src = source if isinstance(source, Source) else parse_source(source)
    if not src.format.tracks_files:
        return with_read_options(src, fields), None
    tomb = read_tombstones(p, idx.manifest)
    known = KnownFiles.of_store(idx.corpus, tomb.docs if tomb is not None else ())
    return with_read_options(src, fields, known), known


def _add_documents(
    p: Path,
    source: Any,
    split: str | SplitSpec | None,
    model: Any,
    errors: ErrorLog,
    progress: bool,
    device: str | None,
    runtime: str | None,
    fields: FieldMap,
) -> Index:
    opts = {"model": model} if model is not None else {}
    idx = Index.load(p, **opts)
    store = idx.corpus
    cls = _update_class(idx, UpdateOp.ADD)
    rel = _corpus_rel(p, idx.manifest, store)
    source, known = _tracked_source(p, idx, source, fields)
    with staged_index(p) as (staged, work):
        try:
            segment = CorpusStore.build(
                source,
                work / "segment",
                split=split if split is not None else str(store.manifest.get("split") or ""),
                errors=errors,
                progress=progress,
            )
        except InputError:
            if known is not None and not any(f.read for f in errors.files):
                raise _NothingNew() from None
            raise
        append_segment(store, segment, staged / rel)
        grown = CorpusStore(staged / rel)
        cls.add_rows(
            StagedUpdate(
                idx,
                staged,
                grown,
                work,
                segment=segment,
                progress=progress,
                device=device,
                runtime=runtime,
            )
        )
        if known is not None and known.replaced:  # the old versions of changed files
            tombstone(staged, read_manifest(staged), grown, known.replaced)
    return Index.load(p)


def delete_documents(
    path: str | Path, doc_ids: Sequence[str], files: Sequence[str] = ()
) -> dict[str, Any]:
    """Mark documents deleted: searches of the index at ``path`` stop returning them.
    ``files`` names files (as their documents' ``source`` records them: the path
    relative to the folder indexed) whose documents are deleted, every version.

    Writes a new tombstone file (all deleted documents so far and their passage rows)
    and then ``index.json`` naming it, so a crash leaves the old state.  Unknown ids and
    files are refused, naming them.  Returns ``{"deleted", "rows", "total_documents"}``."""
    p = real_index_path(path)
    if not doc_ids and not files:
        raise AnygrainError("name at least one document id (--doc ID) or file (--file PATH)")
    with writer_lock(p, "deleting documents"):  # two deletes would each drop the other's
        return _delete_documents(p, doc_ids, files)


def _documents_of_files(p: Path, store: CorpusStore, files: Sequence[str]) -> list[str]:
    """The documents read from each of ``files`` (every version); unknown ones refused."""
    wanted = {f.removeprefix("./").replace(os.sep, "/"): f for f in files}
    found: dict[str, list[str]] = {w: [] for w in wanted}
    for doc_id, meta in store.document_metas():
        src = meta.get("source")
        if src in found and "sha256" in meta:
            found[src].append(doc_id)
    missing = [wanted[w] for w, ids in found.items() if not ids]
    if missing:
        raise AnygrainError(
            f"{p}: no document read from {', '.join(repr(f) for f in missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            + " (give the path relative to the folder indexed); nothing was deleted"
        )
    return [d for ids in found.values() for d in ids]


def _delete_documents(p: Path, doc_ids: Sequence[str], files: Sequence[str] = ()) -> dict[str, Any]:
    idx = Index.load(p)
    m = idx.manifest
    store = idx.corpus
    _corpus_rel(p, m, store)
    if files:
        doc_ids = [*doc_ids, *_documents_of_files(p, store, files)]
    return tombstone(p, m, store, doc_ids)


def tombstone(
    p: Path, m: dict[str, Any], store: CorpusStore, doc_ids: Sequence[str]
) -> dict[str, Any]:
    """Write the tombstones of ``doc_ids`` (with those ``m`` records) into the index
    directory ``p`` whose manifest is ``m`` and corpus ``store``: the live index, or a
    staged one (every file is written new, never in place)."""
    old = read_tombstones(p, m)
    docs = dict(old.docs) if old else {}
    wanted = list(dict.fromkeys(str(d) for d in doc_ids))
    known = set(
        pc.filter(
            store.documents_table().column("doc_id"),
            pc.is_in(store.documents_table().column("doc_id"), value_set=pa.array(wanted)),
        ).to_pylist()
    )
    unknown = [d for d in wanted if d not in known]
    if unknown:
        raise AnygrainError(
            f"{p}: no document {', '.join(repr(d) for d in unknown[:5])}"
            + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            + " in the index; nothing was deleted"
        )
    col = store.passages_table().column("doc_id")
    new = [d for d in wanted if d not in docs]
    if new:
        mask = pc.is_in(col, value_set=pa.array(new)).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(mask)
        by_doc: dict[str, list[int]] = {d: [] for d in new}
        for r, d in zip(rows.tolist(), pc.take(col, pa.array(rows)).to_pylist(), strict=True):
            by_doc[d].append(r)
        docs.update(by_doc)
    tomb = Tombstones(docs, store.checksum)
    serial = int((m.get("tombstones") or {}).get("serial", 0)) + 1
    name = tombstone_name(serial)
    atomic_write_text(p / name, tomb.to_json())
    entry = {"size": (p / name).stat().st_size, ALGORITHM: hash_file(p / name)}
    files = {k: v for k, v in m.get("files", {}).items() if not k.startswith("tombstones-")}
    m2 = {
        **m,
        "files": {**files, name: entry},
        "tombstones": {
            "file": name,
            "serial": serial,
            "n_documents": len(docs),
            "n_rows": len(tomb.rows),
        },
    }
    atomic_write_text(p / MANIFEST, json.dumps(m2, indent=2, ensure_ascii=False))
    if old is not None:
        (p / str(m["tombstones"]["file"])).unlink(missing_ok=True)
    return {"deleted": new, "rows": sum(len(docs[d]) for d in new), "total_documents": len(docs)}


def compact_index(path: str | Path, *, progress: bool = True) -> Index:
    """Rebuild the index at ``path`` without its deleted documents (nothing is re-encoded
    but a compressed phrase index without its dump); returns it reopened.  Passage rows
    change (ids do not).  Without deletions it returns the index unchanged."""
    p = real_index_path(path)
    with writer_lock(p, UpdateOp.COMPACT.value):
        return _compact_index(p, progress)


def _compact_index(p: Path, progress: bool) -> Index:
    idx = Index.load(p)
    tomb = read_tombstones(p, idx.manifest)
    if tomb is None or not tomb.docs:
        return idx
    cls = _update_class(idx, UpdateOp.COMPACT)
    store = idx.corpus
    rel = _corpus_rel(p, idx.manifest, store)
    keep = np.setdiff1d(np.arange(len(store)), np.fromiter(tomb.rows, dtype=np.int64))
    if not len(keep):
        raise AnygrainError(f"{p}: every passage is deleted; an index needs at least one")
    with staged_index(p) as (staged, work):
        shutil.rmtree(staged / rel)
        write_subset(store, keep, set(tomb.docs), staged / rel)
        fresh(staged / str(idx.manifest["tombstones"]["file"]))
        small = CorpusStore(staged / rel)
        cls.compact_rows(StagedUpdate(idx, staged, small, work, keep_rows=keep, progress=progress))
        rewrite_manifest(staged, read_manifest(staged), tombstones=None)
    return Index.load(p)
