"""Documents given as Python objects (``Index.from_texts`` / ``Index.from_documents``).

Texts with metadata and ids, anygrain's own :class:`SourceDocument`, dicts, and the
document types of the RAG frameworks, recognised by their attributes so that none is
imported: LangChain's ``Document`` (``page_content``, ``metadata``, ``id``), LlamaIndex's
``Document`` / ``TextNode`` (``text``, ``metadata``, ``id_``) and Haystack's ``Document``
(``content``, ``meta``, ``id``).  The metadata is kept whole (it comes back as
:attr:`Hit.meta <anygrain.hits.hit.Hit.meta>`, with the passage's ``start`` / ``end``),
the id becomes the document id (``Hit.doc_id``; ``0``, ``1``, ... when there is none) and
a ``title`` field, when the metadata has one that is a string, the title.

Text must be valid Unicode: a string holding a lone surrogate (U+D800 to U+DFFF on its
own, which a JSON ``\\ud800`` escape or a ``surrogateescape`` decoding makes) cannot be
stored as UTF-8.  Such a document is refused, naming it (its position here; its file and line when read from disk:
the corpus build checks every document with :func:`surrogate_problem`, and
``--on-error skip`` skips and counts it), rather than stored with the character replaced:
the text a hit shows would differ from the text given, without a word.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from anygrain.corpus.records import SourceDocument
from anygrain.errors import InputError, UsageError

#: The attribute names of a document's text, metadata and id, by framework (the first
#: whose text attribute an object has is used).
FIELDS = (
    ("page_content", "metadata", "id"),  # LangChain
    ("content", "meta", "id"),  # Haystack 2
    ("text", "metadata", "id_"),  # LlamaIndex Document / TextNode
)
#: The keys a dict document may use for its text, metadata and id.
DICT_TEXT = ("text", "page_content", "content")
DICT_META = ("meta", "metadata")
DICT_ID = ("id", "doc_id", "id_")
WHERE = "<python documents>"
# a code point no UTF-8 text can hold: a surrogate on its own
_SURROGATE = re.compile("[\\ud800-\\udfff]")


def texts_as_documents(
    texts: Iterable[str],
    metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ids: Sequence[Any] | None = None,
) -> list[SourceDocument]:
    """One document per text, with the metadata and id at the same position; a
    :class:`UsageError` naming the argument given as the wrong type."""
    texts = list(_iterable(texts, "texts", "an iterable of strings"))
    for name, given in (("metadatas", metadatas), ("ids", ids)):
        if given is None:
            continue
        if isinstance(given, str | bytes | Mapping) or not isinstance(given, Sequence):
            raise UsageError(f"{name}: must be a list, one per text, not {_kind(given)}")
        if len(given) != len(texts):
            raise InputError(f"{len(given)} {name} for {len(texts)} texts", path=WHERE)
    docs = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {i} is a {type(text).__name__}, not a string", path=WHERE)
        meta = metadatas[i] if metadatas is not None else None
        doc_id = ids[i] if ids is not None else None
        docs.append(make_document(i, text, meta, doc_id))
    return check_ids(docs)


def as_documents(docs: Iterable[Any]) -> list[SourceDocument]:
    """``docs`` (any mix of the types this module names) as anygrain documents."""
    given = _iterable(docs, "docs", "an iterable of documents")
    out = [as_document(i, d) for i, d in enumerate(given)]
    return check_ids(out)


def _iterable(given: Any, name: str, want: str) -> Iterable[Any]:
    """``given`` when it is a collection of items; a :class:`UsageError` naming ``name``
    otherwise.  A string or a dict is refused too: iterating one would index each character,
    or each key, as a document."""
    if isinstance(given, str | bytes | Mapping | os.PathLike) or not isinstance(given, Iterable):
        raise UsageError(f"{name}: must be {want}, not {_kind(given)}")
    return given


def _kind(value: Any) -> str:
    """``None``, ``a list``, ``an int``: what was given, for a message."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def check_out(out: Any) -> None:
    """Refuse an ``out`` that names no directory (None is a managed temporary one)."""
    if out is not None and not isinstance(out, str | os.PathLike):
        raise UsageError(f"out: must be a directory path (str or Path), not {_kind(out)}")


def surrogate_at(text: str) -> str | None:
    """Where ``text`` holds a lone surrogate (``U+D800 at character 3``), or None."""
    m = _SURROGATE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X} at character {m.start()}"


def surrogate_problem(doc: SourceDocument) -> tuple[str, str] | None:
    """``(field, why)`` when a field of ``doc`` (its id, title, text or metadata) holds a lone
    surrogate, which UTF-8 cannot store; None when all are valid Unicode."""
    meta = json.dumps(doc.meta, ensure_ascii=False) if doc.meta else ""
    for field, value in (("text", doc.text), ("id", doc.doc_id), ("title", doc.title)):
        where = surrogate_at(value) if isinstance(value, str) else None
        if where is not None:
            return field, f"holds a lone surrogate ({where}), which is not valid Unicode"
    where = surrogate_at(meta)
    if where is not None:
        return "metadata", "holds a lone surrogate, which is not valid Unicode"
    return None


def as_document(i: int, doc: Any) -> SourceDocument:
    """Document ``i`` of a list, whatever its type; :class:`InputError` for one of none."""
    if isinstance(doc, SourceDocument):
        return doc
    if isinstance(doc, str):
        return make_document(i, doc, None, None)
    if isinstance(doc, Mapping):
        return make_document(
            i, _first(doc, DICT_TEXT), _first(doc, DICT_META), _first(doc, DICT_ID)
        )
    for text_attr, meta_attr, id_attr in FIELDS:
        if hasattr(doc, text_attr):
            return make_document(
                i,
                getattr(doc, text_attr),
                getattr(doc, meta_attr, None),
                getattr(doc, id_attr, None),
            )
    raise InputError(
        f"document {i}: a {type(doc).__name__} is no document (give a string, a dict with "
        "'text', an anygrain SourceDocument, or a LangChain, LlamaIndex or Haystack Document)",
        path=WHERE,
    )


def _first(d: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def make_document(i: int, text: Any, meta: Any, doc_id: Any) -> SourceDocument:
    """Document ``i``: its text checked, its metadata a JSON-ready dict (or an error naming
    the document), its id a string (``i`` when None)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"document {i}: no text", path=WHERE)
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise InputError(
            f"document {i}: metadata is a {type(meta).__name__}, not a dict", path=WHERE
        )
    meta = dict(meta)
    try:
        json.dumps(meta, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InputError(f"document {i}: metadata is not JSON ({e})", path=WHERE) from None
    title = meta.get("title")
    doc = SourceDocument(
        doc_id=str(i) if doc_id is None else str(doc_id),
        title=title if isinstance(title, str) else "",
        text=text,
        meta=meta,
        origin=f"{WHERE}:{i}",
    )
    problem = surrogate_problem(doc)
    if problem is not None:
        raise InputError(f"document {i}: {problem[0]} {problem[1]}", path=WHERE)
    return doc


def check_ids(docs: list[SourceDocument]) -> list[SourceDocument]:
    """``docs``, or an error naming the first id two of them share."""
    seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        if d.doc_id in seen:
            raise InputError(
                f"documents {seen[d.doc_id]} and {i} have the same id {d.doc_id!r}", path=WHERE
            )
        seen[d.doc_id] = i
    if not docs:
        raise InputError("no documents given", path=WHERE)
    return docs
