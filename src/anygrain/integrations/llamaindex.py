"""``AnygrainRetriever``: an anygrain index as a LlamaIndex retriever (the ``llamaindex`` extra).

::

    from anygrain.integrations.llamaindex import AnygrainRetriever

    retriever = AnygrainRetriever("my-index", similarity_top_k=3, unit="sentence")
    for n in retriever.retrieve("Who created Python?"):
        s, e = n.node.metadata["span"]  # the sentence inside the passage text
        print(n.node.text[s:e], "--", n.node.metadata["title"], n.node.node_id, n.score)

    retriever.persist("saved")  # the index and the settings, as LlamaIndex persists
    again = AnygrainRetriever.from_persist_dir("saved")

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
  ``after``, and ``relevance`` (:attr:`anygrain.hits.hit.Hit.relevance`, in [0, 1]: what
  ``score_threshold`` keeps).  The search's bookkeeping (:data:`HIDDEN`) is left out of what the LLM and
  embedding models are shown; ``title``, ``passage_id``, ``doc_id``, ``answer`` and the
  user's fields stay in;
* ``node_id`` -- the user's document id (``doc_id``), as the nodes of the user's own
  retrievers and stores are keyed; where several nodes of one result share it,
  ``DOC_ID#START-END``, the hit's offsets in its document, so two answers in one passage
  are two nodes (LlamaIndex drops a repeated node id;
  :func:`anygrain.integrations.service.document_ids`); its ``SOURCE`` relationship
  (``ref_doc_id``) is the document id.

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
import json
import shutil
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

from anygrain.hits.hit import Hit, check_threshold
from anygrain.index.base import Index
from anygrain.index.filters import MAX_DEPTH
from anygrain.integrations.service import (
    SettingsSearch,
    check_depth,
    convert_hits,
    hit_metadata,
    shared_service,
)
from anygrain.serve.service import SearchService

#: What :meth:`AnygrainRetriever.persist` writes beside the index's copy.
SETTINGS_FILE = "anygrain_retriever.json"
#: The index's copy in a persist directory.
INDEX_DIR = "index"

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
    "relevance",
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


class HitNode(TextNode):
    """A hit's :class:`TextNode` (saved and loaded as one).  Its ``hash`` is that of the
    user's own node of the passage (its text and the document's metadata, less the
    ``start`` / ``end`` anygrain adds): LlamaIndex's fusion (``QueryFusionRetriever``) and
    ingestion key nodes by it, so this node and the user's BM25 or vector store's node of
    the same passage are one node there, not two."""

    @property
    def hash(self) -> str:
        meta = self.metadata.get("meta")
        if not isinstance(meta, dict):
            return super().hash
        user = {k: v for k, v in meta.items() if k not in ("start", "end")}
        return TextNode(text=self.text, metadata=user).hash


def hit_node(hit: Hit, rank: int = 1, id: str | None = None) -> NodeWithScore:
    """One hit as a LlamaIndex :class:`NodeWithScore` (see the module docstring); ``id``
    its node id (default: the hit's document id)."""
    fields: dict[str, Any] = dict(  # a dict: TextNode's fields are aliased for type checkers
        id_=hit.doc_id if id is None else id,
        text=hit.text,
        metadata=hit_metadata(hit, rank),
        start_char_idx=hit.meta.get("start"),
        end_char_idx=hit.meta.get("end"),
        excluded_llm_metadata_keys=list(HIDDEN),
        excluded_embed_metadata_keys=list(HIDDEN),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.doc_id)},
    )
    node = HitNode(**fields)
    return NodeWithScore(node=node, score=float(hit.score))


def hit_nodes(hits: list[Hit]) -> list[NodeWithScore]:
    """One result's hits as nodes, ranked from 1, with their ids
    (:func:`~anygrain.integrations.service.document_ids`)."""
    return convert_hits(hits, hit_node)


