"""Sentence boundaries, kept per passage so sentence-level hits can be cut later.

Latin-script text is segmented by syntok, a maintained pure-Python segmenter that knows
abbreviations, initials, numbers, brackets and quotes; Chinese text by its full-width
terminals (。！？；), which syntok does not cut at; and a line that opens a list item (a
bullet or an enumerator) starts a sentence, which syntok does not see either.  Offsets are
character offsets into the passage text, whitespace trimmed, covering all of it.

syntok walks every token in Python, so it is asked only about the stretches of a text where
its answer is in doubt: a text is first cut where syntok's own rules cannot but cut (see
``_SURE_END``), and a stretch between two such cuts with nothing else syntok could cut at
is one sentence.  The result is the same as syntok's on the whole text (a test holds it).
"""

from __future__ import annotations

import re

from syntok import segmenter
from syntok._segmentation_states import State

from anygrain.corpus.lang import CJK_RE, is_cjk

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
# a terminal syntok always cuts after: it ends a word or a number of two or more characters
# that stands alone (so it is the token before the terminal, not an abbreviation's part),
# maybe closed by a quote, and is followed by space and a capital or an opening quote (so
# the next token is neither lowercase, a number, nor a bracket); the exceptions syntok
# makes for such a token (abbreviations, months, Roman numerals, "no", a number before a
# month) are checked apart
_SURE_END = re.compile(
    r"(?<!\S)([a-z][a-z0-9]+|[A-Z][a-z]+|[A-Z]{2,}|[0-9]{2,})[.!?;][\"”]?[ \t\r\n]+"
    r"(?=([A-Z][a-z]*)|[À-ÖØ-Þ\"“])"
)
_NOT_SURE = State.abbreviations | State.months | State.roman_numerals | {"no", "No", "NO"}
# inside a stretch, what syntok could cut at besides its last full stop: a terminal, an
# opening bracket (one that opens a sentence, or that it cannot skip) or a blank line
_OPENING = "".join(sorted(State.opening_brackets))
_ALL_BRACKETS = _OPENING + "".join(sorted(State.closing_brackets))
_BRACKETS = re.compile("[" + re.escape(_ALL_BRACKETS) + "]")
_MAYBE_CUT = re.compile(_TERMINAL.pattern + "|[" + re.escape(_OPENING) + "]")
# ... but syntok does not cut at a terminal that ends a word and is followed by a lowercase
# word, nor at a full stop inside a word (where no lowercase letter meets a capital), nor at
# a bracket it skips: closed within fewer tokens than it looks ahead, with no terminal or
# bracket inside, after the sentence's first two words and not followed by a bracket;
# both brackets touch a letter or digit, or syntok reads them as part of a symbol's token
_LOWER_NEXT = re.compile(r"[ \t\r\n]+[a-z]")
_SKIPPED = re.compile(
    r"[(\[{](?=[A-Za-z0-9])((?:\s*[^\s"
    + re.escape(_ALL_BRACKETS)
    + r".!?;\u203c-\u2049\u3002\ufe52\ufe57\uff01\uff0e\uff1f\uff61]){1,200})"
    + r"(?<=[A-Za-z0-9])[)\]}]\s*"
)
# at least as many pieces as syntok makes tokens of a text: runs of ASCII letters and
# digits, cut where a lowercase letter meets a capital, and each other character
_TOKEN_BOUND = re.compile(r"[A-Z]*[a-z0-9]+|[A-Z]+|\S")
#: tokens syntok looks ahead for a closing bracket, less a margin
_LOOKAHEAD = 45
# a sentence that opens with two words: syntok is past its first token's state by the
# second (a sentence's first tokens, each followed by a terminal, are read differently)
_INNER = re.compile(r"\s*[A-Za-z0-9]+[ \t\r\n]+[A-Za-z0-9]")
# syntok's words: runs of anything but space and the zero-width space
_SPACE = re.compile(r"[\s\u200b]")
_WORD = re.compile(r"[^\s\u200b]*")
_ALNUM = re.compile(r"[^\W_]")


def _maybe_cut(text: str, start: int, stop: int) -> bool:
    """Whether syntok could cut inside ``text[start:stop]``, a stretch that starts a sentence."""
    for m in _MAYBE_CUT.finditer(text, start, stop):
        c, pos = m.group(), m.start()
        if c in ".!?;":
            before, after = text[pos - 1 : pos], text[pos + 1 : pos + 2]
            if not (before.isascii() and before.isalnum()):
                return True
            if (
                c != ";"
                and after.isascii()
                and after.isalnum()
                and not (before.islower() and after.isupper())
            ):
                continue  # inside a word (3.5, U.S): part of its token, not a terminal
            if not _LOWER_NEXT.match(text, pos + 1):
                return True
        elif c in "([{":
            skip = _SKIPPED.match(text, pos)
            inner = _INNER.match(text, start)
            if skip is None or inner is None or inner.end() > pos:
                return True
            if len(_TOKEN_BOUND.findall(skip.group(1))) > _LOOKAHEAD:
                return True
            if text[skip.end() : skip.end() + 1] in State.opening_brackets:
                return True
        else:
            return True
    return False


