"""The search options a server's client sets, passed to the index whatever its kind.

A client sets the search options whose values the index checks before a search
(:attr:`Index.search_option_checks`: a phrase index's ``sparse_weight``, a hybrid index's
``fusion``, ``weight`` and ``depth``, ...); the index's own checks
(:meth:`Index.check_search_options`) refuse an option the kind does not take and a value
out of its range, naming the option.  The other search options are the server's: its own
request fields (``unit``, ``filter``), its batching and precision (``batch_size``,
``bf16``), in-process objects (``stats``, ``scope_rows``) and unbounded search depths,
which a client could otherwise set high enough to exhaust the server.

Checked options are a sorted tuple of pairs, so they are hashable: requests that ask for
the same options are searched as one batch (:mod:`anygrain.serve.service`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.index.base import Index

#: A request's search options, checked: sorted ``(name, value)`` pairs.
SearchOptions = tuple[tuple[str, Any], ...]

#: ``GET /search``'s own parameters; any other query parameter is a search option.
QUERY_FIELDS = frozenset({"q", "unit", "k", "filter", "min_confidence"})


def client_options(index: Index, options: Mapping[str, Any] | None) -> SearchOptions:
    """``options`` checked by ``index`` (None values dropped: not given); an
    :class:`AnygrainError` naming an option the kind does not take, one a client does not
    set, or a value the index refuses."""
    given = {name: v for name, v in (options or {}).items() if v is not None}
    if not given:
        return ()
    for name, value in given.items():
        if name in QUERY_FIELDS:
            raise AnygrainError(f"'{name}' is a field of the request, not a search option")
        # a scalar: a list or object could not be grouped by (nor is one a search option)
        if not isinstance(value, bool | int | float | str):
            raise AnygrainError(
                f"search option '{name}' takes a number, a string or a boolean, "
                f"not {type(value).__name__}"
            )
    checked = index.check_search_options(given)
    settable = index.search_option_checks
    for name in checked:
        if name not in settable:
            takes = ", ".join(sorted(settable)) or "none"
            raise AnygrainError(
                f"search option '{name}' is the server's to set, not a request's "
                f"(a request to this {index.kind.value} index sets: {takes})"
            )
    return tuple(sorted(checked.items()))


def query_options(params: Mapping[str, str]) -> dict[str, Any]:
    """The search options of ``GET /search``'s query: each parameter but its own fields,
    its value read as JSON reads a number or a boolean (``0.5``, ``100``, ``true``), else
    kept as text (``rrf``)."""
    return {name: query_value(text) for name, text in params.items() if name not in QUERY_FIELDS}


def query_value(text: str) -> Any:
    """A query parameter's value: a number or boolean where the text is one, else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, bool | int | float) else text
