"""Sentence boundaries, kept per passage so sentence-level hits can be cut later.

A rule-based splitter (terminal punctuation followed by space/capital for
English; 。！？；and their full-width kin for Chinese) is fast and good enough to
aggregate phrase scores per sentence; offsets are into the passage text.
"""

from __future__ import annotations

import re

_EN_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ZH_BOUNDARY = re.compile(r"(?<=[。！？；!?])[”’」』）)]*")
_ABBREV = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|U\.S|No|Vol|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.$"
)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (whitespace trimmed), covering all of it."""
    cuts: set[int] = set()
    for m in _EN_BOUNDARY.finditer(text):
        if _ABBREV.search(text[max(0, m.start() - 6) : m.start()]):
            continue
        cuts.add(m.end())
    for m in _ZH_BOUNDARY.finditer(text):
        if m.end() < len(text):
            cuts.add(m.end())
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in sorted(cuts) + [len(text)]:
        s, e = start, cut
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            spans.append((s, e))
        start = cut
    return spans
