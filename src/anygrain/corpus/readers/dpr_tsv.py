"""DPR's ``psgs_w100.tsv`` passage file: ``id<TAB>text<TAB>title``, one passage per line.

The header line (``id text title`` in any order) is optional; without one the
columns are ``id, text, title``.  Consecutive rows with the same title form one
document (``doc_id`` = title) whose text is the rows joined by a single space,
each row a :class:`Span` carrying its DPR id, so passages keep DPR's ids and the
document can still be re-split.  A title that comes back after other titles
starts a new document with id ``title#2`` (``#3``...), since a stream cannot
merge it into the earlier one.  The file is streamed: 21M rows need only a
bitmap of seen ids.  Fields may be CSV-quoted as DPR writes them; see
:func:`split_tsv`.  A record never spans lines.

This module also holds the two-column ``pid<TAB>passage`` corpus reader used by
the ``multicpr`` format (Multi-CPR's and MS MARCO's ``corpus.tsv``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from anygrain.corpus.formats import Format, register
from anygrain.corpus.readers._io import (
    IdSet,
    UniqueNames,
    first_tsv_row,
    iter_rows,
    no_records,
    split_tsv,
)
from anygrain.corpus.records import JoinedText, SourceDocument, Span
from anygrain.errors import ErrorLog, InputError

COLUMNS = ("id", "text", "title")
JOIN = " "


def _header(fields: list[str]) -> tuple[int, int, int] | None:
    """Column positions of (id, text, title) when ``fields`` is a header line."""
    names = [f.strip().lower() for f in fields]
    if sorted(names) != sorted(COLUMNS):
        return None
    return names.index("id"), names.index("text"), names.index("title")


def sniff(path: Path) -> bool:
    """A header ``id text title``, or three columns: an id without spaces, text, a title."""
    fields = first_tsv_row(path, 3)
    if fields is None:
        return False
    if _header(fields) is not None:
        return True
    pid, text, title = fields
    return bool(pid) and not any(c.isspace() for c in pid) and " " in text and bool(title.strip())


@dataclass
class _Doc:
    title: str
    line: int
    body: JoinedText = field(default_factory=lambda: JoinedText(JOIN))


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """Stream documents, one per run of rows sharing a title."""
    cols = (0, 1, 2)
    seen_ids = IdSet()
    names = UniqueNames()
    cur: _Doc | None = None
    n_docs = 0

    def header(fields: list[str]) -> bool:
        nonlocal cols
        found = _header(fields)
        cols = found or cols
        return found is not None

    def finish(doc: _Doc) -> SourceDocument:
        return SourceDocument(
            doc_id=names.claim(doc.title),
            title=doc.title,
            text=doc.body.text,
            passages=doc.body.spans,
            origin=f"{path}:{doc.line}",
        )

    for lineno, fields in iter_rows(path, errors, lambda line: split_tsv(line, 3), header):
        try:
            pid, text, title = _row(fields, cols, path, lineno)
        except InputError as e:
            errors.handle(e)
            continue
        if not seen_ids.add(pid):
            errors.handle(
                InputError(f"duplicate passage id {pid!r}", path=str(path), line=lineno, field="id")
            )
            continue
        if cur is None or title != cur.title:
            if cur is not None:
                n_docs += 1
                yield finish(cur)
            cur = _Doc(title, lineno)
        cur.body.add(text, id=pid)
    if cur is not None:
        n_docs += 1
        yield finish(cur)
    if not n_docs:
        raise no_records(path, "passages")


def _row(
    fields: list[str], cols: tuple[int, int, int], path: Path, line: int
) -> tuple[str, str, str]:
    if len(fields) != 3:
        by_pos = {pos: name for pos, name in zip(cols, COLUMNS, strict=True)}
        missing = by_pos[len(fields)] if len(fields) < 3 else None
        raise InputError(
            f"expected 3 tab-separated columns (id, text, title), got {len(fields)}",
            path=str(path),
            line=line,
            field=missing,
        )
    pid, text, title = fields[cols[0]].strip(), fields[cols[1]], fields[cols[2]]
    if not pid:
        raise InputError("empty id", path=str(path), line=line, field="id")
    if not text.strip():
        raise InputError("empty text", path=str(path), line=line, field="text")
    if not title.strip():
        raise InputError("empty title", path=str(path), line=line, field="title")
    return pid, text, title


# --- two-column pid<TAB>passage corpora (Multi-CPR, MS MARCO) --------------------------------

_PAIR_HEADERS = {("pid", "passage"), ("id", "text"), ("docid", "text"), ("id", "passage")}


def _is_pair_header(fields: list[str]) -> bool:
    return tuple(f.strip().lower() for f in fields) in _PAIR_HEADERS


def sniff_pairs(path: Path) -> bool:
    """Two columns: a decimal id and a passage that is not a Python list (not DPR qas)."""
    fields = first_tsv_row(path, 2)
    if fields is None:
        return False
    if _is_pair_header(fields):
        return True
    pid, text = fields
    return pid.strip().isdigit() and bool(text.strip()) and not text.lstrip().startswith("[")


def read_pair_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """Each ``pid<TAB>passage`` row is a document holding one passage; ``doc_id`` = pid."""
    if path.name.endswith(".query.txt"):
        raise InputError(
            "this is a Multi-CPR query file, not a corpus; pass corpus.tsv for documents",
            path=str(path),
        )
    seen = IdSet()
    n_docs = 0
    for lineno, fields in iter_rows(path, errors, lambda line: split_tsv(line, 2), _is_pair_header):
        if len(fields) != 2:
            errors.handle(
                InputError(
                    f"expected 2 tab-separated columns (pid, passage), got {len(fields)}",
                    path=str(path),
                    line=lineno,
                    field="passage" if len(fields) < 2 else None,
                )
            )
            continue
        pid, text = fields[0].strip(), fields[1]
        problem = None
        if not pid:
            problem = InputError("empty id", path=str(path), line=lineno, field="pid")
        elif not text.strip():
            problem = InputError("empty text", path=str(path), line=lineno, field="passage")
        elif not seen.add(pid):
            problem = InputError(
                f"duplicate passage id {pid!r}", path=str(path), line=lineno, field="pid"
            )
        if problem is not None:
            errors.handle(problem)
            continue
        n_docs += 1
        yield SourceDocument(
            doc_id=pid,
            title="",
            text=text,
            passages=[Span(0, len(text), id=pid)],
            origin=f"{path}:{lineno}",
        )
    if not n_docs:
        raise no_records(path, "passages")


register(
    Format(
        name="dpr-tsv",
        description="DPR passages TSV (psgs_w100.tsv: id, text, title; header optional)",
        sniff=sniff,
        read_documents=read_documents,
        priority=20,
    )
)
