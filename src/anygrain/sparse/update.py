"""Adding documents to a BM25 index and compacting it (``anygrain add`` / ``compact``).

BM25's idf and average length are corpus-wide, so adding or removing passages changes
every stored score: both updates rebuild the index from the updated corpus, as a fresh
build does (tokenised again, no model time).  :mod:`anygrain.index.updater` stages the
copy these functions write in and swaps it in; :class:`~anygrain.sparse.bm25.BM25Index`
delegates its ``add_rows`` / ``compact_rows`` here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from anygrain.corpus.store import CorpusStore
from anygrain.index.manifest import read_manifest, rewrite_manifest
from anygrain.index.updater import StagedUpdate
from anygrain.sparse.bm25 import BM25Index, Bm25Settings, write_bm25_index


def rebuild_bm25(part: Path, bm25: BM25Index, store: CorpusStore, progress: bool) -> None:
    """BM25 of ``store`` with ``bm25``'s settings, written over ``part`` (the BM25 index
    directory: a whole index, or the part a hybrid or phrase index carries)."""
    cfg = bm25.config
    shutil.rmtree(part / "bm25", ignore_errors=True)
    old = read_manifest(part)
    same = Bm25Settings(
        # a detected language is detected again, per document: added ones may differ
        lang=None if old["settings"].get("lang_detected") else cfg.lang,
        k1=cfg.k1,
        b=cfg.b,
        include_title=cfg.include_title,
        stemming=cfg.stemming,
        method=cfg.method,
    )
    build = bm25.build_settings
    assert build is None or isinstance(build, Bm25Settings)
    write_bm25_index(part, store, same, progress=progress, build=build)
    new = read_manifest(part)
    # the language the original build detected stays recorded as detected
    new["settings"]["lang_detected"] = old["settings"].get("lang_detected", False)
    rewrite_manifest(part, {**old, "settings": new["settings"]}, corpus=new["corpus"])


def update_bm25(u: StagedUpdate) -> None:
    """Added or compacted alike: the staged BM25 index rebuilt over the updated corpus."""
    assert isinstance(u.index, BM25Index)
    rebuild_bm25(u.staged, u.index, u.store, u.progress)


# BM25 has no per-passage state worth keeping: adding and compacting both rebuild it
add_rows = compact_rows = update_bm25
