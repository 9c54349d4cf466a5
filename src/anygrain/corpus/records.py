"""The records that flow out of corpus readers into splitters and the passage store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Span:
    """A pre-cut unit inside a document: character offsets and, when the source has one, an id."""

    start: int
    end: int
    id: str | None = None
    title: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class SourceDocument:
    """One document as a reader yields it.

    ``passages`` holds the source's own units (SQuAD paragraphs, TSV rows) as
    spans into ``text``; when it is ``None`` a splitter cuts the text.
    ``sections`` holds a file's structure (the body under each heading, each PDF page) as
    spans into ``text``, each with its title (the heading path) and its ``headings`` or
    ``page`` in ``meta``: the splitter cuts each on its own, so no passage spans two.
    ``origin`` is ``"path:line"`` so later errors can still point at the input.
    """

    doc_id: str
    title: str
    text: str
    passages: list[Span] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    sections: list[Span] | None = None


@dataclass
class Passage:
    """A retrieval unit as stored: offsets are into the document's text."""

    id: str
    doc_id: str
    title: str
    text: str
    start: int
    end: int
    sentences: list[tuple[int, int]] = field(default_factory=list)  # offsets within ``text``
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class JoinedText:
    """A document's text built block by block, joined by ``sep``, with the spans of the
    blocks that are passages (a reader's own units: TSV rows, paragraphs)."""

    sep: str
    blocks: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    pos: int = 0

    def add(
        self,
        text: str,
        *,
        passage: bool = True,
        id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        if self.blocks:
            self.pos += len(self.sep)
        if passage:
            self.spans.append(Span(self.pos, self.pos + len(text), id=id, meta=meta or {}))
        self.blocks.append(text)
        self.pos += len(text)

    @property
    def text(self) -> str:
        return self.sep.join(self.blocks)
