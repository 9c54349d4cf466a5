"""A JSONL corpus: one document per line, ``{"id", "title"?, "text", ...}``.

``jsonl:DIR`` reads every ``*.jsonl`` file of a directory, in name order (a directory
is never detected as JSONL: a BEIR directory holds ``.jsonl`` files too).
``title`` may be absent or null.  Each record is a whole document left for a splitter to cut (``passages=None``).
Other fields are kept in ``meta``.  For convenience the id may be spelled
``_id`` (a BEIR ``corpus.jsonl``) and the text ``contents`` (Pyserini's
JsonCollection); the spelling found is not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.readers._io import (
    IdSet,
    first_json_object,
    iter_jsonl,
    no_records,
    require,
    require_id,
    require_text,
)
from anygrain.corpus.records import SourceDocument, Span
from anygrain.errors import ErrorLog, InputError

ID_KEYS = ("id", "_id")
TEXT_KEYS = ("text", "contents")
# Keys that make a JSON line a question rather than a document.
QUESTION_KEYS = ("question", "query", "input", "positive_ctxs")


def sniff(path: Path) -> bool:
    """First line is an object with an id and a text, and no question-like key."""
    obj = first_json_object(path)
    return (
        obj is not None
        and any(k in obj for k in ID_KEYS)
        and any(isinstance(obj.get(k), str) for k in TEXT_KEYS)
        and not any(k in obj for k in QUESTION_KEYS)
    )


def _pick(obj: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((k for k in keys if k in obj), keys[0])


def document_from_record(
    obj: dict[str, Any], *, path: Path, line: int, passages: bool = False
) -> SourceDocument:
    """One JSON record as a document; ``passages=True`` makes the whole text one passage."""
    id_key, text_key = _pick(obj, ID_KEYS), _pick(obj, TEXT_KEYS)
    doc_id = require_id(obj, id_key, path=path, line=line)
    text = require_text(obj, text_key, path=path, line=line)
    title = ""
    if obj.get("title") is not None:  # absent or null: untitled
        title = require(obj, "title", str, path=path, line=line)
    meta = {k: v for k, v in obj.items() if k not in (id_key, text_key, "title")}
    return SourceDocument(
        doc_id=doc_id,
        title=title,
        text=text,
        passages=[Span(0, len(text), id=doc_id)] if passages else None,
        meta=meta,
        origin=f"{path}:{line}",
    )


def iter_documents(path: Path, errors: ErrorLog, *, passages: bool) -> Iterator[SourceDocument]:
    """Documents from a JSONL file, or from every ``*.jsonl`` file of a directory (in name
    order), with ids unique across them all; shared with the BEIR reader."""
    files = [path]
    if path.is_dir():
        files = sorted(f for f in path.glob("*.jsonl") if f.is_file())
        if not files:
            raise InputError("a directory without .jsonl files", path=str(path))
    seen = IdSet()
    n_docs = 0
    for f in files:
        for line, obj in iter_jsonl(f, errors):
            try:
                doc = document_from_record(obj, path=f, line=line, passages=passages)
            except InputError as e:
                errors.handle(e)
                continue
            if not seen.add(doc.doc_id):
                errors.handle(
                    InputError(
                        f"duplicate document id {doc.doc_id!r}",
                        path=str(f),
                        line=line,
                        field=_pick(obj, ID_KEYS),
                    )
                )
                continue
            n_docs += 1
            yield doc
    if not n_docs:
        raise no_records(path, "documents")


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """Whole documents, left for the splitter (``jsonl:DIR`` reads each ``DIR/*.jsonl``)."""
    return iter_documents(path, errors, passages=False)


register(
    Format(
        name="jsonl",
        description="JSONL documents: id, title (optional), text; other fields kept as metadata",
        sniff=sniff,
        read_documents=read_documents,
        priority=5,
    )
)
