"""A JSONL corpus: one document per line, ``{"id", "title"?, "text", ...}``.

``jsonl:DIR`` reads every ``*.jsonl`` file of a directory, in name order (a directory
is never detected as JSONL: a BEIR directory holds ``.jsonl`` files too).
``title`` may be absent or null.  Each record is a whole document left for a splitter to cut (``passages=None``).
Other fields are kept in ``meta``.  For convenience the id may be spelled
``_id`` (a BEIR ``corpus.jsonl``) and the text ``contents`` (Pyserini's
JsonCollection); the spelling found is not recorded.

With ``--text-field``, ``--id-field``, ``--title-field`` or ``--meta-fields`` (and in a
folder) a JSONL file is read as a record file (:mod:`anygrain.corpus.files`): the fields
named, a record without an id gets ``FILE:LINE``, and each records its ``source`` and
``line``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.corpus.fields import FieldMap, ReadOptions
from anygrain.corpus.files import (
    FileType,
    Record,
    Skip,
    read_path,
    record_fields,
    record_meta,
    register_file_type,
)
from anygrain.corpus.formats import Format, register
from anygrain.corpus.readers._io import (
    IdSet,
    converted,
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

        def to_document(obj: Any, line: int, f: Path = f) -> SourceDocument:
            return document_from_record(obj, path=f, line=line, passages=passages)

        for line, obj, doc in converted(iter_jsonl(f, errors), to_document, errors):
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


def records(text: str, path: Path, fields: FieldMap, errors: ErrorLog) -> Iterator[Record]:
    """The records of a JSONL file, with the fields named (or found: see
    :func:`~anygrain.corpus.files.record_fields`); a record without its text is a bad
    record, unless it is the first (then the file is skipped, naming the fields)."""
    first = True
    for lineno, line in enumerate(io.StringIO(text), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            errors.handle(InputError(f"invalid JSON: {e.msg}", path=str(path), line=lineno))
            continue
        if not isinstance(obj, dict):
            kind = type(obj).__name__
            errors.handle(
                InputError(f"expected a JSON object, got {kind}", path=str(path), line=lineno)
            )
            continue
        try:
            text_key, id_key, title_key = record_fields(list(obj), fields, path, line=lineno)
        except Skip as s:
            if first:
                raise
            errors.handle(InputError(s.reason, path=str(path), line=lineno))
            continue
        first = False
        try:
            body = require_text(obj, text_key, path=path, line=lineno)
            doc_id = require_id(obj, id_key, path=path, line=lineno) if id_key else None
            title = obj.get(title_key) if title_key else ""
            if title is not None and not isinstance(title, str):
                title = require(obj, str(title_key), str, path=path, line=lineno)
        except InputError as e:
            errors.handle(e)
            continue
        meta = record_meta(obj, (text_key, id_key, title_key), fields)
        yield Record(lineno, doc_id, title or "", body, meta)


#: JSONL files in a folder, and a JSONL file read with field options
JSONL_FILES = register_file_type(FileType("jsonl", (".jsonl",), records=records))


def read_with(path: Path, errors: ErrorLog, options: ReadOptions) -> Iterator[SourceDocument]:
    return read_path(path, errors, options, only=JSONL_FILES)


register(
    Format(
        name="jsonl",
        description="JSONL documents: id, title (optional), text; other fields kept as metadata "
        "(or the fields named by --text-field, --id-field, --title-field, --meta-fields)",
        sniff=sniff,
        read_documents=read_documents,
        priority=5,
        read_with=read_with,
    )
)
