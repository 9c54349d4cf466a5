"""A sharded BM25 index searched as one (:mod:`anygrain.composite.sharded` opens it).

Every shard is scored with the *whole corpus's* document frequencies and mean length
(:class:`~anygrain.sparse.bm25.CollectionStats`), so a passage scores in its shard what it
scores unsharded; the shards are searched in a thread pool and their top-k merged by
score, ties by global row (:func:`~anygrain.index.shard_view.merge_top_k`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.index.base import Index
from anygrain.index.shard_view import ShardView, merge_top_k, pool_map
from anygrain.sparse.bm25 import BM25Index


class ShardedBM25(ShardView, BM25Index):
    """A BM25 index over shards scored with the whole corpus's statistics, merged by score."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        shards: list[BM25Index],
        bounds: list[tuple[int, int]],
    ) -> None:
        Index.__init__(self, path, manifest)  # no retriever of its own: the shards have them
        self.store = store
        self.analyzer = shards[0].analyzer
        self.config = shards[0].config
        self.shards, self.bounds = shards, bounds

    def search_rows(self, queries: Sequence[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        found = pool_map(lambda s: s.search_rows(queries, k), self.shards)
        return merge_top_k(
            [r for r, _ in found], [s for _, s in found], [a for a, _ in self.bounds], k
        )

    def score_rows(self, queries: Sequence[str], rows: np.ndarray) -> np.ndarray:
        return self.summed_over_shards(lambda s, r: s.score_rows(queries, r), rows)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shards": self.shard_info()}
