"""Adding documents to an index, deleting them and compacting: one update per index kind.

Every update is atomic.  The index directory is staged as a sibling whose files are
hard links to the live ones (no copy), the update replaces the files it changes there
(each is unlinked or renamed over first, so a live file never changes in place), and
the staged directory is swapped in at the end (:func:`anygrain.utils.atomic.atomic_dir`).
An exception or a crash leaves the old index as it was.

What :func:`add_documents` recomputes, per kind:

* corpus store: the new documents are read and split into a store of their own (with
  the split the corpus was built with), whose Arrow files become a new segment of the
  corpus; old passages keep their rows; the id table and content checksum are rebuilt
  (O(passages), no model);
* ``bm25``: rebuilt from the grown corpus (tokenised again).  BM25's idf and average
  length are corpus-wide, so every stored score changes when documents are added; the
  rebuild is what a fresh build does and costs no model time;
* ``dense``: only the new passages are encoded (the encode engine, the index's own
  passage encoder), written as new vector shards and added to the FAISS index (a flat
  index exactly; IVF/PQ with the quantiser trained on the old vectors, not retrained);
* ``phrase``: only the new passages are dumped; their token arrays are appended and their
  start/end vectors added to both FAISS indexes (with their trained quantisers);
* ``hybrid`` (built): both parts as above, over the one shared corpus.

:func:`delete_documents` writes tombstones (:mod:`anygrain.index.tombstones`);
:func:`compact_index` rebuilds without the deleted documents, re-encoding nothing: dense
vectors and phrase dumps are taken from the index (an index whose phrase dump was
dropped for compressed codes is dumped again), BM25 is rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anygrain.composite.hybrid import HybridIndex
from anygrain.corpus.append import append_segment, write_subset
from anygrain.corpus.splitters import SplitSpec
from anygrain.corpus.store import CorpusStore
from anygrain.dense.faiss_index import FaissIndex
from anygrain.dense.index import SETTINGS_FILE, DenseIndex
from anygrain.dense.shards import SHARDS_MANIFEST, encode_corpus, save_vectors, shard_name
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.index.base import (
    MANIFEST,
    Index,
    IndexKind,
    read_manifest,
    rewrite_manifest,
)
from anygrain.index.tombstones import Tombstones, read_tombstones, tombstone_name
from anygrain.phrase.dump import END_OK, START_OK, DumpStats, dump_phrases
from anygrain.phrase.index import SUBDIR as PHRASE_DIR
from anygrain.phrase.index import PhraseIndex, finish_index
from anygrain.phrase.lexical import SPARSE_SUBDIR
from anygrain.sparse.bm25 import BM25Index
from anygrain.utils.atomic import atomic_dir, atomic_write_text, is_temporary_name
from anygrain.utils.checksums import ALGORITHM, hash_file
from anygrain.utils.device import resolve_device


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
def _staged(path: Path) -> Iterator[tuple[Path, Path]]:
    """``(staged index dir, scratch dir)``: the index is replaced by the staged directory
    when the block ends without an exception; scratch is removed either way."""
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


def _corpus_field(old: dict[str, Any], store: CorpusStore) -> dict[str, Any]:
    return {**old["corpus"], "checksum": store.checksum, "n_passages": len(store)}


def _fresh(path: Path) -> Path:
    """Unlink ``path`` before writing it: it may be a hard link to the live index."""
    path.unlink(missing_ok=True)
    return path


# --- per-kind updates ---------------------------------------------------------------------
class Update:
    """What an update of one index needs: the index as open, the staged directory, the
    grown (or compacted) corpus in it, the new documents' own store (add only), scratch."""

    def __init__(
        self,
        index: Index,
        staged: Path,
        store: CorpusStore,
        work: Path,
        *,
        segment: CorpusStore | None = None,
        keep_rows: np.ndarray | None = None,
        progress: bool = False,
        device: str | None = None,
    ) -> None:
        self.index = index
        self.staged = staged
        self.store = store
        self.work = work
        self.segment = segment
        self.keep_rows = keep_rows
        self.progress = progress
        self.device = device  # where new passages are encoded (None: auto)


