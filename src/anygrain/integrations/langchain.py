"""``AnygrainRetriever``: an anygrain index as a LangChain retriever (the ``langchain`` extra).

::

    from anygrain.integrations.langchain import AnygrainRetriever

    retriever = AnygrainRetriever(index="my-index", k=3, unit="sentence")
    for doc in retriever.invoke("Who created Python?"):
        s, e = doc.metadata["span"]  # the sentence inside the passage text
        print(doc.page_content[s:e], "--", doc.metadata["title"], doc.id)

    # or over texts or documents, built here (a BM25 index in a temporary directory)
    retriever = AnygrainRetriever.from_texts(texts, metadatas=metas, ids=ids, k=3)

Each hit is one :class:`~langchain_core.documents.Document`:

* ``page_content`` -- the passage text;
* ``metadata`` -- the passage's own metadata (its document's extra fields, ``start`` /
  ``end``: its offsets in its document; :attr:`anygrain.hits.hit.Hit.meta`), then the hit's
  JSON (:meth:`~anygrain.hits.hit.Hit.to_json`: ``rank``, ``unit``, ``score``,
  ``passage_id``, ``doc_id``, ``title``, ``span``, ``answer``, ``sentence``, ...; and
  ``meta``, the passage's metadata again, whole) over it, less ``text`` (the page content)
  and ``before`` / ``after`` (``page_content[:span[0]]`` and ``page_content[span[1]:]``),
  and ``relevance``: :attr:`anygrain.hits.hit.Hit.relevance`, in [0, 1] (what
  ``score_threshold`` keeps);
* ``id`` -- the user's document id (``doc_id``), so that fusion with other retrievers
  (``EnsembleRetriever``) and caches keyed by id see one document once; where several
  documents of one result share it, ``DOC_ID#START-END``, the hit's offsets in its
  document (:func:`anygrain.integrations.service.document_ids`).

``page_content[span[0]:span[1]] == metadata["answer"]``: the exact span to cite.

Searches go through the index's :class:`~anygrain.serve.service.SearchService`, shared by
every retriever (and MCP server) over the same index in the process, so concurrent calls,
sync or async, never run the tokenizer from two threads; ``ainvoke`` waits in a worker
thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from anygrain.hits.hit import Hit, check_threshold
from anygrain.index.base import Index
from anygrain.integrations.service import (
    MAX_DEPTH,
    SettingsSearch,
    check_depth,
    convert_hits,
    hit_metadata,
    shared_service,
)
from anygrain.serve.service import SearchService


def hit_document(hit: Hit, rank: int = 1, id: str | None = None) -> Document:
    """One hit as a LangChain :class:`Document` (see the module docstring); ``id`` its
    document's (default: the hit's document id)."""
    return Document(
        page_content=hit.text,
        metadata=hit_metadata(hit, rank),
        id=hit.doc_id if id is None else id,
    )


def hit_documents(hits: list[Hit]) -> list[Document]:
    """One result's hits as Documents, ranked from 1, with their ids
    (:func:`~anygrain.integrations.service.document_ids`)."""
    return convert_hits(hits, hit_document)


#: Retriever fields ``search_kwargs`` may set, as LangChain's vector-store retrievers do.
SEARCH_KWARGS = ("k", "unit", "filter", "score_threshold")


class AnygrainRetriever(SettingsSearch, BaseRetriever):
    """Retrieve passages, sentences, phrases or read answers from an anygrain index.

    ``index``: an index directory, an open :class:`~anygrain.index.base.Index`, or a
    :class:`~anygrain.serve.service.SearchService`; ``k``: documents per query (4, as
    LangChain's retrievers; at most 1,000); ``unit``:
    the grain (phrase, sentence, passage, document, or answer; default: the index's first);
    ``reader`` / ``read``: unit answer's reader and passages read; ``filter``: keep the top
    ``k`` hits whose metadata match (:mod:`anygrain.index.filters`); ``score_threshold``:
    keep only the hits whose relevance (``metadata["relevance"]``, in [0, 1]) is at least
    this; ``search_kwargs``: ``k``, ``unit``, ``filter`` and ``score_threshold`` as
    LangChain's vector-store retrievers take them.  ``invoke(query, k=..., unit=...,
    filter=..., score_threshold=...)`` overrides them for one call.

    :meth:`from_texts` and :meth:`from_documents` build the index from Python."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any = Field(description="An index directory, an open Index, or a SearchService")
    k: int = Field(default=4, ge=1, le=MAX_DEPTH, description="Documents per query")
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
    score_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Keep the hits at least this relevant (0-1)"
    )
    search_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="k, unit, filter and score_threshold, as LangChain's retrievers take",
    )

    _service: SearchService = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._service = shared_service(self.index, reader=self.reader, read=self.read)
        unknown = set(self.search_kwargs) - set(SEARCH_KWARGS)
        if unknown:
            raise ValueError(
                f"search_kwargs: {', '.join(sorted(unknown))} (takes {', '.join(SEARCH_KWARGS)})"
            )
        for key in SEARCH_KWARGS:  # LangChain's spelling of the same settings
            if self.search_kwargs.get(key) is not None:
                setattr(self, key, self.search_kwargs[key])
        self.k = check_depth(self.k)
        self.score_threshold = check_threshold(self.score_threshold)
        self.filter = self._service.check_filter(self.filter)  # a bad filter fails here
        if self.unit is not None:
            self.unit = self._service.check_unit(self.unit).value  # a bad unit fails here

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AnygrainRetriever:
        """A retriever over ``texts``, one document each, with the metadata and id at the
        same position (LangChain's ``from_texts``): the index is built by
        :meth:`Index.from_texts <anygrain.index.base.Index.from_texts>`.  ``kwargs`` that
        are the retriever's fields (``k``, ``unit``, ``score_threshold``, ...) go to it, the
        rest to the build (``kind``, ``out``: default a BM25 index in a temporary
        directory, removed with the retriever's index)."""
        fields, build = cls._split(kwargs)
        return cls(index=Index.from_texts(texts, metadatas, ids, **build), **fields)

    @classmethod
    def from_documents(cls, documents: Iterable[Any], **kwargs: Any) -> AnygrainRetriever:
        """A retriever over LangChain ``Document`` s (their ``page_content``, ``metadata``
        and ``id``; or any document :meth:`Index.from_documents
        <anygrain.index.base.Index.from_documents>` takes); ``kwargs`` as
        :meth:`from_texts`'s."""
        fields, build = cls._split(kwargs)
        return cls(index=Index.from_documents(documents, **build), **fields)

    @classmethod
    def _split(cls, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``kwargs`` as (the retriever's fields, the index build's options)."""
        if "index" in kwargs:
            raise TypeError("index: from_texts and from_documents build it")
        fields = {k: v for k, v in kwargs.items() if k in cls.model_fields}
        return fields, {k: v for k, v in kwargs.items() if k not in fields}

    @property
    def service(self) -> SearchService:
        """The search service this retriever searches through."""
        return self._service

    def search_options(self) -> dict[str, Any]:
        """Unit answer's confidence floor, for each search."""
        return {"min_confidence": self.min_confidence}

    # ``settings``: one call's k, unit, filter and score_threshold (:meth:`search`'s)
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **settings: Any
    ) -> list[Document]:
        return hit_documents(self.search(query, **settings))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **settings: Any
    ) -> list[Document]:
        # the service's workers batch concurrent queries; this coroutine waits in a thread
        return hit_documents(await asyncio.to_thread(self.search, query, **settings))


__all__ = ["AnygrainRetriever", "hit_document", "hit_documents"]
