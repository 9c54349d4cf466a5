"""Sentence boundaries, kept per passage so sentence-level hits can be cut later.

Latin-script text is segmented by syntok, a maintained pure-Python segmenter that knows
abbreviations, initials, numbers, brackets and quotes; Chinese text by its full-width
terminals (。！？；), which syntok does not cut at; and a line that opens a list item (a
bullet or an enumerator) starts a sentence, which syntok does not see either.  Offsets are
character offsets into the passage text, whitespace trimmed, covering all of it.
"""

from __future__ import annotations

import re

from syntok import segmenter

from anygrain.corpus.lang import is_cjk

_ZH_BOUNDARY = re.compile(r"(?<=[。！？；!?])[”’」』）)]*")
# a line that opens a list item: a bullet, or an enumerator (1. 2) a. b) (iv) IV.), then space
_LIST_ITEM = re.compile(
    r"\n[ \t]*((?:[-*•‣◦▪·–—]|\(?(?:\d{1,3}|[A-Za-z]|[IVXivx]{1,5})[.)])[ \t]+)(?=\S)"
)
# a URL, e-mail address or path that ends a sentence: syntok reads its dots as an
# abbreviation's and does not cut after it
_ADDRESS_END = re.compile(r"\S[@/]\S*[^\s.]\.\s+(?=[A-Z])")
# what syntok can cut at (a terminal, or a blank line): a text with none of these before its
# end is one sentence, and syntok, slow next to a regular expression, is not asked
_TERMINAL = re.compile(r"[.!?;\u203c-\u2049\u3002\ufe52\ufe57\uff01\uff0e\uff1f\uff61]|\n\s*\n")


def _syntok_cuts(text: str) -> set[int]:
    if not _TERMINAL.search(text, 0, len(text.rstrip()) - 1):
        return set()
    cuts = {s[0].offset for paragraph in segmenter.analyze(text) for s in paragraph if s}
    cuts.update(m.end() for m in _ADDRESS_END.finditer(text))
    return cuts


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (whitespace trimmed), covering all of it."""
    if is_cjk(text):
        # syntok reads a run of CJK characters as one word: cut at the full-width terminals
        cuts = {m.end() for m in _ZH_BOUNDARY.finditer(text) if m.end() < len(text)}
    else:
        cuts = _syntok_cuts(text)
    for m in _LIST_ITEM.finditer(text):
        cuts.add(m.start(1))
        cuts.discard(m.end(1))  # the item's text is its marker's sentence
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
