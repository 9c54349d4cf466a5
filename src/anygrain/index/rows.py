"""The kinds whose hits are made from ``(rows, scores)`` arrays: BM25, dense, hybrid and
their sharded views.

Such a kind searches encoded queries into arrays (:meth:`RowsIndex.search_rows_encoded`,
rows -1 where there is no hit), which a filtered search masks before any hit is made
(:mod:`anygrain.index.filters`); :meth:`RowsIndex.search_encoded` makes the hits of them,
once for every such kind.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.base import Index, keyword_only
from anygrain.index.encoded import EncodedQueries


class RowsIndex(Index):
    """An index searched into ``(rows, scores)`` arrays, its hits made of them."""

    @abstractmethod
    def search_rows_encoded(
        self, encoded: EncodedQueries, k: int = 10, **options: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_encoded`'s ``(rows, scores)`` of shape (n_queries, k) before hits
        are made of them (what a filtered search reads: :mod:`anygrain.index.filters`); its
        keyword-only parameters are the kind's search options."""

    def search_encoded(
        self, encoded: EncodedQueries, k: int = 10, **options: Any
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows_encoded(encoded, k, **options)
        return hits_from_rows(self.corpus, rows, scores)

    @classmethod
    def search_options(cls) -> frozenset[str]:
        """:meth:`Index.search_options`, with those of :meth:`search_rows_encoded`, which
        :meth:`search_encoded` forwards its options to."""
        return super().search_options() | keyword_only(cls.search_rows_encoded)
