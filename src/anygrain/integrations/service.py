"""One :class:`SearchService` per index for every integration in a process.

Two services over one :class:`Index` would run its query encoder from two threads (a
Hugging Face fast tokenizer raises "Already borrowed"), so the integrations share one:
keyed by the index object, or by the resolved directory an index is loaded from, and by
the reader options of the answer grain.  A service made here takes requests for up to
:data:`MAX_DEPTH` hits (its ``max_k``): a framework's fusion or reranking stage asks for
deep candidate lists; a service given keeps its own ``max_k``.

Also what the framework retrievers share: the index check (:func:`check_index`), one
call's search (:func:`search_hits`: the depth check, the call's settings over the
retriever's, the relevance threshold), and a result as the framework's documents
(:func:`convert_hits`, with the ids of :func:`document_ids` and the metadata of
:func:`hit_metadata`); each adapter keeps its framework's types.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from anygrain.hits.hit import Hit, above_threshold
from anygrain.index.base import Index
from anygrain.serve.service import RequestError, SearchService

#: The most hits one framework retriever call may ask for.
MAX_DEPTH = 1000
#: Hit JSON fields a framework document leaves out of its metadata (its text holds them).
TEXT_FIELDS = ("text", "before", "after")

T = TypeVar("T")


def check_depth(k: object) -> int:
    """``k`` as hits per query of a framework retriever (1 to :data:`MAX_DEPTH`)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DEPTH:
        raise RequestError(f"k must be between 1 and {MAX_DEPTH}, got {k!r}")
    return k


def check_index(index: Any) -> str | Path | Index | SearchService:
    """``index`` as a retriever takes it: a directory, an open :class:`Index` or a
    :class:`SearchService` (a ``TypeError`` names any other type)."""
    if not isinstance(index, str | Path | Index | SearchService):
        raise TypeError(
            f"index: an index directory, an Index or a SearchService, not {type(index).__name__}"
        )
    return index


class Settings(NamedTuple):
    """A retriever's search settings, or one call's (None: the retriever's own)."""

    k: int | None = None
    unit: str | None = None
    filter: dict[str, Any] | None = None
    score_threshold: float | None = None


def search_hits(
    service: SearchService,
    query: str,
    own: Settings,
    given: Settings,
    **options: Any,
) -> list[Hit]:
    """The hits of one retriever call, best first: the call's ``given`` settings over the
    retriever's ``own`` (``k`` checked by :func:`check_depth`), less those whose relevance
    is below the score threshold; ``options`` go to :meth:`SearchService.search`."""
    r = service.search(
        [query],
        unit=given.unit or own.unit,
        k=check_depth(given.k or own.k),
        filter=own.filter if given.filter is None else given.filter,
        **options,
    )
    threshold = own.score_threshold if given.score_threshold is None else given.score_threshold
    return above_threshold(r.hits[0], threshold)


class Configured(Protocol):
    """A retriever with the settings :class:`SettingsSearch` reads."""

    k: int
    unit: str | None
    filter: dict[str, Any] | None
    score_threshold: float | None

    @property
    def service(self) -> SearchService: ...

    def search_options(self) -> dict[str, Any]: ...


class SettingsSearch:
    """:meth:`search` for a retriever whose settings are its attributes ``k``, ``unit``,
    ``filter`` and ``score_threshold`` (the LangChain and LlamaIndex retrievers)."""

    def search_options(self) -> dict[str, Any]:
        """What each search passes :meth:`SearchService.search` besides the settings."""
        return {}

    def search(
        self: Configured,
        query: str,
        *,
        k: int | None = None,
        unit: str | None = None,
        filter: dict[str, Any] | None = None,
        score_threshold: float | None = None,
    ) -> list[Hit]:
        """The hits behind the retriever's documents: ``k``, ``unit``, ``filter`` and
        ``score_threshold``, given for one call, replace the retriever's."""
        own = Settings(self.k, self.unit, self.filter, self.score_threshold)
        given = Settings(k, unit, filter, score_threshold)
        return search_hits(self.service, query, own, given, **self.search_options())


def hit_metadata(
    hit: Hit,
    rank: int,
    left_out: Iterable[str] = TEXT_FIELDS,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A framework document's metadata for ``hit``: the passage's own metadata (``meta``:
    default :attr:`Hit.meta`), the hit's JSON at ``rank`` over it less the fields
    ``left_out``, then ``relevance``."""
    payload = hit.to_json(rank)
    for key in left_out:
        payload.pop(key)
    own = hit.meta if meta is None else meta
    return {**own, **payload, "relevance": hit.relevance}


def convert_hits(hits: Sequence[Hit], convert: Callable[[Hit, int, str], T]) -> list[T]:
    """One result's hits as a framework's documents, ``convert(hit, rank, id)`` each:
    ranked from 1, with the ids of :func:`document_ids`."""
    ids = document_ids(hits)
    return [convert(h, i, d) for i, (h, d) in enumerate(zip(hits, ids, strict=True), 1)]


def document_ids(hits: Sequence[Hit]) -> list[str]:
    """The framework document id of each hit: the user's document id (``Hit.doc_id``), so
    that fusion with the framework's own retrievers, caches and stores keyed by id see one
    document once.  Where several hits of one result share a document (two passages, two
    answers), each has ``DOC_ID#START-END``: its offsets in its document's text (its
    passage id and the span inside the passage where those are unknown)."""
    shared = Counter(h.doc_id for h in hits)
    ids: list[str] = []
    seen: set[str] = set()
    for h in hits:
        if shared[h.doc_id] == 1:
            i = h.doc_id
        elif h.char_start is not None:
            i = f"{h.doc_id}#{h.char_start}-{h.char_end}"
        else:
            s, e = h.span if h.span is not None else (0, len(h.text))
            i = f"{h.doc_id}#{h.passage_id}:{s}-{e}"
        n, base = 1, i
        while i in seen:  # one span twice (never from one search): still two documents
            n += 1
            i = f"{base}~{n}"
        seen.add(i)
        ids.append(i)
    return ids


_lock = threading.Lock()
# key -> (what the key names, kept alive so that an id used as a key is never reused; the
# service), for the life of the process: its worker threads never stop
_services: dict[tuple[Any, ...], tuple[Any, SearchService]] = {}


def shared_service(
    index: str | Path | Index | SearchService,
    *,
    reader: str | Path | None = None,
    read: int | None = None,
    **load_options: Any,
) -> SearchService:
    """The service searching ``index`` (a directory, an open :class:`Index`, or a service,
    returned as it is), made on first use and shared after: the same directory or index
    object with the same ``reader``/``read`` gets the same service (a ``TypeError`` names
    any other type: :func:`check_index`).  ``load_options`` are
    :meth:`Index.load`'s (``device``, ``model``), for a directory."""
    index = check_index(index)
    if isinstance(index, SearchService):
        return index
    where: Any = id(index) if isinstance(index, Index) else str(Path(index).resolve())
    options = tuple(sorted((k, repr(v)) for k, v in load_options.items()))
    key = (where, None if reader is None else str(reader), read, options)
    with _lock:
        found = _services.get(key)
        if found is None:
            settings = {"max_k": MAX_DEPTH, **load_options}
            service = SearchService.load(index, reader=reader, read=read, **settings)
            found = _services[key] = (index, service)
        return found[1]
