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

Searches go through the index's :class:`~anygrain.serve.service.SearchService`, shared by
every retriever (and MCP server) over the same index in the process, so concurrent calls
never run the tokenizer from two threads; ``aretrieve`` waits in a worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from anygrain.hits.hit import Hit
from anygrain.index.base import Index
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
)


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
    index's first); ``reader`` / ``read``: unit answer's reader and passages read.
    ``callback_manager`` / ``verbose``: LlamaIndex's."""

    def __init__(
        self,
        index: str | Path | Index | SearchService,
        *,
        k: int = 4,
        unit: str | None = None,
        reader: str | Path | None = None,
        read: int | None = None,
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
        # a bad unit fails here, not at the first query
        self.unit = None if unit is None else self._service.check_unit(unit).value
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def service(self) -> SearchService:
        """The search service this retriever searches through."""
        return self._service

    def search(self, query: str, *, k: int | None = None, unit: str | None = None) -> list[Hit]:
        """The hits behind :meth:`retrieve`'s nodes (``k`` and ``unit``: this call's, over
        the retriever's)."""
        r = self._service.search([query], unit=unit or self.unit, k=k or self.k)
        return r.hits[0]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.search(query_bundle.query_str)
        return [hit_node(h, i) for i, h in enumerate(hits, 1)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the service's workers batch concurrent queries; this coroutine waits in a thread
        hits = await asyncio.to_thread(self.search, query_bundle.query_str)
        return [hit_node(h, i) for i, h in enumerate(hits, 1)]


__all__ = ["AnygrainRetriever", "HIDDEN", "hit_node"]
