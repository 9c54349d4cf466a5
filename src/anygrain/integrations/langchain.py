"""``AnygrainRetriever``: an anygrain index as a LangChain retriever (the ``langchain`` extra).

::

    from anygrain.integrations.langchain import AnygrainRetriever

    retriever = AnygrainRetriever(index="my-index", k=3, unit="sentence")
    for doc in retriever.invoke("Who created Python?"):
        s, e = doc.metadata["span"]  # the sentence inside the passage text
        print(doc.page_content[s:e], "--", doc.metadata["title"], doc.id)

Each hit is one :class:`~langchain_core.documents.Document`:

* ``page_content`` -- the passage text;
* ``metadata`` -- the passage's own metadata (its document's extra fields, ``start`` /
  ``end``: its offsets in its document; :attr:`anygrain.hits.hit.Hit.meta`), then the hit's
  JSON (:meth:`~anygrain.hits.hit.Hit.to_json`: ``rank``, ``unit``, ``score``,
  ``passage_id``, ``doc_id``, ``title``, ``span``, ``answer``, ``sentence``, ...; and
  ``meta``, the passage's metadata again, whole) over it, less ``text`` (the page content)
  and ``before`` / ``after`` (``page_content[:span[0]]`` and ``page_content[span[1]:]``);
* ``id`` -- ``PASSAGE_ID#START-END``: the span inside the passage (the whole passage for
  passage and document hits), so two answers in one passage are two documents.

``page_content[span[0]:span[1]] == metadata["answer"]``: the exact span to cite.

Searches go through the index's :class:`~anygrain.serve.service.SearchService`, shared by
every retriever (and MCP server) over the same index in the process, so concurrent calls,
sync or async, never run the tokenizer from two threads; ``ainvoke`` waits in a worker
thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from anygrain.hits.hit import Hit
from anygrain.index.base import Index
from anygrain.integrations.service import shared_service
from anygrain.serve.service import MAX_K, SearchService

#: Hit JSON fields left out of a Document's metadata (the page content holds them).
LEFT_OUT = ("text", "before", "after")


def hit_document(hit: Hit, rank: int = 1) -> Document:
    """One hit as a LangChain :class:`Document` (see the module docstring)."""
    payload = hit.to_json(rank)
    for key in LEFT_OUT:
        payload.pop(key)
    start, end = hit.span if hit.span is not None else (0, len(hit.text))
    return Document(
        page_content=hit.text,
        metadata={**hit.meta, **payload},
        id=f"{hit.passage_id}#{start}-{end}",
    )


class AnygrainRetriever(BaseRetriever):
    """Retrieve passages, sentences, phrases or read answers from an anygrain index.

    ``index``: an index directory, an open :class:`~anygrain.index.base.Index`, or a
    :class:`~anygrain.serve.service.SearchService`; ``k``: documents per query (4, as
    LangChain's retrievers); ``unit``:
    the grain (phrase, sentence, passage, document, or answer; default: the index's first);
    ``reader`` / ``read``: unit answer's reader and passages read; ``filter``: keep the top
    ``k`` hits whose metadata match (:mod:`anygrain.index.filters`); ``search_kwargs``:
    ``k``, ``unit`` and ``filter`` as LangChain's vector-store retrievers take them.
    ``invoke(query, k=..., unit=..., filter=...)`` overrides them for one call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any = Field(description="An index directory, an open Index, or a SearchService")
    k: int = Field(default=4, ge=1, le=MAX_K, description="Documents per query")
    unit: str | None = Field(default=None, description="The grain of the hits")
    reader: str | None = Field(default=None, description="Unit answer: the reader")
    read: int | None = Field(default=None, description="Unit answer: passages read")
    min_confidence: float | None = Field(
        default=None,
        description="Unit answer: below this calibrated confidence, the passages read "
        "(unit passage) instead of an answer",
    )
    filter: dict[str, Any] | None = Field(
        default=None, description="Keep the top k hits whose metadata match (a metadata filter)"
    )
    search_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="k, unit and filter, as LangChain's retrievers take"
    )

    _service: SearchService = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        if not isinstance(self.index, str | Path | Index | SearchService):
            raise TypeError(
                "index: an index directory, an Index or a SearchService, not "
                f"{type(self.index).__name__}"
            )
        self._service = shared_service(self.index, reader=self.reader, read=self.read)
        unknown = set(self.search_kwargs) - {"k", "unit", "filter"}
        if unknown:
            raise ValueError(f"search_kwargs: {', '.join(sorted(unknown))} (takes k, unit, filter)")
        for key in ("k", "unit", "filter"):  # LangChain's spelling of the same settings
            if self.search_kwargs.get(key) is not None:
                setattr(self, key, self.search_kwargs[key])
        self.filter = self._service.check_filter(self.filter)  # a bad filter fails here
        if self.unit is not None:
            self.unit = self._service.check_unit(self.unit).value  # a bad unit fails here

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
        """The hits behind :meth:`invoke`'s documents (``k``, ``unit`` and ``filter`` as
        there: given for one call, they replace the retriever's)."""
        r = self._service.search(
            [query],
            unit=unit or self.unit,
            k=k or self.k,
            filter=filter if filter is not None else self.filter,
            min_confidence=self.min_confidence,
        )
        return r.hits[0]

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        unit: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[Document]:
        hits = self.search(query, k=k, unit=unit, filter=filter)
        return [hit_document(h, i) for i, h in enumerate(hits, 1)]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        unit: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[Document]:
        # the service's workers batch concurrent queries; this coroutine waits in a thread
        hits = await asyncio.to_thread(self.search, query, k=k, unit=unit, filter=filter)
        return [hit_document(h, i) for i, h in enumerate(hits, 1)]


__all__ = ["AnygrainRetriever", "hit_document"]
