"""``AnygrainRetriever``: an anygrain index as a Haystack component (the ``haystack`` extra).

::

    from haystack import Pipeline
    from haystack_integrations.components.retrievers.anygrain import AnygrainRetriever

    pipe = Pipeline()
    pipe.add_component("retriever", AnygrainRetriever("my-index", top_k=3, unit="sentence"))
    out = pipe.run({"retriever": {"query": "Who created Python?"}})["retriever"]
    for a in out["answers"]:
        s, e = a.document_offset.start, a.document_offset.end
        print(a.document.content[s:e], "--", a.document.meta["title"], a.document.id)

The component is Haystack's ``haystack_integrations.components.retrievers.anygrain
.AnygrainRetriever`` (its pipelines' YAML names it so, and Haystack loads it with its
default module allowlist); this module defines it.

``run(query, top_k=None, unit=None, filters=None, score_threshold=None)`` (and
``run_async``, the same in a worker thread) returns

* ``documents`` -- one :class:`~haystack.Document` per hit, best first: ``content`` the
  passage text, ``score`` the hit's, ``id`` the user's document id (``doc_id``: a
  ``DocumentJoiner`` fusing it with Haystack's own retrievers keeps one copy of a
  document; where several documents of one result share it, ``DOC_ID#START-END``, the
  hit's offsets in its document: :func:`anygrain.integrations.service.document_ids`),
  ``meta`` as the LangChain
  retriever's metadata: the passage's own metadata (its document's extra fields, ``start`` /
  ``end``: its offsets in its document; :attr:`anygrain.hits.hit.Hit.meta`), then the hit's
  JSON (:meth:`~anygrain.hits.hit.Hit.to_json`: ``rank``, ``unit``, ``score``,
  ``passage_id``, ``doc_id``, ``title``, ``span``, ``answer``, ``sentence``, ...) over
  it, less ``text``, ``before``, ``after`` and ``score`` (the document's content and
  score hold them), and ``relevance`` (:attr:`anygrain.hits.hit.Hit.relevance`, in
  [0, 1]: what ``score_threshold`` keeps); the passage's metadata again, whole, is ``passage_meta`` (the hit
  JSON's ``meta``: a Haystack Document flattens its meta beside its own fields, so
  neither ``meta`` nor a field named as one of them, :data:`RESERVED`, is a key of it);
* ``answers`` -- one :class:`~haystack.dataclasses.ExtractedAnswer` per hit with a span
  (units phrase, sentence and answer; none for passage and document hits), in the same
  order: ``data`` the span's text, ``document`` its document, ``document_offset`` the span
  inside ``document.content`` (``content[start:end] == data``), ``score`` the hit's; an
  answer hit's ``context`` is its sentence, ``context_offset`` the span inside it.

``filters`` keeps the top ``top_k`` hits whose metadata match, exactly (not the top
``top_k`` filtered): Haystack's filter syntax (``{"field": "meta.year", "operator": ">=",
"value": 2000}``, with ``AND`` / ``OR`` / ``NOT`` conditions; :func:`haystack_filter`) or an
anygrain filter (``{"year": {"$gte": 2000}}``; :mod:`anygrain.index.filters`).  Given to
``run``, they replace the component's.

The component serialises as its index directory and settings (``to_dict`` /
``from_dict``; a pipeline's YAML), and opens the index in :meth:`warm_up` (or on the first
``run``).  Searches go through the index's :class:`~anygrain.serve.service.SearchService`,
shared by every retriever (and MCP server) over the same index in the process, so
concurrent runs never run the tokenizer from two threads.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ExtractedAnswer

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit, check_threshold
from anygrain.index.base import Index
from anygrain.index.filters import check_bounds
from anygrain.integrations.service import (
    TEXT_FIELDS,
    Settings,
    check_depth,
    convert_hits,
    hit_metadata,
    search_hits,
    shared_service,
)
from anygrain.serve.service import SearchService

#: The module Haystack knows the component by (a namespace package, as Haystack's own
#: integrations are: on Haystack's default deserialization allowlist).
HAYSTACK_MODULE = "haystack_integrations.components.retrievers.anygrain"
#: The component's type in pipelines saved before it took that name.
OLD_TYPE = f"{__name__}.AnygrainRetriever"

#: Hit JSON fields left out of a Document's meta: its content and score hold them, and
#: ``meta`` is ``passage_meta`` there.
LEFT_OUT = (*TEXT_FIELDS, "score", "meta")
#: A Document's own fields: Haystack flattens ``meta`` beside them (``Document.to_dict``), so
#: a passage's metadata field of one of these names is in ``passage_meta`` only.
RESERVED = frozenset(
    ("id", "content", "blob", "meta", "score", "embedding", "sparse_embedding", "dataframe")
)


#: Haystack's comparison operators as anygrain's (:mod:`anygrain.index.filters`).
OPERATORS = {
    "==": "$eq",
    "!=": "$ne",
    ">": "$gt",
    ">=": "$gte",
    "<": "$lt",
    "<=": "$lte",
    "in": "$in",
    "not in": "$nin",
}


def is_haystack_filter(spec: Any) -> bool:
    """Whether ``spec`` is in Haystack's filter syntax (a comparison or a logical condition)
    rather than anygrain's."""
    if not isinstance(spec, dict) or "operator" not in spec:
        return False
    return set(spec) in ({"field", "operator", "value"}, {"operator", "conditions"})


