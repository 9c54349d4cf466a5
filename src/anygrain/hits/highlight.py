"""Where a hit's answer sits in its passage: the text before it, the answer, the text after.

Shared by ``anygrain search`` (printed with the answer in bold) and ``anygrain serve``
(returned as three strings, which the web page shows with the answer marked).
"""

from __future__ import annotations

from dataclasses import dataclass

from anygrain.hits.hit import Hit

ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Highlight:
    """``before + answer + after`` is the passage text (or a window of it, with ``…``
    where it was cut). ``answer`` is empty for passage and document hits."""

    before: str
    answer: str
    after: str


def highlight(hit: Hit, width: int | None = None) -> Highlight:
    """The hit's answer in its passage, with up to ``width`` characters either side
    (``None``: the whole passage). Hits without a span (passages, documents) have no
    answer: their text (its first ``2 * width`` characters) is all ``before``."""
    text = hit.text
    if hit.span is None:
        if width is None or len(text) <= 2 * width:
            return Highlight(text, "", "")
        return Highlight(text[: 2 * width] + ELLIPSIS, "", "")
    s, e = hit.span
    if width is None:
        return Highlight(text[:s], text[s:e], text[e:])
    before = text[max(0, s - width) : s]
    after = text[e : e + width]
    return Highlight(
        (ELLIPSIS if s > width else "") + before,
        text[s:e],
        after + (ELLIPSIS if e + width < len(text) else ""),
    )


def phrase_context(hit: Hit, width: int = 80) -> tuple[str, str, str]:
    """``(before, phrase, after)``: the phrase with up to ``width`` characters either side;
    for a hit without a span, the first ``2 * width`` characters of its text as the phrase
    (how ``anygrain search`` prints passage and document hits of a phrase index)."""
    if hit.span is None:
        return "", hit.text[: 2 * width], ""
    h = highlight(hit, width)
    return h.before, h.answer, h.after