Updater = Callable[[Update], None]
_ADDERS: dict[IndexKind, Updater] = {}
_COMPACTORS: dict[IndexKind, Updater] = {}


def _register(table: dict[IndexKind, Updater], kind: IndexKind) -> Callable[[Updater], Updater]:
    def deco(fn: Updater) -> Updater:
        table[kind] = fn
        return fn

    return deco


def _bm25_rebuild(part: Path, bm25: BM25Index, store: CorpusStore, progress: bool) -> None:
    """BM25 of ``store`` with ``bm25``'s settings, written over ``part`` (statistics are
    corpus-wide, so adding or removing passages changes every score)."""
    cfg = bm25.config
    shutil.rmtree(part / "bm25", ignore_errors=True)
    old = read_manifest(part)
    BM25Index.write(
        part,
        store,
        lang=cfg.lang,
        k1=cfg.k1,
        b=cfg.b,
        include_title=cfg.include_title,
        stemming=cfg.stemming,
        method=cfg.method,
        progress=progress,
        build=bm25.build_settings,  # type: ignore[arg-type]
    )
    new = read_manifest(part)
    # the language the original build detected stays recorded as detected
    new["settings"]["lang_detected"] = old["settings"].get("lang_detected", False)
    rewrite_manifest(part, {**old, "settings": new["settings"]}, corpus=new["corpus"])


@_register(_ADDERS, IndexKind.BM25)
def _add_bm25(u: Update) -> None:
    assert isinstance(u.index, BM25Index)
    _bm25_rebuild(u.staged, u.index, u.store, u.progress)


def _dense_append(
    part: Path,
    dense: DenseIndex,
    store: CorpusStore,
    segment: CorpusStore,
    work: Path,
    progress: bool,
    device: str | None = None,
) -> None:
    """Encode ``segment`` only, add its vectors to the FAISS index and its shards to the
    vectors directory of the dense index at ``part`` (files under ``part/subdir``)."""
    base = part / dense.subdir
    settings = json.loads((base / SETTINGS_FILE).read_text(encoding="utf-8"))
    vdir = base / "vectors"
    sm = json.loads((vdir / SHARDS_MANIFEST).read_text(encoding="utf-8"))
    new = encode_corpus(
        segment,
        dense.model,
        work / "vectors",
        shard_size=int(sm["shard_size"]),
        dtype=settings["dtype"],
        bf16=bool(settings.get("bf16", False)),
        progress=progress,
        label=str(settings["model"].get("name", "")),
        device=device,
    )
    fx = FaissIndex.load(base / "faiss.index", factory=settings["factory"], mmap=False)
    for _, batch in new.iter_batches():
        fx.index.add(batch)  # IVF/PQ: assigned and coded with the trained quantiser
    fx.save(base / "faiss.index")  # renamed over: the live file is left alone
    n_old, k0 = int(sm["n"]), len(sm["shards"])
    for j, s in enumerate(new.shards):
        name = shard_name(k0 + j)
        os.replace(new.path / s.file, vdir / name)
        sm["shards"].append(
            {"file": name, "start": s.start + n_old, "end": s.end + n_old, "nbytes": s.nbytes}
        )
    sm.update(n=n_old + len(segment), corpus_checksum=store.checksum)
    atomic_write_text(vdir / SHARDS_MANIFEST, json.dumps(sm, indent=2))
    settings["n_vectors"] = fx.ntotal
    atomic_write_text(base / SETTINGS_FILE, json.dumps(settings, indent=2))


def _dense_manifest(part: Path, dense: DenseIndex, store: CorpusStore) -> None:
    old = read_manifest(part)
    settings = json.loads((part / dense.subdir / SETTINGS_FILE).read_text(encoding="utf-8"))
    rewrite_manifest(
        part, old, corpus=_corpus_field(old, store), settings={**old["settings"], "dense": settings}
    )


