"""One :class:`SearchService` per index for every integration in a process.

Two services over one :class:`Index` would run its query encoder from two threads (a
Hugging Face fast tokenizer raises "Already borrowed"), so the integrations share one:
keyed by the index object, or by the resolved directory an index is loaded from, and by
the reader options of the answer grain.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from anygrain.index.base import Index
from anygrain.serve.service import SearchService

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
            service = SearchService.load(index, reader=reader, read=read, **load_options)
            found = _services[key] = (index, service)
        return found[1]
