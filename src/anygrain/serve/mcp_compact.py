"""The compact form of a search response (the MCP ``search`` tool's default): each passage's
text once, in the order of its best hit, its hits under it as short rows whose values the
response's ``hit_fields`` names once (``rank``, ``score``, and ``span``, ``answer``,
``confidence`` where some hit has them), so that what a model reads is mostly the text
it cites.  :class:`PassageHits` is part of :class:`anygrain.serve.schemas.SearchResponse`
(the REST API's model: one definition for both); :func:`compact_passages` builds it,
:func:`compact_hits` reads the rows back as named hits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel, Field

from anygrain.hits.hit import Hit

#: Significant digits of a compact hit's score and confidence (the full form has them whole).
SCORE_DIGITS = 4
CONFIDENCE_DIGITS = 2

#: A compact hit's values, in this order; a response names those its hits have (``rank``
#: and ``score`` always) in ``hit_fields``, and each row holds them in that order.
HIT_FIELDS = ("rank", "score", "span", "answer", "confidence")

#: One value of a hit row: a rank, a score or confidence, a span, an answer (null: this hit
#: has none where another hit of the response has one).
HitValue = int | float | tuple[int, int] | str | None


class PassageHits(BaseModel):
    """A passage of the compact form, its text once, with the hits found in it."""

    passage_id: str
    doc_id: str
    title: str | None = Field(
        default=None,
        description="The passage's title; left out where it is the doc_id, or where an "
        "earlier passage of the same document in this response gave it",
    )
    text: str = Field(description="The passage text (a hit's span is inside it)")
    citation: str | None = Field(
        default=None,
        description="Where the passage is: 'file › heading · page N' for a passage from a "
        "file (none where that is the title)",
    )
    meta: dict[str, Any] = Field(
        default_factory=dict, description="The passage's metadata, as a full hit's meta"
    )
    hits: list[list[HitValue]] = Field(
        description="The hits found in this passage, in rank order, each a row of the values "
        "the response's hit_fields names, in that order: rank (1 for the best hit of the "
        f"response), score (to {SCORE_DIGITS} significant digits), span (the hit's character "
        "span inside text; phrase, sentence and answer hits), answer (the text at span), "
        "confidence (answer hits: the calibrated probability, 0 to 1, that the answer is "
        f"correct, to {CONFIDENCE_DIGITS} significant digits; on passage hits, the best "
        "answer's of a question left unanswered)"
    )


def compact_passages(hits: Sequence[Hit]) -> tuple[list[str], list[PassageHits]]:
    """``hits`` (ranked best first) grouped by passage: the names of a hit row's values
    (``hit_fields``), and each passage once, in the order of its best hit, its hits under
    it in rank order."""
    rows: list[dict[str, HitValue]] = []
    for rank, h in enumerate(hits, 1):
        conf = h.confidence
        rows.append(
            {
                "rank": rank,
                "score": _digits(float(h.score), SCORE_DIGITS),
                "span": h.span,
                "answer": h.answer_text if h.span is not None else None,
                "confidence": (
                    _digits(conf, CONFIDENCE_DIGITS)
                    if conf is not None and math.isfinite(conf)
                    else None
                ),
            }
        )
    # rank and score always; the others where some hit has one
    fields = [
        f for f in HIT_FIELDS if f in ("rank", "score") or any(r[f] is not None for r in rows)
    ]
    groups: dict[tuple[str, str], PassageHits] = {}
    titled: set[tuple[str, str]] = set()  # (doc_id, title) given by an earlier passage
    for h, row in zip(hits, rows, strict=True):
        group = groups.get((h.passage_id, h.text))
        if group is None:
            shown = h.title != h.doc_id and (h.doc_id, h.title) not in titled
            titled.add((h.doc_id, h.title))
            group = groups[(h.passage_id, h.text)] = PassageHits(
                passage_id=h.passage_id,
                doc_id=h.doc_id,
                title=h.title if shown else None,
                text=h.text,
                citation=h.citation if h.citation != h.title else None,
                meta=dict(h.meta),
                hits=[],
            )
        group.hits.append([row[f] for f in fields])
    return fields, list(groups.values())


def compact_hits(
    hit_fields: Sequence[str], passages: Sequence[PassageHits]
) -> list[tuple[PassageHits, dict[str, HitValue]]]:
    """The hits of a compact response (its ``hit_fields`` and ``passages``) in rank order,
    each with its passage and its values by name."""
    out = [(p, dict(zip(hit_fields, row, strict=True))) for p in passages for row in p.hits]
    return sorted(out, key=lambda ph: cast(int, ph[1]["rank"]))


def _digits(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits (as it is where it is not finite)."""
    return float(f"{x:.{digits}g}") if math.isfinite(x) else x


__all__ = [
    "CONFIDENCE_DIGITS",
    "HIT_FIELDS",
    "SCORE_DIGITS",
    "PassageHits",
    "compact_hits",
    "compact_passages",
]
