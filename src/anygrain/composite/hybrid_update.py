"""Adding documents to a built hybrid index and compacting it (``anygrain add`` / ``compact``).

Each part is updated as an index of its kind would be, over the one shared corpus: the
BM25 part rebuilt (:mod:`anygrain.sparse.update`), the dense part appended to or
subset (:mod:`anygrain.dense.update`); then the hybrid ``index.json``.  A hybrid index
combined from existing indexes is refused before this
(:meth:`~anygrain.composite.hybrid.HybridIndex.check_update`): its parts are updated
on their own.
"""

from __future__ import annotations

from anygrain.composite.hybrid import HybridIndex
from anygrain.dense.update import append_dense, rewrite_dense_manifest, subset_dense
from anygrain.index.manifest import read_manifest, rewrite_manifest
from anygrain.index.updater import StagedUpdate, corpus_field
from anygrain.sparse.update import rebuild_bm25


def add_rows(u: StagedUpdate) -> None:
    idx = u.index
    assert isinstance(idx, HybridIndex) and u.segment is not None
    rebuild_bm25(u.staged / "sparse", idx.sparse, u.store, u.progress)
    append_dense(
        u.staged / "dense", idx.dense, u.store, u.segment, u.work, u.progress, u.device, u.runtime
    )
    rewrite_dense_manifest(u.staged / "dense", idx.dense, u.store)
    rewrite_manifest(u.staged, read_manifest(u.staged), corpus=corpus_field(idx.manifest, u.store))


def compact_rows(u: StagedUpdate) -> None:
    idx = u.index
    assert isinstance(idx, HybridIndex) and u.keep_rows is not None
    rebuild_bm25(u.staged / "sparse", idx.sparse, u.store, u.progress)
    subset_dense(u.staged / "dense", idx.dense, u.store, u.keep_rows)
    rewrite_dense_manifest(u.staged / "dense", idx.dense, u.store)
    rewrite_manifest(u.staged, read_manifest(u.staged), corpus=corpus_field(idx.manifest, u.store))