def _syntok(text: str, base: int, cuts: set[int]) -> None:
    for paragraph in segmenter.analyze(text):
        for s in paragraph:
            if s:
                cuts.add(base + s[0].offset)


def _sure_ends(text: str) -> list[tuple[int, int]]:
    """``(terminal, next sentence's start)`` of each ``_SURE_END`` outside every bracket
    (syntok looks inside a bracket past a terminal).  A bracket in a word of symbols is
    part of that word's token, not a bracket to syntok: past one, nothing is sure."""
    found = [
        m
        for m in _SURE_END.finditer(text)
        if m.group(1) not in _NOT_SURE and not (m.group(1).isdigit() and _month_next(m))
    ]
    if found and _BRACKETS.search(text):
        kept, depth, i = [], 0, 0
        for b in _BRACKETS.finditer(text):
            while i < len(found) and found[i].start() < b.start():
                if depth == 0:
                    kept.append(found[i])
                i += 1
            if _symbols_only(text, b.start()):
                return [(m.end(1), m.end()) for m in kept]
            depth = depth + 1 if b.group() in State.opening_brackets else max(depth - 1, 0)
        found = kept + (found[i:] if depth == 0 else [])
    return [(m.end(1), m.end()) for m in found]


def _month_next(m: re.Match[str]) -> bool:
    """Whether the token after a ``_SURE_END`` may be a month's: the capital's letters, or
    all but their last where "n't" follows."""
    head = m.group(2) or ""
    return bool({head, head[:-1]} & State.months)


def _symbols_only(text: str, pos: int) -> bool:
    """Whether the word (syntok's: a run of anything but space) around ``pos`` has no
    letter or digit."""
    if text[pos + 1 : pos + 2].isalnum() or text[pos - 1 : pos].isalnum():
        return False  # the common case, told without scanning the word
    end = _WORD.match(text, pos)
    if end is None or _ALNUM.search(text, pos, end.end()):
        return False
    while pos > 0 and not _SPACE.match(text[pos - 1]):
        pos -= 1
        if text[pos].isalnum():
            return False
    return True


def _stretches(text: str, base: int, cuts: set[int]) -> None:
    """Cut a paragraph at its sure ends, and each stretch between them where syntok would."""
    last = len(text.rstrip()) - 1
    if last < 0:
        return
    start = 0
    for stop, end in [*_sure_ends(text), (last, len(text))]:
        # the stretch's own last character: a terminal, or whatever ends the paragraph
        if _maybe_cut(text, start, stop) or text[stop] in State.opening_brackets:
            _syntok(text[start:end], base + start, cuts)
        cuts.add(base + start)
        start = end


def _syntok_cuts(text: str, fast: bool = True) -> set[int]:
    cuts: set[int] = set()
    last = len(text.rstrip()) - 1
    if not _TERMINAL.search(text, 0, last):
        return cuts
    if not fast:
        _syntok(text, 0, cuts)
    else:
        # syntok cuts each paragraph (what a blank line ends) on its own
        for base, paragraph in segmenter.preprocess_with_offsets(text):
            _stretches(paragraph, base, cuts)
    cuts.update(m.end() for m in _ADDRESS_END.finditer(text))
    return cuts


def _split(text: str, fast: bool) -> list[tuple[int, int]]:
    if CJK_RE.search(text, 0, 2000) and is_cjk(text):
        # syntok reads a run of CJK characters as one word: cut at the full-width terminals
        cuts = {m.end() for m in _ZH_BOUNDARY.finditer(text) if m.end() < len(text)}
    else:
        cuts = _syntok_cuts(text, fast)
    for m in _LIST_ITEM.finditer(text):
        cuts.add(m.start(1))
        cuts.discard(m.end(1))  # the item's text is its marker's sentence
    return spans_between(text, sorted(cuts))


def spans_between(text: str, cuts: list[int]) -> list[tuple[int, int]]:
    """The non-blank spans of ``text`` between sorted ``cuts``, whitespace trimmed."""
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in [*cuts, len(text)]:
        s, e = start, cut
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            spans.append((s, e))
        start = cut
    return spans


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (whitespace trimmed), covering all of it."""
    return _split(text, fast=True)


def split_sentences_syntok_all(text: str) -> list[tuple[int, int]]:
    """``split_sentences`` with syntok asked about the whole text: the same spans, slower;
    kept to check the stretches syntok is not asked about against it."""
    return _split(text, fast=False)