class AnygrainRetriever(SettingsSearch, BaseRetriever):
    """Retrieve passages, sentences, phrases or read answers from an anygrain index.

    ``index``: an index directory, an open :class:`~anygrain.index.base.Index`, or a
    :class:`~anygrain.serve.service.SearchService`; ``k`` (or ``similarity_top_k``,
    LlamaIndex's name for it): nodes per query (1 to 1,000); ``unit``: the grain (phrase,
    sentence, passage, document, or answer; default: the index's first); ``reader`` /
    ``read``: unit answer's reader and passages read; ``filter``: keep the top ``k`` hits
    whose metadata match (an anygrain filter, :mod:`anygrain.index.filters`, or
    LlamaIndex's :class:`MetadataFilters`: :func:`metadata_filter`); ``score_threshold``:
    keep only the hits whose relevance (``metadata["relevance"]``, in [0, 1]) is at least
    this.  ``callback_manager`` / ``verbose``: LlamaIndex's.

    :meth:`persist` saves the index and the settings to a directory,
    :meth:`from_persist_dir` opens them again."""

    def __init__(
        self,
        index: str | Path | Index | SearchService,
        *,
        k: int | None = None,
        similarity_top_k: int | None = None,
        unit: str | None = None,
        reader: str | Path | None = None,
        read: int | None = None,
        filter: dict[str, Any] | str | MetadataFilters | None = None,
        score_threshold: float | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if k is not None and similarity_top_k is not None and k != similarity_top_k:
            raise ValueError(f"k ({k}) and similarity_top_k ({similarity_top_k}) differ")
        depth = k if k is not None else similarity_top_k
        self.k = check_depth(4 if depth is None else depth)
        self.reader = None if reader is None else str(reader)
        self.read = read
        self._service = shared_service(index, reader=reader, read=read)
        if isinstance(filter, MetadataFilters | MetadataFilter):
            filter = metadata_filter(filter)
        self.filter = self._service.check_filter(filter)  # a bad filter fails here
        # a bad unit fails here, not at the first query
        self.unit = None if unit is None else self._service.check_unit(unit).value
        self.score_threshold = check_threshold(score_threshold)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def similarity_top_k(self) -> int:
        """``k``, by LlamaIndex's name."""
        return self.k

    @similarity_top_k.setter
    def similarity_top_k(self, value: int) -> None:
        self.k = check_depth(value)

    @property
    def service(self) -> SearchService:
        """The search service this retriever searches through."""
        return self._service

    def persist(self, persist_dir: str | Path) -> None:
        """Save the index (a copy of its directory, under ``persist_dir/index``) and the
        retriever's settings (``persist_dir/anygrain_retriever.json``), as LlamaIndex's
        retrievers persist: :meth:`from_persist_dir` opens them again, after this process
        too (an :meth:`Index.from_texts <anygrain.index.base.Index.from_texts>` index's
        temporary directory included)."""
        where = Path(persist_dir)
        source = self._service.index.path
        if source is None:
            raise ValueError("persist: the index has no directory to copy")
        copy = where / INDEX_DIR
        if copy.exists():
            raise FileExistsError(f"persist: {copy} exists (persist into a new directory)")
        where.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, copy)
        settings = {
            "k": self.k,
            "unit": self.unit,
            "reader": self.reader,
            "read": self.read,
            "filter": self.filter,
            "score_threshold": self.score_threshold,
        }
        (where / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", "utf-8")

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path, **overrides: Any) -> AnygrainRetriever:
        """The retriever :meth:`persist` saved in ``persist_dir``; ``overrides`` replace its
        settings (``k``, ``unit``, ``callback_manager``, ...)."""
        where = Path(persist_dir)
        try:
            settings = json.loads((where / SETTINGS_FILE).read_text("utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{where}: no {SETTINGS_FILE} (not a directory AnygrainRetriever.persist wrote)"
            ) from None
        if "similarity_top_k" in overrides:
            settings.pop("k", None)
        return cls(str(where / INDEX_DIR), **{**settings, **overrides})

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return hit_nodes(self.search(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the service's workers batch concurrent queries; this coroutine waits in a thread
        return hit_nodes(await asyncio.to_thread(self.search, query_bundle.query_str))


__all__ = ["HIDDEN", "AnygrainRetriever", "HitNode", "hit_node", "hit_nodes", "metadata_filter"]
