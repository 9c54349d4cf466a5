"""Turning (row, score) arrays from any backend into Hits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.hits.hit import Hit, Unit


def hits_from_rows(
    store: CorpusStore,
    rows: Sequence[Sequence[int]] | np.ndarray,
    scores: Sequence[Sequence[float]] | np.ndarray,
    unit: Unit = Unit.PASSAGE,
) -> list[list[Hit]]:
    """One list of hits per query; rows < 0 (backend padding) are dropped.

    Passage fields are fetched with one ``take`` for the whole batch rather than
    row by row, which keeps hit construction cheap next to the search itself.
    """
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    if rows.size == 0:
        return [[] for _ in range(len(rows))]
    valid = rows >= 0
    uniq, inverse = np.unique(rows[valid], return_inverse=True)
    if uniq.size == 0:
        return [[] for _ in range(len(rows))]
    ids, doc_ids, titles, texts = (store.column(c, uniq) for c in ("id", "doc_id", "title", "text"))
    metas = store.hit_meta(uniq)
    # Position of each valid hit in the uniq arrays, laid back into the (n, k) grid.
    pos = np.full(rows.shape, -1, dtype=np.int64)
    pos[valid] = inverse
    out: list[list[Hit]] = []
    pos_l: list[list[int]] = pos.tolist()  # type: ignore[assignment]
    rows_l: list[list[int]] = rows.tolist()  # type: ignore[assignment]
    scores_l: list[list[float]] = scores.tolist()  # type: ignore[assignment]
    for pr, rr, ss in zip(pos_l, rows_l, scores_l, strict=True):
        out.append(
            [
                Hit(unit, s, r, ids[i], doc_ids[i], titles[i], texts[i], meta=dict(metas[i]))
                for i, r, s in zip(pr, rr, ss, strict=True)
                if i >= 0
            ]
        )
    return out