@_register(_ADDERS, IndexKind.DENSE)
def _add_dense(u: Update) -> None:
    assert isinstance(u.index, DenseIndex) and u.segment is not None
    _dense_append(u.staged, u.index, u.store, u.segment, u.work, u.progress, u.device)
    _dense_manifest(u.staged, u.index, u.store)


def _append_rows(path: Path, extra: np.ndarray, work: Path) -> None:
    """``path`` (an .npy array) with ``extra`` rows after its own, renamed over it."""
    old = np.load(path, mmap_mode="r")
    tmp = work / f"append.{path.name}"
    mm = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=old.dtype, shape=(len(old) + len(extra), *old.shape[1:])
    )
    mm[: len(old)] = old
    mm[len(old) :] = extra
    mm.flush()
    del mm, old
    os.replace(tmp, path)


@_register(_ADDERS, IndexKind.PHRASE)
def _add_phrase(u: Update) -> None:
    idx = u.index
    assert isinstance(idx, PhraseIndex) and u.segment is not None
    base = u.staged / PHRASE_DIR
    s = idx.manifest["settings"]
    seg_dir = u.work / "dump"
    stats = dump_phrases(
        u.segment,
        idx.model,
        u.work / "shards",
        seg_dir,
        threshold=s["threshold"],
        bf16=bool(s.get("bf16", False)),
        progress=u.progress,
        device=u.device,
    )
    n_tok = len(idx.table)
    n_rows = len(idx.table.passage_ptr) - 1
    tokens = np.array(np.load(seg_dir / "tokens.npy"))
    tokens[:, 0] += n_rows  # the new passages' rows follow the old ones
    flags = tokens[:, 3]
    new_ids = {
        "start": np.flatnonzero(flags & START_OK).astype(np.int64),
        "end": np.flatnonzero(flags & END_OK).astype(np.int64),
    }
    for side in ("start", "end"):
        vecs = np.load(seg_dir / f"{side}.npy", mmap_mode="r")
        index = FaissIndex.load(base / f"{side}.faiss", factory=s.get("factory", ""), mmap=False)
        if len(new_ids[side]):
            index.index.add(np.ascontiguousarray(vecs[new_ids[side]], dtype=np.float32))
        index.save(base / f"{side}.faiss")
        _append_rows(base / f"{side}_ids.npy", new_ids[side] + n_tok, u.work)
        if (base / f"{side}.npy").exists():  # the float16 dump, when the index keeps it
            _append_rows(base / f"{side}.npy", np.asarray(vecs), u.work)
    _append_rows(base / "tokens.npy", tokens, u.work)
    _append_rows(base / "filter.npy", np.load(seg_dir / "filter.npy"), u.work)
    old_ptr = np.load(base / "passage_ptr.npy")
    seg_ptr = np.load(seg_dir / "passage_ptr.npy")
    np.save(_fresh(base / "passage_ptr.npy"), np.concatenate([old_ptr, seg_ptr[1:] + old_ptr[-1]]))
    old = idx.manifest
    c = dict(old["counts"])
    c["passages"] += stats.n_passages
    c["tokens_seen"] += stats.n_tokens_seen
    c["tokens_kept"] += stats.n_kept
    c["start_vectors"] += stats.n_start
    c["end_vectors"] += stats.n_end
    _phrase_sizes(base, c)
    _phrase_lexical(u)
    rewrite_manifest(
        u.staged, read_manifest(u.staged), corpus=_corpus_field(old, u.store), counts=c
    )


def _phrase_lexical(u: Update) -> None:
    """Rebuild a phrase index's BM25 part over the updated passages (its statistics are
    corpus-wide); nothing for an index without one."""
    idx = u.index
    assert isinstance(idx, PhraseIndex)
    if idx.lexical is not None:
        _bm25_rebuild(u.staged / SPARSE_SUBDIR, idx.lexical.bm25, u.store, u.progress)


