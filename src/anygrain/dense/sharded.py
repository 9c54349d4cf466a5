"""A sharded dense index searched as one (:mod:`anygrain.composite.sharded` opens it).

The shards' FAISS indexes sit under one threaded ``faiss.IndexShards`` (successive ids),
which searches the shards in parallel and merges their top-k by score; search parameters
(``nprobe``, ``ef_search``) pass through to every shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.dense.index import DenseIndex
from anygrain.index.base import Index
from anygrain.index.shard_view import ShardView
from anygrain.vectors.faiss_index import shard_faiss


class ShardedDense(ShardView, DenseIndex):
    """A dense index over shards: one ``IndexShards`` search, exact scores from the shards."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        shards: list[DenseIndex],
        bounds: list[tuple[int, int]],
    ) -> None:
        first = shards[0]
        fx = shard_faiss([s.faiss for s in shards])
        # the first shard's model, or what loads it: questions on ONNX Runtime load no torch
        model = first.model_or_loader()
        super().__init__(
            path,
            manifest,
            store,
            model,
            fx,
            first.settings,
            first.subdir,
            questions=first.questions,
        )
        self.shards, self.bounds = shards, bounds

    def score_rows(self, qvecs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.summed_over_shards(lambda s, r: s.score_rows(qvecs, r), rows)

    def describe(self) -> dict[str, Any]:
        return {
            **Index.describe(self),
            "faiss": {"ntotal": self.faiss.ntotal, "nprobe": self.faiss.nprobe},
            "shards": self.shard_info(),
        }
