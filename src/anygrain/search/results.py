"""Turning (row, score) arrays from any backend into Hits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.search.hit import Hit, Unit


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
    flat: list[int] = sorted({int(r) for rr in rows for r in rr if int(r) >= 0})
    if not flat:
        return [[] for _ in rows]
    cols = {name: store.column(name, flat) for name in ("id", "doc_id", "title", "text")}
    pos = {r: i for i, r in enumerate(flat)}
    out: list[list[Hit]] = []
    for rr, ss in zip(rows, scores, strict=True):
        hits = []
        for r, s in zip(rr, ss, strict=True):
            r = int(r)
            if r < 0:
                continue
            i = pos[r]
            hits.append(
                Hit(
                    unit=unit,
                    score=float(s),
                    passage_row=r,
                    passage_id=cols["id"][i],
                    doc_id=cols["doc_id"][i],
                    title=cols["title"][i],
                    text=cols["text"][i],
                )
            )
        out.append(hits)
    return out