def _phrase_sizes(base: Path, c: dict[str, Any]) -> None:
    """The counts derived from the others and from file sizes, as ``finish_index`` sets them."""
    sizes = {f.name: f.stat().st_size for f in base.iterdir() if f.is_file()}
    n_p = max(int(c["passages"]), 1)
    c["bytes"] = sum(sizes.values())
    c["bytes_per_passage"] = round(c["bytes"] / n_p, 1)
    c["vectors_per_passage"] = round((c["start_vectors"] + c["end_vectors"]) / n_p, 3)
    c["tokens_kept_per_passage"] = round(c["tokens_kept"] / n_p, 3)
    c["kept_fraction"] = round(c["tokens_kept"] / max(int(c["tokens_seen"]), 1), 4)
    c["faiss_bytes"] = sizes.get("start.faiss", 0) + sizes.get("end.faiss", 0)
    c["dump_bytes"] = sizes.get("start.npy", 0) + sizes.get("end.npy", 0)


@_register(_ADDERS, IndexKind.HYBRID)
def _add_hybrid(u: Update) -> None:
    idx = u.index
    assert isinstance(idx, HybridIndex) and u.segment is not None
    _bm25_rebuild(u.staged / "sparse", idx.sparse, u.store, u.progress)
    _dense_append(u.staged / "dense", idx.dense, u.store, u.segment, u.work, u.progress, u.device)
    _dense_manifest(u.staged / "dense", idx.dense, u.store)
    rewrite_manifest(u.staged, read_manifest(u.staged), corpus=_corpus_field(idx.manifest, u.store))


# --- compaction ---------------------------------------------------------------------------
@_register(_COMPACTORS, IndexKind.BM25)
def _compact_bm25(u: Update) -> None:
    assert isinstance(u.index, BM25Index)
    _bm25_rebuild(u.staged, u.index, u.store, u.progress)


def _dense_subset(part: Path, dense: DenseIndex, store: CorpusStore, keep: np.ndarray) -> None:
    """The dense index at ``part`` over the kept rows' stored vectors (nothing re-encoded;
    an IVF/PQ index is trained again on them, as a fresh build would be)."""
    base = part / dense.subdir
    settings = json.loads((base / SETTINGS_FILE).read_text(encoding="utf-8"))
    vdir = base / "vectors"
    sm = json.loads((vdir / SHARDS_MANIFEST).read_text(encoding="utf-8"))
    vectors = dense.vectors.rows(keep)
    shutil.rmtree(vdir)
    shards = save_vectors(
        vectors,
        store,
        dense.model,
        vdir,
        shard_size=int(sm["shard_size"]),
        dtype=settings["dtype"],
        bf16=bool(settings.get("bf16", False)),
    )
    fx = FaissIndex.build(shards, settings["factory"])
    _fresh(base / "faiss.index")
    fx.save(base / "faiss.index")
    settings.update(n_vectors=fx.ntotal, nprobe=fx.nprobe, ef_search=fx.ef_search)
    atomic_write_text(base / SETTINGS_FILE, json.dumps(settings, indent=2))


@_register(_COMPACTORS, IndexKind.DENSE)
def _compact_dense(u: Update) -> None:
    assert isinstance(u.index, DenseIndex) and u.keep_rows is not None
    _dense_subset(u.staged, u.index, u.store, u.keep_rows)
    _dense_manifest(u.staged, u.index, u.store)


