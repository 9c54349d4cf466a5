"""``AnygrainRetriever``: an anygrain index as a LlamaIndex retriever (the ``llamaindex`` extra).

::

    from anygrain.integrations.llamaindex import AnygrainRetriever

    retriever = AnygrainRetriever("my-index", k=3, unit="sentence")
    for n in retriever.retrieve("Who created Python?"):
        s, e = n.node.metadata["span"]  # the sentence inside the passage text
        print(n.node.text[s:e], "--", n.node.metadata["title"], n.node.node_id, n.score)

Each hit is one :class:`~llama_index.core.schema.NodeWithScore` (``score``: the hit's)
around a :class:`~llama_index.core.schema.TextNode`:

* ``text`` -- the passage text;
* ``start_char_idx`` / ``end_char_idx`` -- the passage's offsets in its document's text
  (``metadata["start"]`` / ``metadata["end"]``);
* ``metadata`` -- as the LangChain retriever's: the passage's own metadata (its document's
  extra fields, ``start`` / ``end``; :attr:`anygrain.hits.hit.Hit.meta`), then the hit's
  JSON (:meth:`~anygrain.hits.hit.Hit.to_json`: ``rank``, ``unit``, ``score``,
  ``passage_id``, ``doc_id``, ``title``, ``span``, ``answer``, ``sentence``, ...; and
  ``meta``, the passage's metadata again, whole) over it, less ``text``, ``before`` and
  ``after``.  The search's bookkeeping (:data:`HIDDEN`) is left out of what the LLM and
  embedding models are shown; ``title``, ``passage_id``, ``doc_id``, ``answer`` and the
  user's fields stay in;
* ``node_id`` -- ``PASSAGE_ID#START-END``: the span inside the passage (the whole passage
  for passage and document hits), so two answers in one passage are two nodes (LlamaIndex
  drops a repeated node id); its ``SOURCE`` relationship (``ref_doc_id``) is the document id.

``node.text[span[0]:span[1]] == metadata["answer"]``: the exact span to cite.

``filter`` keeps the top ``k`` hits whose metadata match, exactly (not the top ``k``
filtered): an anygrain filter (``{"year": 1991}``, ``{"lang": ["en", "de"]}``,
``{"year": {"$gte": 2000}}``; :mod:`anygrain.index.filters`) or LlamaIndex's
``MetadataFilters`` (:func:`metadata_filter`).

Searches go through the index's :class:`~anygrain.serve.service.SearchService`, shared by
every retriever (and MCP server) over the same index in the process, so concurrent calls
never run the tokenizer from two threads; ``aretrieve`` waits in a worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from anygrain.hits.hit import Hit
from anygrain.index.base import Index
from anygrain.index.filters import MAX_DEPTH
from anygrain.integrations.service import shared_service
from anygrain.serve.service import SearchService

#: Hit JSON fields left out of a node's metadata (the node's text holds them).
LEFT_OUT = ("text", "before", "after")
#: Metadata keys the LLM and the embedding model are not shown (``get_content``): the
#: search's bookkeeping, not the passage's content.
HIDDEN = (
    "rank",
    "unit",
    "score",
    "passage_row",
    "span",
    "sentence",
    "reader_score",
    "retrieval_score",
    "meta",
    "start",
    "end",
    "char_start",
    "char_end",
)


#: LlamaIndex's filter operators as anygrain's (:mod:`anygrain.index.filters`).
OPERATORS = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.ANY: "$in",  # a list field holding any of the values
    FilterOperator.CONTAINS: "$eq",  # a list field holding the value
}


def metadata_filter(filters: MetadataFilters | MetadataFilter, _depth: int = 1) -> dict[str, Any]:
    """LlamaIndex's :class:`MetadataFilters` as an anygrain filter: the operators of
    :data:`OPERATORS`, ``all`` (a list field holding every value) and the conditions
    ``and``, ``or`` and ``not`` (none of the filters match, as LlamaIndex's own stores
    read it); a ``ValueError`` names any other (text matches, ``is_empty``), and one line
    a nest deeper than anygrain's filters allow (checked before it recurses further)."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"filter: nests deeper than {MAX_DEPTH} levels")
    if isinstance(filters, MetadataFilter):
        op = FilterOperator(filters.operator)
        if op is FilterOperator.ALL:
            values = filters.value if isinstance(filters.value, list) else [filters.value]
            return {"$and": [{filters.key: {"$eq": v}} for v in values]}
        if op not in OPERATORS:
            raise ValueError(
                f"filter: LlamaIndex's operator {op.value!r} has no anygrain equivalent "
                f"(use one of {', '.join(o.value for o in [*OPERATORS, FilterOperator.ALL])}, "
                "or an anygrain filter dict)"
            )
        value: Any = filters.value
        if OPERATORS[op] in ("$in", "$nin") and not isinstance(value, list):
            value = [value]
        return {filters.key: {OPERATORS[op]: value}}
    parts = [metadata_filter(f, _depth + 1) for f in filters.filters]
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition is FilterCondition.NOT:
        return {"$not": {"$or": parts}} if parts else {}
    if not parts:
        return {}
    if len(parts) == 1:
        return parts[0]
    return {"$and" if condition is FilterCondition.AND else "$or": parts}


