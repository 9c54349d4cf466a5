"""Adding documents to a phrase index and compacting it (``anygrain add`` / ``compact``).

Adding dumps only the new passages, appended to the token arrays and added to both FAISS
indexes; compacting re-encodes nothing (the kept passages' dump, or a new dump where it
was dropped for codes) and builds both FAISS indexes as a fresh build does
(:func:`~anygrain.phrase.build.finish_index`).  The BM25 part is rebuilt either way.  New
passages are encoded in the index's recorded precision where torch encodes them; ONNX
Runtime's graph encodes float32, said in one line and recorded in ``settings.adds``.  int8
is decided by each add as a build decides it (:func:`~anygrain.phrase.dump.resolve_int8`,
off where the build was asked ``int8=False``), and recorded there too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.encode.runtime import runs_on_onnx
from anygrain.index.manifest import read_manifest, rewrite_manifest
from anygrain.index.settings import BuildOptions
from anygrain.index.updater import StagedUpdate, corpus_field, fresh
from anygrain.phrase.build import SUBDIR, finish_index, recorded_settings, write_index
from anygrain.phrase.dump import END_OK, START_OK, DumpStats, dump_phrases, resolve_int8
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.lexical import SPARSE_SUBDIR
from anygrain.phrase.record import PhraseCounts, PhraseIndexRecord
from anygrain.sparse.update import rebuild_bm25
from anygrain.vectors.disk import add_block, split_whole
from anygrain.vectors.factory import parse_factory
from anygrain.vectors.faiss_index import FaissIndex

log = logging.getLogger(__name__)


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


def _phrase_lexical(u: StagedUpdate) -> None:
    """Rebuild a phrase index's BM25 part over the updated passages (its statistics are
    corpus-wide); nothing for an index without one."""
    idx = u.index
    assert isinstance(idx, PhraseIndex)
    if idx.lexical is not None:
        rebuild_bm25(u.staged / SPARSE_SUBDIR, idx.lexical.bm25, u.store, u.progress)


def update_bf16(u: StagedUpdate, what: str, *, add: bool = False) -> bool:
    """The precision ``u`` encodes passages in: the index's recorded one where torch encodes
    them, float32 where ONNX Runtime's passage graph does (the model of a base install, or
    ``--runtime onnx``), saying so in one line when that is not the index's (``what``: the
    passages, for that line; ``add``: an add, whose line names int8 where
    :func:`update_int8` picks it)."""
    from anygrain.encode.onnx_runtime import parse_runtime
    from anygrain.encode.runtime import Runtime

    idx = u.index
    assert isinstance(idx, PhraseIndex)
    if not idx.record.bf16:
        return False
    on_graph = parse_runtime(u.runtime) is Runtime.ONNX
    if not on_graph and not runs_on_onnx(idx.model):
        return True
    log.warning(
        "%s: built in bfloat16; %s encoded in %s on ONNX Runtime's passage graph (%s), "
        "as index.json records",
        idx.path,
        what,
        "int8" if add and update_int8(u, False) else "float32",
        "--runtime onnx" if on_graph else "torch is not installed",
    )
    return False


def update_int8(u: StagedUpdate, bf16: bool) -> bool:
    """Whether ``u`` encodes its passages in int8: auto, as a build decides it
    (:func:`~anygrain.phrase.dump.resolve_int8`), unless the index was asked ``int8=False``."""
    idx = u.index
    assert isinstance(idx, PhraseIndex)
    asked = getattr(idx.build_settings, "int8", None)
    options = BuildOptions(device=u.device, runtime=u.runtime)
    return resolve_int8(False if asked is False else None, bf16, options)


def add_rows(u: StagedUpdate) -> None:
    """Dump the new passages (``u.segment``) and append them to the staged phrase index."""
    idx = u.index
    assert isinstance(idx, PhraseIndex) and u.segment is not None
    base = u.staged / SUBDIR
    record = idx.record
    seg_dir = u.work / "dump"
    n = len(u.segment)
    what = f"the {n} passage{'s' * (n != 1)} added {'are' if n != 1 else 'is'}"
    bf16 = update_bf16(u, what, add=True)
    int8 = update_int8(u, bf16)
    stats = dump_phrases(
        u.segment,
        idx.model,
        u.work / "shards",
        seg_dir,
        threshold=record.threshold,
        bf16=bf16,
        progress=u.progress,
        device=u.device,
        runtime=u.runtime,
        int8=int8,
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
    blocks = dict(record.faiss_blocks or {})
    for side in ("start", "end"):
        vecs = np.load(seg_dir / f"{side}.npy", mmap_mode="r")
        new = np.ascontiguousarray(vecs[new_ids[side]], dtype=np.float32)
        if len(new) and not blocks.get(side) and parse_factory(record.factory or "").nlist:
            # a whole IVF index becomes block 0 of a blocked one: adding never loads its codes
            split_whole(base / f"{side}.faiss")
            blocks[side] = 1
        if blocks.get(side):  # a blocked index: the new vectors are one more block
            if len(new):
                first = int(idx.start_index.ntotal if side == "start" else idx.end_index.ntotal)
                add_block(base / f"{side}.faiss", int(blocks[side]), new, first)
                blocks[side] += 1
        else:
            index = FaissIndex.load(
                base / f"{side}.faiss", factory=record.factory or "", mmap=False
            )
            if len(new):
                index.index.add(new)
            index.save(base / f"{side}.faiss")
        _append_rows(base / f"{side}_ids.npy", new_ids[side] + n_tok, u.work)
        if (base / f"{side}.npy").exists():  # the float16 dump, when the index keeps it
            _append_rows(base / f"{side}.npy", np.asarray(vecs), u.work)
    _append_rows(base / "tokens.npy", tokens, u.work)
    _append_rows(base / "filter.npy", np.load(seg_dir / "filter.npy"), u.work)
    old_ptr = np.load(base / "passage_ptr.npy")
    seg_ptr = np.load(seg_dir / "passage_ptr.npy")
    np.save(fresh(base / "passage_ptr.npy"), np.concatenate([old_ptr, seg_ptr[1:] + old_ptr[-1]]))
    old = idx.manifest
    counts = PhraseCounts.from_manifest(old["counts"]).plus(PhraseCounts.of_dump(stats))
    _phrase_lexical(u)
    staged = read_manifest(u.staged)
    settings = PhraseIndexRecord.from_manifest(staged["settings"])
    if blocks:
        settings = dataclasses.replace(settings, faiss_blocks=blocks)
    # each add's precision: an index built in bf16 may hold float32 passages added since
    add: dict[str, Any] = {"passages": stats.n_passages, "bf16": bf16, "int8": int8}
    settings = dataclasses.replace(settings, adds=[*(settings.adds or []), add])
    rewrite_manifest(
        u.staged,
        staged,
        corpus=corpus_field(old, u.store),
        counts=counts.to_manifest(base),
        settings=settings.to_manifest(),
    )


def compact_rows(u: StagedUpdate) -> None:
    """The staged phrase index over the kept rows (``u.keep_rows``) only."""
    idx = u.index
    assert isinstance(idx, PhraseIndex) and u.keep_rows is not None
    base = u.staged / SUBDIR
    old = idx.manifest
    if not (base / "start.npy").exists():
        # the float16 dump was dropped for compressed codes: dump the kept passages again
        shutil.rmtree(base)
        shutil.rmtree(u.staged / SPARSE_SUBDIR, ignore_errors=True)  # linked to the original
        lang = idx.lexical.bm25.config.lang if idx.lexical is not None else None
        recorded_model = old.get("model") or {}
        bf16 = update_bf16(u, "every passage kept is")
        write_index(
            u.staged,
            u.store,
            idx.model,
            dataclasses.replace(recorded_settings(idx.record, lang=lang), bf16=bf16),
            BuildOptions(progress=u.progress),
            work=u.work / "shards",
            model_name=recorded_model.get("name"),
            build=idx.build_settings,  # type: ignore[arg-type]
            ref=recorded_model.get("ref", ""),  # a model referenced by name stays referenced
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
        fresh(base / name if "." in name else base / f"{name}.npy")
    for block in [*base.glob("start.b*.faiss"), *base.glob("end.b*.faiss")]:
        fresh(block)  # rebuilt below, in blocks again if the budget asks for them
    for name, arr in arrays.items():
        np.save(fresh(base / f"{name}.npy"), arr)
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
    _phrase_lexical(u)
    finish_index(
        u.staged,
        u.store,
        stats,
        recorded_settings(idx.record),
        # what the dump made, as compacting has always kept it: the keep fraction, build
        # settings and refiltering source are not carried over
        record=dataclasses.replace(
            idx.record.dump_part(), keep=None, build=None, refiltered_from=None
        ),
        model_info=old["model"],
        progress=u.progress,
        timings={"dump_seconds": 0.0},
    )
