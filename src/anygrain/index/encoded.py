"""Queries after the model side of a search: what a server encodes while it searches.

A search is two stages: the query encoder (a transformer: tokenizer and forward pass) and
the index side (FAISS, span scoring, BM25, hits).  :meth:`Index.encode` runs the first and
:meth:`Index.search_encoded` the second, with the hits :meth:`Index.search` gives, so a
server can encode the next batch on one core while the last is searched on the other
(:mod:`anygrain.serve.service`).  Kinds without a query encoder (BM25) encode nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where arrays are made: the base imports this module
    import numpy as np


@dataclass(frozen=True)
class EncodedQueries:
    """Query texts with the vectors their index's encoder made of them (one array per
    vector the kind searches with, a row per query; none for a kind without an encoder)."""

    texts: list[str]
    vectors: tuple[np.ndarray, ...] = ()

    def __post_init__(self) -> None:
        for v in self.vectors:
            if len(v) != len(self.texts):
                raise ValueError(f"{len(v)} query vectors for {len(self.texts)} queries")

    def __len__(self) -> int:
        return len(self.texts)

    @classmethod
    def join(cls, parts: Sequence[EncodedQueries]) -> EncodedQueries:
        """The queries of ``parts``, one after another (all from one index's encoder)."""
        if len(parts) == 1:
            return parts[0]
        import numpy as np

        texts = [t for p in parts for t in p.texts]
        n_vec = {len(p.vectors) for p in parts}
        if len(n_vec) > 1:
            raise ValueError("queries encoded by different kinds cannot be joined")
        vectors = tuple(
            np.concatenate([p.vectors[i] for p in parts])
            for i in range(n_vec.pop() if n_vec else 0)
        )
        return cls(texts, vectors)

    def take(self, rows: Sequence[int]) -> EncodedQueries:
        """These queries' subset ``rows``, in that order."""
        import numpy as np

        pick = np.asarray(list(rows), dtype=np.int64)
        return EncodedQueries(
            [self.texts[int(i)] for i in pick], tuple(v[pick] for v in self.vectors)
        )