@_register(_COMPACTORS, IndexKind.PHRASE)
def _compact_phrase(u: Update) -> None:
    idx = u.index
    assert isinstance(idx, PhraseIndex) and u.keep_rows is not None
    base = u.staged / PHRASE_DIR
    old = idx.manifest
    s = old["settings"]
    if not (base / "start.npy").exists():
        # the float16 dump was dropped for compressed codes: dump the kept passages again
        shutil.rmtree(base)
        shutil.rmtree(u.staged / SPARSE_SUBDIR, ignore_errors=True)  # linked to the original
        PhraseIndex.write(
            u.staged,
            u.store,
            idx.model,
            work=u.work / "shards",
            threshold=s["threshold"],
            factory=s["factory"],
            bf16=bool(s.get("bf16", False)),
            max_phrase_words=s["max_phrase_words"],
            progress=u.progress,
            compress=s.get("compress", "none"),
            pq_m=s.get("pq_m"),
            keep_dump=s.get("dump"),
            build=idx.build_settings,  # type: ignore[arg-type]
            lexical=idx.fusion,
            lexical_lang=idx.lexical.bm25.config.lang if idx.lexical is not None else None,
        )
        return
    keep = u.keep_rows
    ptr = np.asarray(idx.table.passage_ptr)
    counts = np.diff(ptr)[keep]
    all_tokens = np.load(base / "tokens.npy", mmap_mode="r")
    sel = np.flatnonzero(np.isin(idx.table.row, keep))
    tokens = np.array(all_tokens[sel])
    tokens[:, 0] = np.searchsorted(keep, tokens[:, 0])  # rows renumbered in order
    new_ptr = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_ptr[1:])
    arrays = {
        "start": np.asarray(np.load(base / "start.npy", mmap_mode="r")[sel]),
        "end": np.asarray(np.load(base / "end.npy", mmap_mode="r")[sel]),
        "filter": np.asarray(np.load(base / "filter.npy", mmap_mode="r")[sel]),
        "tokens": tokens,
        "passage_ptr": new_ptr,
    }
    for name in ("start_ids", "end_ids", "start.faiss", "end.faiss"):
        _fresh(base / name if "." in name else base / f"{name}.npy")
    for name, arr in arrays.items():
        np.save(_fresh(base / f"{name}.npy"), arr)
    flags = tokens[:, 3]
    c = old["counts"]
    kept = len(tokens)
    stats = DumpStats(
        n_passages=len(keep),
        # tokens seen per passage are not stored: scaled by the kept share
        n_tokens_seen=round(int(c["tokens_seen"]) * kept / max(int(c["tokens_kept"]), 1)),
        n_kept=kept,
        n_start=int(np.count_nonzero(flags & START_OK)),
        n_end=int(np.count_nonzero(flags & END_OK)),
        shards_done_before=0,
    )
    pre = {
        k: s[k]
        for k in (
            "max_phrase_words",
            "threshold",
            "dim",
            "dtype",
            "include_title",
            "max_passage_length",
            "doc_stride",
            "bf16",
            "sparse",
        )
        if k in s
    }
    _phrase_lexical(u)
    finish_index(
        u.staged,
        u.store,
        stats,
        settings=pre,
        model_info=old["model"],
        factory=s.get("factory"),
        progress=u.progress,
        timings={"dump_seconds": 0.0},
        compress=s.get("compress", "none"),
        pq_m=s.get("pq_m"),
        keep_dump=s.get("dump"),
    )


@_register(_COMPACTORS, IndexKind.HYBRID)
def _compact_hybrid(u: Update) -> None:
    idx = u.index
    assert isinstance(idx, HybridIndex) and u.keep_rows is not None
    _bm25_rebuild(u.staged / "sparse", idx.sparse, u.store, u.progress)
    _dense_subset(u.staged / "dense", idx.dense, u.store, u.keep_rows)
    _dense_manifest(u.staged / "dense", idx.dense, u.store)
    rewrite_manifest(u.staged, read_manifest(u.staged), corpus=_corpus_field(idx.manifest, u.store))


# --- operations ---------------------------------------------------------------------------
def _updater(table: dict[IndexKind, Updater], index: Index, what: str) -> Updater:
    """The update of ``index``'s kind in ``table``; refused, naming the index, for a kind
    that has none, a hybrid index combined from existing ones, or a sharded index (it
    opens as a view of its shards' kind, so its manifest says what it is)."""
    if index.manifest.get("kind") == IndexKind.SHARDED.value:
        of = ((index.manifest.get("settings") or {}).get("build") or {}).get("of")
        raise AnygrainError(
            f"{index.path}: {what} is not supported for a sharded index yet"
            + (f" (of {of} shards)" if of else "")
            + "; rebuild it from the grown source with --shards, or build an unsharded index"
        )
    fn = table.get(index.kind)
    if fn is None or (
        index.kind is IndexKind.HYBRID
        and (index.manifest.get("components") or {}).get("sparse", {}).get("reused")
    ):
        raise AnygrainError(
            f"{index.path}: {what} is not supported for a {index.kind.value} index"
            + (" combined from existing indexes; update its parts" if fn is not None else "")
        )
    return fn