def haystack_filter(spec: dict[str, Any]) -> dict[str, Any]:
    """A filter in Haystack's syntax as an anygrain filter: ``meta.FIELD`` is the field
    ``FIELD`` (a dotted name reaches into a nested object, as in Haystack); the comparisons
    of :data:`OPERATORS`; ``AND``, ``OR`` and ``NOT`` (not all of the conditions, as
    Haystack reads it).  A ``ValueError`` names what does not translate (a Document field
    such as ``content``)."""
    if "conditions" in spec:
        op = str(spec["operator"]).upper()
        parts = [haystack_filter(c) for c in spec["conditions"]]
        if op == "AND":
            return {"$and": parts}
        if op == "OR":
            return {"$or": parts}
        if op == "NOT":
            return {"$not": {"$and": parts}}
        raise ValueError(f"filters: unknown logical operator {spec['operator']!r} (AND, OR, NOT)")
    field, op, value = spec["field"], spec["operator"], spec["value"]
    if not isinstance(field, str) or not field:
        raise ValueError(f"filters: a field is a non-empty string, not {field!r}")
    if field.startswith("meta."):
        field = field[len("meta.") :]
    elif field in RESERVED:
        raise ValueError(
            f"filters: field {field!r} is a Document's own; anygrain filters on metadata "
            "(meta.FIELD)"
        )
    if op not in OPERATORS:
        raise ValueError(f"filters: unknown operator {op!r} (use one of {', '.join(OPERATORS)})")
    return {field: {OPERATORS[op]: value}}