def hit_node(hit: Hit, rank: int = 1) -> NodeWithScore:
    """One hit as a LlamaIndex :class:`NodeWithScore` (see the module docstring)."""
    payload = hit.to_json(rank)
    for key in LEFT_OUT:
        payload.pop(key)
    start, end = hit.span if hit.span is not None else (0, len(hit.text))
    node = TextNode(
        id_=f"{hit.passage_id}#{start}-{end}",
        text=hit.text,
        metadata={**hit.meta, **payload},
        start_char_idx=hit.meta.get("start"),
        end_char_idx=hit.meta.get("end"),
        excluded_llm_metadata_keys=list(HIDDEN),
        excluded_embed_metadata_keys=list(HIDDEN),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.doc_id)},
    )
    return NodeWithScore(node=node, score=float(hit.score))


class AnygrainRetriever(BaseRetriever):
    """Retrieve passages, sentences, phrases or read answers from an anygrain index.

    ``index``: an index directory, an open :class:`~anygrain.index.base.Index`, or a
    :class:`~anygrain.serve.service.SearchService`; ``k``: nodes per query (1 to 100);
    ``unit``: the grain (phrase, sentence, passage, document, or answer; default: the
    index's first); ``reader`` / ``read``: unit answer's reader and passages read;
    ``filter``: keep the top ``k`` hits whose metadata match (an anygrain filter,
    :mod:`anygrain.index.filters`, or LlamaIndex's :class:`MetadataFilters`:
    :func:`metadata_filter`).  ``callback_manager`` / ``verbose``: LlamaIndex's."""

    def __init__(
        self,
        index: str | Path | Index | SearchService,
        *,
        k: int = 4,
        unit: str | None = None,
        reader: str | Path | None = None,
        read: int | None = None,
        filter: dict[str, Any] | str | MetadataFilters | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(index, str | Path | Index | SearchService):
            raise TypeError(
                "index: an index directory, an Index or a SearchService, not "
                f"{type(index).__name__}"
            )
        self.k = SearchService.check_k(int(k))
        self._service = shared_service(index, reader=reader, read=read)
        if isinstance(filter, MetadataFilters | MetadataFilter):
            filter = metadata_filter(filter)
        self.filter = self._service.check_filter(filter)  # a bad filter fails here
        # a bad unit fails here, not at the first query
        self.unit = None if unit is None else self._service.check_unit(unit).value
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def service(self) -> SearchService:
        """The search service this retriever searches through."""
        return self._service

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        unit: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[Hit]:
        """The hits behind :meth:`retrieve`'s nodes (``k``, ``unit`` and ``filter``: given
        for this call, they replace the retriever's)."""
        r = self._service.search(
            [query],
            unit=unit or self.unit,
            k=k or self.k,
            filter=filter if filter is not None else self.filter,
        )
        return r.hits[0]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.search(query_bundle.query_str)
        return [hit_node(h, i) for i, h in enumerate(hits, 1)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the service's workers batch concurrent queries; this coroutine waits in a thread
        hits = await asyncio.to_thread(self.search, query_bundle.query_str)
        return [hit_node(h, i) for i, h in enumerate(hits, 1)]


__all__ = ["HIDDEN", "AnygrainRetriever", "hit_node", "metadata_filter"]
