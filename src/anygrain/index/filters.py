"""Metadata filters: which hits ``search(..., filter=...)`` keeps, exactly.

A filter is a dict over the fields of :attr:`Hit.meta <anygrain.hits.hit.Hit.meta>` (the
document's extra fields, the passage's own, ``start`` / ``end``), plus ``doc_id``,
``title`` and ``passage_id``; a dotted name reaches into a nested object (``nested.lang``)::

    {"field": value}                 equal (a list-valued field: holds value)
    {"field": [v1, v2]}              one of them
    {"field": {"$eq": v}}            also $ne, $in, $nin (lists), $gt, $gte, $lt, $lte,
                                     $exists (true / false)
    {"$and": [f, ...]}, {"$or": [f, ...]}, {"$not": f}

Several fields in one dict must all match.  A field a passage lacks matches only ``$ne``,
``$nin`` and ``$exists: false``.  Against an index, a field that no passage has, or a
value of a type the field never holds, is refused in one line naming the field
(:mod:`anygrain.index.filter_fields`).

A filter is checked before anything else is read of it: at most :data:`MAX_DEPTH` levels
deep and :data:`MAX_TERMS` terms in all (:func:`check_bounds`), so any filter is answered
with one line, however deep or large.

A filter is evaluated once per corpus into a boolean mask over passage rows (cached on the
index: :func:`allowed_rows`), less the rows of deleted documents (the index's tombstones:
:func:`search_mask`; an index with deletions searches through the mask with no filter
too, so no door returns a deleted document); a masked search (:func:`search_filtered`) asks the index
for more than ``k`` hits (``k`` over the share of rows that match) and drops hits of other
rows, doubling the depth for the queries still short of ``k`` until they have ``k`` or the
index returns fewer hits than asked (it has no more).  Kinds whose hits are made from
``(rows, scores)`` arrays (``search_rows_encoded``: BM25, dense, hybrid, their shards) are
masked on the arrays, before any hit is made (:func:`search_rows_filtered`); phrase indexes
search only the matching rows when they are few (:func:`scope_of`), and filter their hits
otherwise.  What comes back is the top ``k`` that match, not the top ``k`` filtered.
This module imports no index kind.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from anygrain.errors import UsageError
from anygrain.index.encoded import EncodedQueries
from anygrain.index.filter_fields import MISSING, FieldSurvey
from anygrain.index.filter_fields import get_field as _get

if TYPE_CHECKING:
    import numpy as np

    from anygrain.corpus.store import CorpusStore

#: Doubling rounds before a filtered search stops asking for more (2**12 times the first
#: depth, itself ``k`` over the share of matching rows).
MAX_ROUNDS = 12
#: Masks kept per index (one per distinct filter).
MAX_CACHED = 32
#: Up to this many matching rows, a phrase index searches only them (``scope_rows``).
SCOPE_ROWS = 256
#: Rows whose metadata is read at a time when a mask is computed.
BATCH = 4096
#: How deep a filter may nest: each object is a level, and each list but an ``$and`` /
#: ``$or``'s own (a value's list); far deeper than any filter needs, shallow enough that
#: reading one never nears Python's recursion limit.
MAX_DEPTH = 32
#: How many terms (objects, lists and values, all told) a filter may hold.
MAX_TERMS = 10_000

COMPARE = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = ("$eq", "$ne", "$in", "$nin", *COMPARE, "$exists")
LOGICAL = ("$and", "$or", "$not")
#: Passage columns a filter may name besides the metadata.
COLUMNS = ("doc_id", "title", "passage_id")

Scalar = str | int | float | bool | None
Test = Callable[[Mapping[str, Any]], bool]


def parse_filter(spec: Any) -> dict[str, Any]:
    """``spec`` (a dict, its JSON text, or the command line's list of ``FIELD=VALUE``:
    :func:`pairs_filter`) checked: :class:`UsageError`, one line naming what is wrong, for
    anything :mod:`this syntax <anygrain.index.filters>` does not define."""
    if isinstance(spec, list | tuple):
        check_bounds(spec)  # each item is read as a pair or a filter
        return pairs_filter(spec)
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise UsageError(f"filter: not JSON ({e.msg} at character {e.pos})") from None
        except RecursionError:  # deeper than the json module reads: far past the limit
            raise UsageError(_too_deep()) from None
    check_bounds(spec)
    if not isinstance(spec, Mapping):
        raise UsageError(f"filter: a JSON object of field: value is needed, not {spec!r}")
    compile_filter(spec)
    return dict(spec)


def pairs_filter(items: Sequence[Any]) -> dict[str, Any]:
    """The filter of ``anygrain search --filter``'s values: ``FIELD=VALUE`` is equality,
    ``FIELD=A,B`` and a field given again are membership (any of the values), and the
    fields must all match; a value that reads as a JSON number, boolean or null matches
    that too (``year=2012`` matches 2012 and "2012").  An item that is a JSON object is a
    filter of its own, which must match too."""
    fields: dict[str, list[Scalar]] = {}
    objects: list[dict[str, Any]] = []
    for item in items:
        text = str(item).strip()
        if text.startswith("{"):
            objects.append(parse_filter(text))
            continue
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"filter: {text!r} is not FIELD=VALUE (nor a JSON object)")
        values = fields.setdefault(name.strip(), [])
        for v in value.split(","):
            values.extend(_command_line_values(v.strip()))
    spec: dict[str, Any] = {f: {"$in": vs} for f, vs in fields.items()}
    if objects:
        spec = {"$and": [spec, *objects]} if spec else {"$and": objects}
    compile_filter(spec)
    return spec


def _command_line_values(v: str) -> list[Scalar]:
    """``v`` as a string, and as the JSON scalar it spells when it spells one."""
    try:
        parsed = json.loads(v)
    except json.JSONDecodeError:
        return [v]
    if parsed is None or isinstance(parsed, bool | int | float):
        return [v, parsed]
    return [v]


def _too_deep() -> str:
    return f"filter: nests deeper than {MAX_DEPTH} levels"


def check_bounds(spec: Any) -> None:
    """:class:`UsageError` for a filter deeper than :data:`MAX_DEPTH` levels or of more than
    :data:`MAX_TERMS` terms, found by walking it without recursion (the checks that read
    a filter recurse, as far as it nests)."""
    terms = 1
    todo: list[tuple[Any, int]] = [(spec, 1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, Mapping):
            items: list[tuple[Any, int]] = []
            for key, v in node.items():
                if key in ("$and", "$or") and isinstance(v, list | tuple):
                    items.extend((x, depth + 1) for x in v)  # the operator's list: no level
                    terms += 1
                else:
                    items.append((v, depth + 1))
        elif isinstance(node, list | tuple):
            items = [(x, depth + 1) for x in node]
        else:
            continue
        if depth > MAX_DEPTH:
            raise UsageError(_too_deep())
        terms += len(items)
        if terms > MAX_TERMS:
            raise UsageError(
                f"filter: more than {MAX_TERMS} terms (objects, lists and values in all)"
            )
        todo.extend(items)


def compile_filter(spec: Mapping[str, Any]) -> Test:
    """The test a record (a passage's fields) must pass; :class:`UsageError` for bad syntax."""
    check_bounds(spec)
    return _compile(spec)


def _compile(spec: Mapping[str, Any]) -> Test:
    tests = [_clause(k, v) for k, v in spec.items()]
    return lambda rec: all(t(rec) for t in tests)


def _clause(key: Any, value: Any) -> Test:
    if not isinstance(key, str) or not key:
        raise UsageError(f"filter: field names are non-empty strings, not {key!r}")
    if key.startswith("$"):
        return _logical(key, value)
    if isinstance(value, Mapping):
        if not value:
            raise UsageError(f"filter: field {key!r} has an empty operator object")
        tests = [_operator(key, op, arg) for op, arg in value.items()]
        return lambda rec: all(t(rec) for t in tests)
    if isinstance(value, list | tuple):
        return _operator(key, "$in", value)
    return _operator(key, "$eq", value)


def _logical(op: str, value: Any) -> Test:
    if op not in LOGICAL:
        raise UsageError(
            f"filter: unknown operator {op!r} (fields are names; operators: "
            f"{', '.join(LOGICAL)} over filters, {', '.join(OPERATORS)} on a field)"
        )
    if op == "$not":
        if not isinstance(value, Mapping):
            raise UsageError("filter: $not takes one filter object")
        inner = _compile(value)
        return lambda rec: not inner(rec)
    if not isinstance(value, list | tuple) or not value:
        raise UsageError(f"filter: {op} takes a non-empty list of filter objects")
    if not all(isinstance(v, Mapping) for v in value):
        raise UsageError(f"filter: {op} takes a list of filter objects")
    parts = [_compile(v) for v in value]
    if op == "$and":
        return lambda rec: all(p(rec) for p in parts)
    return lambda rec: any(p(rec) for p in parts)


def _scalar(field: str, op: str, v: Any) -> Scalar:
    if v is not None and not isinstance(v, str | int | float | bool):
        raise UsageError(
            f"filter: field {field!r} {op} takes a string, number, boolean or null, not {v!r}"
        )
    return v  # type: ignore[no-any-return]


def _equal(have: Any, want: Scalar) -> bool:
    if isinstance(have, list):
        return any(_same(h, want) for h in have)
    return _same(have, want)


def _same(a: Any, b: Scalar) -> bool:
    # True == 1 in Python; a filter on a flag must not match a count
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _operator(field: str, op: Any, arg: Any) -> Test:
    if op in ("$eq", "$ne"):
        want = _scalar(field, op, arg)
        if op == "$eq":
            return lambda rec: _equal(_get(rec, field), want)
        return lambda rec: not _equal(_get(rec, field), want)
    if op in ("$in", "$nin"):
        if not isinstance(arg, list | tuple):
            raise UsageError(f"filter: field {field!r} {op} takes a list of values")
        values = [_scalar(field, op, v) for v in arg]
        if op == "$in":
            return lambda rec: any(_equal(_get(rec, field), v) for v in values)
        return lambda rec: not any(_equal(_get(rec, field), v) for v in values)
    if op in COMPARE:
        return _compare(field, op, arg)
    if op == "$exists":
        if not isinstance(arg, bool):
            raise UsageError(f"filter: field {field!r} $exists takes true or false")
        return lambda rec: (_get(rec, field) is not MISSING) == arg
    raise UsageError(
        f"filter: unknown operator {op!r} on field {field!r} (use one of {', '.join(OPERATORS)})"
    )


def _compare(field: str, op: str, arg: Any) -> Test:
    if isinstance(arg, bool) or not isinstance(arg, str | int | float):
        raise UsageError(f"filter: field {field!r} {op} takes a number or a string, not {arg!r}")
    number = not isinstance(arg, str)

    def test(rec: Mapping[str, Any]) -> bool:
        v = _get(rec, field)
        if isinstance(v, bool) or (number and not isinstance(v, int | float)):
            return False
        if not number and not isinstance(v, str):
            return False
        if op == "$gt":
            return bool(v > arg)
        if op == "$gte":
            return bool(v >= arg)
        if op == "$lt":
            return bool(v < arg)
        return bool(v <= arg)

    return test


def filter_key(spec: Mapping[str, Any]) -> str:
    """One string per filter (its canonical JSON): the key masks are cached under."""
    return json.dumps(spec, sort_keys=True, ensure_ascii=False, default=str)


def row_mask(store: CorpusStore, spec: Mapping[str, Any]) -> np.ndarray:
    """A boolean per passage row of ``store``: whether its fields match ``spec``;
    :class:`UsageError` naming a field of ``spec`` that no passage has, or a value of a type
    the field never holds (:mod:`anygrain.index.filter_fields`)."""
    import numpy as np

    test = compile_filter(spec)
    # what the filter's fields hold, until that clears it: a field no passage has, or a
    # value of a type the field never holds, is refused by name
    survey: FieldSurvey | None = FieldSurvey(spec, COLUMNS)
    matched = False
    n = len(store)
    mask = np.zeros(n, dtype=bool)
    # the columns only when named (reading them costs as much as the metadata)
    cols = [c for c in COLUMNS if c in filter_key(spec)]
    for a in range(0, n, BATCH):
        rows = np.arange(a, min(a + BATCH, n), dtype=np.int64)
        metas = store.hit_meta(rows)
        named = {c: store.column("id" if c == "passage_id" else c, rows) for c in cols}
        for i, m in enumerate(metas):
            for c, vals in named.items():
                m.setdefault(c, vals[i])
            mask[a + i] = test(m)
        if survey is not None:
            for m in metas:
                survey.add(m)
            matched = matched or bool(mask[a : a + len(metas)].any())
            if survey.settled(matched):
                survey = None
    if survey is not None:
        survey.check(matched=bool(mask.any()))
    return mask


def _cached(index: Any, key: Any, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The mask cached on ``index`` under ``key``, computed when missing."""
    cache: dict[Any, np.ndarray] = index.__dict__.setdefault("_filter_masks", {})
    mask = cache.get(key)
    if mask is None:
        mask = compute()
        if len(cache) >= MAX_CACHED:
            cache.pop(next(iter(cache)), None)
        cache[key] = mask
    return mask


def allowed_rows(index: Any, spec: Mapping[str, Any]) -> np.ndarray:
    """The mask of ``spec`` over ``index.corpus``, computed once per corpus and filter
    (cached on the index: a grown corpus has another checksum and length)."""
    store = index.corpus
    key = (store.checksum, len(store), filter_key(spec))
    return _cached(index, key, lambda: row_mask(store, spec))


def search_mask(index: Any, spec: Mapping[str, Any] | None) -> np.ndarray | None:
    """The rows a search of ``index`` may return: those ``spec`` matches (every row when
    None) less those of the documents deleted from it (its ``tombstones``, which
    ``Index.load`` records: :mod:`anygrain.index.tombstones`); None when every row may.
    Cached on the index per corpus, filter and deletions."""
    import numpy as np

    tomb = getattr(index, "tombstones", None)
    deleted: frozenset[int] = tomb.rows if tomb is not None else frozenset()
    if not deleted:
        return None if spec is None else allowed_rows(index, spec)
    store = index.corpus
    n = len(store)

    def live() -> np.ndarray:
        mask = np.ones(n, dtype=bool) if spec is None else allowed_rows(index, spec).copy()
        rows = np.fromiter(deleted, dtype=np.int64, count=len(deleted))
        mask[rows[(rows >= 0) & (rows < n)]] = False
        return mask

    key = (store.checksum, n, None if spec is None else filter_key(spec), deleted)
    return _cached(index, key, live)


def _subset(queries: Any, todo: list[int]) -> Any:
    """The queries ``todo`` of a list of texts or of :class:`EncodedQueries`."""
    if hasattr(queries, "take"):
        return queries.take(todo)
    return [queries[i] for i in todo]


def first_depth(k: int, mask: np.ndarray) -> int:
    """How many hits the first round asks for: ``k`` over the share of rows that match
    (and a quarter more), so that one round mostly suffices."""
    allowed = int(mask.sum())
    if allowed == len(mask):
        return k
    return max(k, math.ceil(1.25 * k * len(mask) / max(allowed, 1)))


def search_filtered(
    search: Callable[[Any, int], list[list[Any]]],
    queries: Sequence[Any] | Any,
    k: int,
    mask: np.ndarray,
    *,
    per_query: bool = False,
) -> list[list[Any]]:
    """The top ``k`` hits of each query among those whose passage row ``mask`` allows.

    ``search(queries, depth)`` is the unfiltered search; only the queries still short are
    searched again (all of them when ``per_query`` options go with the queries)."""
    n = len(queries)
    if n == 0 or not mask.any():
        return [[] for _ in range(n)]
    want = first_depth(k, mask)
    out: list[list[Any]] = [[] for _ in range(n)]
    todo = list(range(n))
    for _ in range(MAX_ROUNDS):
        found = search(queries if per_query else _subset(queries, todo), want)
        if per_query:
            found = [found[i] for i in todo]
        short = []
        for i, hits in zip(todo, found, strict=True):
            kept = [h for h in hits if 0 <= h.passage_row < len(mask) and mask[h.passage_row]]
            out[i] = kept[:k]
            if len(kept) < k and len(hits) >= want:
                short.append(i)
        if not short:
            break
        todo, want = short, want * 2
    return out


def search_rows_filtered(
    search_rows: Callable[[EncodedQueries, int], tuple[np.ndarray, np.ndarray]],
    encoded: EncodedQueries,
    k: int,
    mask: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search_filtered` on ``(rows, scores)`` arrays (a kind's ``search_rows_encoded``,
    rows -1 where there is no hit): rows are masked before any hit is made of them, so a
    deep round costs the backend's search, not thousands of hits."""
    import numpy as np

    n = len(encoded)
    rows_k = np.full((n, k), -1, dtype=np.int64)
    scores_k = np.zeros((n, k), dtype=np.float32)
    if n == 0 or not mask.any():
        return rows_k, scores_k
    # one hit per row at most: asking for more rows than the corpus has only costs memory
    want = min(first_depth(k, mask), len(mask))
    todo = list(range(n))
    for _ in range(MAX_ROUNDS):
        rows, scores = search_rows(encoded.take(todo), want)
        rows = np.asarray(rows, dtype=np.int64)
        short = []
        for j, i in enumerate(todo):
            r = rows[j]
            found = r >= 0
            keep = np.flatnonzero(found & mask[np.where(found, r, 0)])[:k]
            rows_k[i, : len(keep)] = r[keep]
            scores_k[i, : len(keep)] = np.asarray(scores[j])[keep]
            if len(keep) < k and int(found.sum()) >= want:
                short.append(i)
        if not short or want >= len(mask):
            break
        todo, want = short, min(want * 2, len(mask))
    return rows_k, scores_k


#: The indexes (by id) whose masked search is under way in this thread: a kind's ``search``
#: calling its own ``search_encoded`` is not masked twice.
_MASKING: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "anygrain_masking", default=frozenset()
)


def accepts_filter(method: Callable[..., list[list[Any]]]) -> Callable[..., list[list[Any]]]:
    """``method`` (a kind's ``search`` or ``search_encoded``) taking ``filter=`` too, and
    never returning a deleted document: the :class:`~anygrain.index.base.Index` base wraps
    every kind's with it, so each kind, grain, door and composite masks rows (filters and
    deletions: :func:`search_mask`) the same way without knowing of either."""
    if getattr(method, "takes_filter", False):
        return method

    @functools.wraps(method)
    def search(self: Any, queries: Any, k: int = 10, *, filter: Any = None, **options: Any) -> Any:
        empty = filter is None or (isinstance(filter, Mapping | list | tuple) and not filter)
        spec = None if empty else parse_filter(filter)
        active = _MASKING.get()
        mask = None if spec is None and id(self) in active else search_mask(self, spec)
        if mask is None:
            return method(self, queries, k, **options)
        token = _MASKING.set(active | {id(self)})
        try:
            return _masked_search(method, self, queries, k, mask, options)
        finally:
            _MASKING.reset(token)

    search.takes_filter = True  # type: ignore[attr-defined]
    return search


def _masked_search(
    method: Callable[..., list[list[Any]]],
    self: Any,
    queries: Any,
    k: int,
    mask: np.ndarray,
    options: dict[str, Any],
) -> list[list[Any]]:
    """``method``'s top ``k`` hits among the rows ``mask`` allows."""
    if options.get("scope_rows") is None:
        if hasattr(self, "search_rows_encoded"):
            return _rows_search(self, queries, k, mask, options)
        scope = scope_of(self, mask)
        if scope is not None:  # few rows: search only them, exhaustively, in one round
            return method(self, queries, k, scope_rows=[scope] * len(queries), **options)
    return search_filtered(
        lambda qs, depth: method(self, qs, depth, **options),
        queries,
        k,
        mask,
        per_query=options.get("scope_rows") is not None,
    )


def scope_of(index: Any, mask: np.ndarray) -> list[int] | None:
    """The rows ``mask`` allows, for a kind that searches given rows exhaustively
    (``scope_rows``: phrase indexes) when they are at most :data:`SCOPE_ROWS`; None
    otherwise (over-fetching is cheaper than scoring every phrase of many rows)."""
    import numpy as np

    if "scope_rows" not in type(index).search_options():
        return None
    rows = np.flatnonzero(mask)
    return [int(r) for r in rows] if len(rows) <= SCOPE_ROWS else None


def _rows_search(
    index: Any, queries: Any, k: int, mask: np.ndarray, options: dict[str, Any]
) -> list[list[Any]]:
    """A filtered search of a kind whose hits are made from ``(rows, scores)``
    (``search_rows_encoded``: BM25, dense, hybrid and their shards): queries not yet
    encoded are encoded once, with the options the kind's ``encode`` takes."""
    from anygrain.hits.results import hits_from_rows

    if not isinstance(queries, EncodedQueries):
        takes = type(index).encode_options()
        queries = index.encode(queries, **{o: v for o, v in options.items() if o in takes})
        options = {o: v for o, v in options.items() if o not in takes}
    rows, scores = search_rows_filtered(
        lambda enc, depth: index.search_rows_encoded(enc, depth, **options), queries, k, mask
    )
    return hits_from_rows(index.corpus, rows, scores)
