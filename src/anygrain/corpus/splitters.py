"""Splitters cut documents into passages, keeping character offsets into the document.

- ``auto``: the source's own units (SQuAD paragraphs, TSV rows); natural paragraphs otherwise.
- ``paragraph``: blank-line separated blocks (single newlines when there are no blank lines).
- ``w100`` (``wN``): DPR's disjoint blocks of N whitespace words; the title stays a field.
- ``chars:N``: windows of about N characters, CJK-aware: Chinese is cut by characters,
  while Latin words are never split.

A document with ``sections`` (a file's headings or PDF pages, :mod:`anygrain.corpus.files`)
is cut section by section, so no passage spans two; under ``auto`` each section's
paragraphs are packed into passages of at most :data:`PASSAGE_WORDS` words, a longer
paragraph cut at sentence ends, and each passage takes its section's title (the heading
path) and metadata (``headings``, ``page``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from anygrain.corpus.records import SourceDocument, Span
from anygrain.errors import AnygrainError


class SplitKind(str, enum.Enum):
    AUTO = "auto"
    PARAGRAPH = "paragraph"
    WORDS = "words"
    CHARS = "chars"


# How each kind is written on the command line and what it does (``index --help``).
SPLIT_FORMS: dict[SplitKind, tuple[str, str]] = {
    SplitKind.AUTO: (
        "auto",
        "the source's own units: SQuAD paragraphs, TSV rows; a file's headings and pages, "
        "paragraphs packed to 150 words; else paragraphs",
    ),
    SplitKind.PARAGRAPH: ("paragraph", "blank-line separated blocks"),
    SplitKind.WORDS: ("wN", "disjoint windows of N words; w100 is DPR's"),
    SplitKind.CHARS: ("chars:N", "windows of about N characters, CJK-aware"),
}


def split_help() -> str:
    """Every split form with its meaning, for help texts."""
    return " | ".join(f"{form} ({what})" for form, what in SPLIT_FORMS.values())


@dataclass(frozen=True)
class SplitSpec:
    kind: SplitKind = SplitKind.AUTO
    size: int = 0

    @staticmethod
    def parse(spec: str | SplitSpec | None) -> SplitSpec:
        if spec is None:
            return SplitSpec()
        if isinstance(spec, SplitSpec):
            return spec
        s = spec.strip().lower()
        if s in ("auto", ""):
            return SplitSpec(SplitKind.AUTO)
        if s in ("paragraph", "paragraphs"):
            return SplitSpec(SplitKind.PARAGRAPH)
        m = re.fullmatch(r"w(\d+)", s)
        if m and int(m.group(1)) > 0:
            return SplitSpec(SplitKind.WORDS, int(m.group(1)))
        m = re.fullmatch(r"chars:(\d+)", s)
        if m and int(m.group(1)) > 0:
            return SplitSpec(SplitKind.CHARS, int(m.group(1)))
        raise AnygrainError(f"unknown split {spec!r}: use auto, paragraph, w100 (wN) or chars:N")

    def __str__(self) -> str:
        if self.kind is SplitKind.WORDS:
            return f"w{self.size}"
        if self.kind is SplitKind.CHARS:
            return f"chars:{self.size}"
        return self.kind.value


_PARA_BLANK = re.compile(r"\n[ \t]*\n")
_WORD = re.compile(r"\S+")
_CJK_CHAR = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def _trimmed(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end) if end > start else None


def split_paragraphs(text: str) -> list[Span]:
    sep = _PARA_BLANK if _PARA_BLANK.search(text) else re.compile(r"\n")
    spans, start = [], 0
    for m in sep.finditer(text):
        sp = _trimmed(text, start, m.start())
        if sp:
            spans.append(sp)
        start = m.end()
    sp = _trimmed(text, start, len(text))
    if sp:
        spans.append(sp)
    return spans


def split_words(text: str, n: int) -> list[Span]:
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    return [
        Span(words[i][0], words[min(i + n, len(words)) - 1][1]) for i in range(0, len(words), n)
    ]


def split_chars(text: str, n: int) -> list[Span]:
    """Windows of ~n non-space characters; a cut never falls inside a Latin word."""
    spans: list[Span] = []
    start = 0
    length = len(text)
    while start < length:
        while start < length and text[start].isspace():
            start += 1
        if start >= length:
            break
        end = min(start + n, length)
        if (
            end < length
            and not _CJK_CHAR.match(text[end - 1])
            and not text[end].isspace()
            and not _CJK_CHAR.match(text[end])
        ):
            # Extend to the end of the Latin word rather than cut it.
            while end < length and not text[end].isspace() and not _CJK_CHAR.match(text[end]):
                end += 1
        sp = _trimmed(text, start, end)
        if sp:
            spans.append(sp)
        start = end
    return spans


#: The most words (a CJK character counts as one) an ``auto`` passage of a sectioned
#: document holds: with its heading path as title it fits the 256-token window of the
#: shipped dense encoders (the phrase and reader windows are longer).
PASSAGE_WORDS = 150


def _size(text: str) -> int:
    return len(_WORD.findall(text)) + len(_CJK_CHAR.findall(text))


def _pack(text: str, units: list[Span], limit: int) -> list[Span]:
    """Consecutive ``units`` joined into spans of at most ``limit`` words; a unit over
    ``limit`` is cut by :func:`_cut_long`."""
    out: list[Span] = []
    start = end = -1
    n = 0
    for u in units:
        k = _size(text[u.start : u.end])
        if start >= 0 and n + k > limit:
            out.append(Span(start, end))
            start = -1
        if k > limit:
            out.extend(_cut_long(text, u, limit))
            continue
        if start < 0:
            start, n = u.start, 0
        end, n = u.end, n + k
    if start >= 0:
        out.append(Span(start, end))
    return out


def _cut_long(text: str, unit: Span, limit: int) -> list[Span]:
    """A paragraph over ``limit`` words: its sentences packed; a sentence over it, in word
    windows (character windows where it holds CJK text)."""
    # imported here: naming the split forms (the command line's help) needs no splitter
    from anygrain.corpus.sentences import split_sentences

    seg = text[unit.start : unit.end]
    sents = [Span(unit.start + s, unit.start + e) for s, e in split_sentences(seg)]
    if len(sents) > 1:
        return _pack(text, sents, limit)
    cut = split_chars if _CJK_CHAR.search(seg) else split_words
    return [Span(unit.start + sp.start, unit.start + sp.end) for sp in cut(seg, limit)]


def _within(text: str, section: Span, cut: Callable[[str], list[Span]]) -> list[Span]:
    seg = text[section.start : section.end]
    return [Span(section.start + sp.start, section.start + sp.end) for sp in cut(seg)]


def split_sections(doc: SourceDocument, spec: SplitSpec) -> Iterator[Span]:
    """Passage spans of a document with ``sections``: each section cut on its own (see
    the module docstring), each passage with its section's title and metadata."""
    for sec in doc.sections or []:
        if spec.kind is SplitKind.AUTO:
            paras = _within(doc.text, sec, split_paragraphs)
            spans = _pack(doc.text, paras, PASSAGE_WORDS)
        elif spec.kind is SplitKind.PARAGRAPH:
            spans = _within(doc.text, sec, split_paragraphs)
        elif spec.kind is SplitKind.WORDS:
            spans = _within(doc.text, sec, lambda t: split_words(t, spec.size))
        else:
            spans = _within(doc.text, sec, lambda t: split_chars(t, spec.size))
        for sp in spans:
            yield Span(sp.start, sp.end, title=sec.title, meta=dict(sec.meta))


def split_document(doc: SourceDocument, spec: SplitSpec) -> Iterator[Span]:
    """Passage spans for one document, ids filled as ``{doc_id}_{i}`` where the source had none."""
    if spec.kind is SplitKind.AUTO and doc.passages is not None:
        spans = doc.passages
    elif doc.sections is not None:
        spans = list(split_sections(doc, spec))
    elif spec.kind in (SplitKind.AUTO, SplitKind.PARAGRAPH):
        spans = split_paragraphs(doc.text)
    elif spec.kind is SplitKind.WORDS:
        spans = split_words(doc.text, spec.size)
    else:
        spans = split_chars(doc.text, spec.size)
    for i, sp in enumerate(spans):
        yield Span(sp.start, sp.end, id=sp.id or f"{doc.doc_id}_{i}", title=sp.title, meta=sp.meta)