def add_documents(
    path: str | Path,
    source: Any,
    *,
    split: str | SplitSpec | None = None,
    model: Any = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
    device: str | None = None,
) -> Index:
    """Add the documents of ``source`` to the index at ``path`` (see the module docstring
    for what each kind recomputes); returns the index reopened.  ``device``: where the new
    passages are encoded (None: auto).

    ``split`` defaults to the one the corpus was built with.  ``model`` must be the
    index's own encoder (same fingerprint; by default the one stored in the index).
    Passage or document ids the index already holds are refused, naming them."""
    p = Path(path)
    resolve_device(device)  # a missing GPU is refused before anything is read
    opts = {"model": model} if model is not None else {}
    idx = Index.load(p, **opts)
    store = idx.corpus
    fn = _updater(_ADDERS, idx, "adding documents")
    rel = _corpus_rel(p, idx.manifest, store)
    with _staged(p) as (staged, work):
        segment = CorpusStore.build(
            source,
            work / "segment",
            split=split if split is not None else str(store.manifest.get("split") or ""),
            errors=errors,
            progress=progress,
        )
        append_segment(store, segment, staged / rel)
        grown = CorpusStore(staged / rel)
        fn(Update(idx, staged, grown, work, segment=segment, progress=progress, device=device))
    return Index.load(p)


def delete_documents(path: str | Path, doc_ids: Sequence[str]) -> dict[str, Any]:
    """Mark documents deleted: searches of the index at ``path`` stop returning them.

    Writes a new tombstone file (all deleted documents so far and their passage rows)
    and then ``index.json`` naming it, so a crash leaves the old state.  Unknown ids are
    refused, naming them.  Returns ``{"deleted", "rows", "total_documents"}``."""
    p = Path(path)
    if not doc_ids:
        raise AnygrainError("name at least one document id to delete (--doc ID)")
    idx = Index.load(p)
    m = idx.manifest
    store = idx.corpus
    _corpus_rel(p, m, store)
    old = read_tombstones(p, m)
    docs = dict(old.docs) if old else {}
    wanted = list(dict.fromkeys(str(d) for d in doc_ids))
    known = set(
        pc.filter(
            store._docs().column("doc_id"),
            pc.is_in(store._docs().column("doc_id"), value_set=pa.array(wanted)),
        ).to_pylist()
    )
    unknown = [d for d in wanted if d not in known]
    if unknown:
        raise AnygrainError(
            f"{p}: no document {', '.join(repr(d) for d in unknown[:5])}"
            + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            + " in the index; nothing was deleted"
        )
    col = store._passages.column("doc_id")
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
    p = Path(path)
    idx = Index.load(p)
    tomb = read_tombstones(p, idx.manifest)
    if tomb is None or not tomb.docs:
        return idx
    fn = _updater(_COMPACTORS, idx, "compacting")
    store = idx.corpus
    rel = _corpus_rel(p, idx.manifest, store)
    keep = np.setdiff1d(np.arange(len(store)), np.fromiter(tomb.rows, dtype=np.int64))
    if not len(keep):
        raise AnygrainError(f"{p}: every passage is deleted; an index needs at least one")
    with _staged(p) as (staged, work):
        shutil.rmtree(staged / rel)
        write_subset(store, keep, set(tomb.docs), staged / rel)
        _fresh(staged / str(idx.manifest["tombstones"]["file"]))
        small = CorpusStore(staged / rel)
        fn(Update(idx, staged, small, work, keep_rows=keep, progress=progress))
        rewrite_manifest(staged, read_manifest(staged), tombstones=None)
    return Index.load(p)