def anygrain_filter(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """``spec`` (Haystack's syntax or anygrain's) as an anygrain filter; None for none."""
    if not spec:
        return None
    try:  # before the recursive translation: a filter nested thousands deep is one line
        check_bounds(spec)
    except AnygrainError as e:
        raise ValueError(str(e)) from None
    return haystack_filter(spec) if is_haystack_filter(spec) else spec


def hit_document(hit: Hit, rank: int = 1, id: str | None = None) -> Document:
    """One hit as a Haystack :class:`Document` (see the module docstring); ``id`` its
    document's (default: the hit's document id)."""
    flat = {k: v for k, v in hit.meta.items() if k not in RESERVED}
    return Document(
        id=hit.doc_id if id is None else id,
        content=hit.text,
        meta={**hit_metadata(hit, rank, LEFT_OUT, flat), "passage_meta": dict(hit.meta)},
        score=float(hit.score),
    )


def hit_answer(hit: Hit, query: str, document: Document) -> ExtractedAnswer | None:
    """The answer of one hit with a span (its :func:`hit_document` given), else None."""
    if hit.span is None:
        return None
    s, e = hit.span
    context = context_offset = None
    if hit.sentence is not None:
        cs, ce = hit.sentence
        context = hit.text[cs:ce]
        context_offset = ExtractedAnswer.Span(s - cs, e - cs)
    return ExtractedAnswer(
        query=query,
        score=float(hit.score),
        data=hit.text[s:e],
        document=document,
        context=context,
        document_offset=ExtractedAnswer.Span(s, e),
        context_offset=context_offset,
        meta={
            "unit": hit.unit.value,
            "passage_id": hit.passage_id,
            "doc_id": hit.doc_id,
            "title": hit.title,
        },
    )


@component
class AnygrainRetriever:
    """Retrieve passages, sentences, phrases or read answers from an anygrain index.

    ``index``: an index directory, or an open :class:`~anygrain.index.base.Index` (saved
    as its directory); ``top_k``: documents per query (1 to 1,000); ``unit``: the grain
    (phrase, sentence, passage, document, or answer; default: the index's first);
    ``reader`` / ``read``: unit answer's reader (a directory or a shipped reader's name) and
    passages read; ``filters``: keep the top ``top_k`` hits whose metadata match (Haystack's
    filter syntax or anygrain's; see the module docstring); ``score_threshold``: keep only
    the hits whose relevance (``meta["relevance"]``, in [0, 1]) is at least this."""

    # Haystack registers and serialises a component by its module: the namespace package's
    __module__ = HAYSTACK_MODULE

    def __init__(
        self,
        index: str | Path | Index,
        top_k: int = 10,
        unit: str | None = None,
        reader: str | None = None,
        read: int | None = None,
        filters: dict[str, Any] | None = None,
        score_threshold: float | None = None,
    ) -> None:
        if isinstance(index, Index):
            if getattr(index, "path", None) is None:
                raise ValueError("index: an Index with no directory cannot be saved")
            self._index: str | Path | Index = index
            self.index = str(index.path)
        elif isinstance(index, str | Path):
            self._index = self.index = str(index)
        else:
            raise TypeError(f"index: an index directory or an Index, not {type(index).__name__}")
        self.top_k = check_depth(int(top_k))
        if unit is not None:
            try:
                unit = Unit(unit).value
            except ValueError:
                raise ValueError(
                    f"unknown unit {unit!r}; choose one of: {', '.join(u.value for u in Unit)}"
                ) from None
        self.unit = unit
        self.reader = None if reader is None else str(reader)
        self.read = read
        self.filters = filters or None
        SearchService.check_filter(anygrain_filter(self.filters))  # a bad filter fails here
        self.score_threshold = check_threshold(score_threshold)
        self._service: SearchService | None = None

    def warm_up(self) -> None:
        """Open the index (once; shared with every integration over it) and check the unit."""
        if self._service is None:
            service = shared_service(self._index, reader=self.reader, read=self.read)
            service.check_unit(self.unit)  # a unit this index does not answer fails here
            self._service = service

    @property
    def service(self) -> SearchService:
        """The search service this retriever searches through (opened here if need be)."""
        self.warm_up()
        assert self._service is not None
        return self._service

    def to_dict(self) -> dict[str, Any]:
        """The component as its index directory and settings (a pipeline's YAML)."""
        return default_to_dict(
            self,
            index=self.index,
            top_k=self.top_k,
            unit=self.unit,
            reader=self.reader,
            read=self.read,
            filters=self.filters,
            score_threshold=self.score_threshold,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnygrainRetriever:
        if data.get("type") == OLD_TYPE:  # saved before the component took its Haystack name
            data = {**data, "type": f"{HAYSTACK_MODULE}.AnygrainRetriever"}
        return default_from_dict(cls, data)

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        unit: str | None = None,
        filters: dict[str, Any] | None = None,
        score_threshold: float | None = None,
    ) -> list[Hit]:
        """The hits behind :meth:`run`'s documents (``top_k``, ``unit``, ``filters`` and
        ``score_threshold`` as there)."""
        # the filter given for this call replaces the component's (an empty one: none)
        spec = anygrain_filter(filters if filters is not None else self.filters)
        own = Settings(self.top_k, self.unit, spec, self.score_threshold)
        return search_hits(self.service, query, own, Settings(top_k, unit, None, score_threshold))

    def _output(self, query: str, hits: list[Hit]) -> dict[str, Any]:
        documents = convert_hits(hits, hit_document)
        answers = [hit_answer(h, query, d) for h, d in zip(hits, documents, strict=True)]
        return {"documents": documents, "answers": [a for a in answers if a is not None]}

    @component.output_types(documents=list[Document], answers=list[ExtractedAnswer])
    def run(
        self,
        query: str,
        top_k: int | None = None,
        unit: str | None = None,
        filters: dict[str, Any] | None = None,
        score_threshold: float | None = None,
    ) -> dict[str, Any]:
        """Search ``query``: ``documents`` and ``answers`` (see the module docstring);
        ``top_k``, ``unit``, ``filters`` and ``score_threshold`` replace the component's for
        this run."""
        hits = self.search(
            query, top_k=top_k, unit=unit, filters=filters, score_threshold=score_threshold
        )
        return self._output(query, hits)

    @component.output_types(documents=list[Document], answers=list[ExtractedAnswer])
    async def run_async(
        self,
        query: str,
        top_k: int | None = None,
        unit: str | None = None,
        filters: dict[str, Any] | None = None,
        score_threshold: float | None = None,
    ) -> dict[str, Any]:
        """:meth:`run`, waiting for the search service in a worker thread."""
        hits = await asyncio.to_thread(
            self.search,
            query,
            top_k=top_k,
            unit=unit,
            filters=filters,
            score_threshold=score_threshold,
        )
        return self._output(query, hits)


# pipelines saved before the component took its Haystack name load as well (where the
# caller allows this module)
component.registry[OLD_TYPE] = AnygrainRetriever


__all__ = [
    "HAYSTACK_MODULE",
    "RESERVED",
    "AnygrainRetriever",
    "anygrain_filter",
    "haystack_filter",
    "hit_answer",
    "hit_document",
]
