"""WikiText-2/-103 (raw or tokenised): `` = Title = `` starts an article.

Each article is a document (``doc_id`` = title; a repeated title gets
``#2``, ``#3``...).  Its text is its section headings and paragraphs, one per
block, separated by blank lines; only the paragraph lines (non-empty lines
that are not headings) are passages, with their section path (``Career`` or
``Career / Film``) in ``Span.meta["section"]``.  Text is kept exactly as the
dataset tokenised it (`` @-@ ``, `` @,@ ``, `` , ``; ``<unk>`` in the token
files) apart from the leading and trailing space on each line, so answers and
offsets match the published data.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from anygrain.corpus.formats import Format, register
from anygrain.corpus.readers._io import UniqueNames, first_line, iter_text_lines, no_records
from anygrain.corpus.records import JoinedText, SourceDocument
from anygrain.errors import ErrorLog, InputError

BLOCK_SEP = "\n\n"
_HEADING = re.compile(r"(=(?: =)*) (.*?\S) \1")
_SNIFF = re.compile(r" = [^=\s].* = ?")


def heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` for a heading line (level 1 = article title), else None."""
    m = _HEADING.fullmatch(line.strip())
    if m is None:
        return None
    return (len(m.group(1)) + 1) // 2, m.group(2).strip()


def sniff(path: Path) -> bool:
    """The first non-blank line is a WikiText article title `` = Title = ``."""
    return path.is_file() and _SNIFF.fullmatch(first_line(path)) is not None


@dataclass
class _Article:
    title: str
    line: int
    body: JoinedText = field(default_factory=lambda: JoinedText(BLOCK_SEP))
    sections: list[str] = field(default_factory=list)

    def add(self, text: str, *, passage: bool) -> None:
        meta = {"section": " / ".join(self.sections)} if passage and self.sections else {}
        self.body.add(text, passage=passage, meta=meta)


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """Stream articles; paragraphs are passages, headings only text."""
    names = UniqueNames()
    art: _Article | None = None
    n_docs = 0

    def finish(a: _Article) -> SourceDocument | None:
        if not a.body.spans:
            errors.handle(
                InputError(
                    f"article {a.title!r} has no paragraphs (empty text)",
                    path=str(path),
                    line=a.line,
                    field="text",
                )
            )
            return None
        doc_id = names.claim(a.title)
        for i, sp in enumerate(a.body.spans):
            sp.id = f"{doc_id}_{i}"
        return SourceDocument(
            doc_id=doc_id,
            title=a.title,
            text=a.body.text,
            passages=a.body.spans,
            origin=f"{path}:{a.line}",
        )

    for lineno, line in iter_text_lines(path, errors):
        text = line.strip()
        if not text:
            continue
        h = heading(text)
        if h is not None and h[0] == 1:
            if art is not None and (doc := finish(art)) is not None:
                n_docs += 1
                yield doc
            art = _Article(h[1], lineno)
            continue
        if art is None:
            errors.handle(
                InputError(
                    "text before the first ' = Title = ' heading",
                    path=str(path),
                    line=lineno,
                    field="title",
                )
            )
            continue
        if h is not None:
            level, name = h
            art.sections = [*art.sections[: level - 2], name]
            art.add(name, passage=False)
        else:
            art.add(text, passage=True)
    if art is not None and (doc := finish(art)) is not None:
        n_docs += 1
        yield doc
    if not n_docs:
        raise no_records(path, "articles")


register(
    Format(
        name="wikitext",
        description="WikiText-2/-103 (' = Title = ' articles, ' = = Section = = ' headings)",
        sniff=sniff,
        read_documents=read_documents,
        priority=20,
    )
)
