"""Adding documents to a dense index and compacting it (``anygrain add`` / ``compact``).

Adding encodes only the new passages (the encode engine, the index's own passage
encoder), writes them as new vector shards and adds them to the FAISS index (a flat
index exactly; IVF/PQ with the quantiser trained on the old vectors, not retrained).
Compacting re-encodes nothing: the kept rows' stored vectors are written again and the
FAISS index is built over them (an IVF/PQ index trained again, as a fresh build would).

:mod:`anygrain.index.updater` stages the copy these functions write in and swaps it in;
:class:`~anygrain.dense.index.DenseIndex` delegates its ``add_rows`` / ``compact_rows``
here, and a hybrid index updates its dense part with the same functions.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.dense.index import SETTINGS_FILE, DenseIndex
from anygrain.dense.shards import SHARDS_MANIFEST, encode_corpus, save_vectors, shard_name
from anygrain.index.manifest import read_manifest, rewrite_manifest
from anygrain.index.updater import StagedUpdate, corpus_field, fresh
from anygrain.utils.atomic import atomic_write_text
from anygrain.vectors.faiss_index import FaissIndex


def append_dense(
    part: Path,
    dense: DenseIndex,
    store: CorpusStore,
    segment: CorpusStore,
    work: Path,
    progress: bool,
    device: str | None = None,
    runtime: str | None = None,
) -> None:
    """Encode ``segment`` only (on ``runtime``: auto, onnx or torch; None: auto), add its
    vectors to the FAISS index and its shards to the vectors directory of the dense index
    at ``part`` (files under ``part/subdir``)."""
    base = part / dense.subdir
    settings = json.loads((base / SETTINGS_FILE).read_text(encoding="utf-8"))
    vdir = base / "vectors"
    sm = json.loads((vdir / SHARDS_MANIFEST).read_text(encoding="utf-8"))
    new = encode_corpus(
        segment,
        dense.passage_encoder(runtime=runtime, device=device),  # as a build picks
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


def subset_dense(part: Path, dense: DenseIndex, store: CorpusStore, keep: np.ndarray) -> None:
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
        dense.questions,  # its dim and passage settings: nothing is encoded, no model loaded
        vdir,
        shard_size=int(sm["shard_size"]),
        dtype=settings["dtype"],
        bf16=bool(settings.get("bf16", False)),
    )
    fx = FaissIndex.build(shards, settings["factory"])
    fresh(base / "faiss.index")
    fx.save(base / "faiss.index")
    settings.update(n_vectors=fx.ntotal, nprobe=fx.nprobe, ef_search=fx.ef_search)
    atomic_write_text(base / SETTINGS_FILE, json.dumps(settings, indent=2))


def rewrite_dense_manifest(part: Path, dense: DenseIndex, store: CorpusStore) -> None:
    """``index.json`` of the dense index at ``part``: the updated corpus and settings."""
    old = read_manifest(part)
    settings = json.loads((part / dense.subdir / SETTINGS_FILE).read_text(encoding="utf-8"))
    rewrite_manifest(
        part, old, corpus=corpus_field(old, store), settings={**old["settings"], "dense": settings}
    )


def add_rows(u: StagedUpdate) -> None:
    assert isinstance(u.index, DenseIndex) and u.segment is not None
    append_dense(u.staged, u.index, u.store, u.segment, u.work, u.progress, u.device, u.runtime)
    rewrite_dense_manifest(u.staged, u.index, u.store)


def compact_rows(u: StagedUpdate) -> None:
    assert isinstance(u.index, DenseIndex) and u.keep_rows is not None
    subset_dense(u.staged, u.index, u.store, u.keep_rows)
    rewrite_dense_manifest(u.staged, u.index, u.store)
