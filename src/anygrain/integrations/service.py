"""One :class:`SearchService` per index for every integration in a process.

Two services over one :class:`Index` would run its query encoder from two threads (a
Hugging Face fast tokenizer raises "Already borrowed"), so the integrations share one:
keyed by the index object, or by the resolved directory an index is loaded from, and by
the reader options of the answer grain.  A service made here takes requests for up to
:data:`MAX_DEPTH` hits (its ``max_k``): a framework's fusion or reranking stage asks for
deep candidate lists; a service given keeps its own ``max_k``.

Also what the framework retrievers share: the ids of their documents
(:func:`document_ids`, the user's document ids) and the depth check.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anygrain.hits.hit import Hit
from anygrain.index.base import Index
from anygrain.serve.service import RequestError, SearchService

#: The most hits one framework retriever call may ask for.
MAX_DEPTH = 1000


def check_depth(k: int) -> int:
    """``k`` as hits per query of a framework retriever (1 to :data:`MAX_DEPTH`)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DEPTH:
        raise RequestError(f"k must be between 1 and {MAX_DEPTH}, got {k!r}")
    return k


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
    object with the same ``reader``/``read`` gets the same service.  ``load_options`` are
    :meth:`Index.load`'s (``device``, ``model``), for a directory."""
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
