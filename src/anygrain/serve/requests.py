"""What a server's request may ask, and its checks: questions, unit, ``k``, metadata filter,
search options, and a passage's id (:class:`anygrain.serve.service.SearchService` checks
every request with these before its workers see it).

No web code here: :mod:`anygrain.serve.app` turns :class:`RequestError` into a 4xx.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from anygrain.corpus.pydocs import surrogate_at
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.index.filters import parse_filter
from anygrain.serve.options import SearchOptions, client_options
from anygrain.serve.reading import check_min_confidence

#: A question longer than this many characters is refused (encoders truncate far earlier).
MAX_QUESTION_CHARS = 1000
#: The most hits one question may ask for, unless the server sets its own cap (``max_k``).
MAX_K = 1000
#: The most questions one batch request may carry.
MAX_BATCH = 64
DEFAULT_K = 10


class RequestError(ValueError):
    """A request the index cannot answer as asked (the client's fault: a 4xx)."""


def check_max_k(max_k: int) -> int:
    """The server's cap on ``k`` (``--max-k``): a positive integer, else an
    :class:`AnygrainError` naming the option."""
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1:
        raise AnygrainError(f"--max-k must be a positive integer, got {max_k!r}")
    return max_k


def check_k(k: int, max_k: int = MAX_K) -> int:
    """``k`` between 1 and the server's cap ``max_k``."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise RequestError(f"k must be an integer, got {k!r}")
    if not 1 <= k <= max_k:
        cap = " (the server's --max-k)" if k > max_k else ""
        raise RequestError(f"k must be between 1 and {max_k}{cap}, got {k}")
    return k


def check_questions(questions: Sequence[str]) -> list[str]:
    """1 to :data:`MAX_BATCH` questions, each a non-empty string of valid Unicode of at
    most :data:`MAX_QUESTION_CHARS` characters; stripped."""
    if not questions:
        raise RequestError("no questions given")
    if len(questions) > MAX_BATCH:
        raise RequestError(
            f"too many questions in one request: {len(questions)} (at most {MAX_BATCH})"
        )
    out = []
    many = len(questions) > 1
    for i, q in enumerate(questions):
        where = f"question {i + 1}" if many else "the question"
        if not isinstance(q, str):
            raise RequestError(f"{where} is not a string")
        if not q.strip():
            raise RequestError(f"{where} is empty")
        bad = surrogate_at(q)
        if bad is not None:
            raise RequestError(f"{where} holds a lone surrogate ({bad}): not valid Unicode")
        if len(q) > MAX_QUESTION_CHARS:
            raise RequestError(
                f"{where} is too long: {len(q)} characters (at most {MAX_QUESTION_CHARS})"
            )
        out.append(q.strip())
    return out


def check_unit(index: Index, unit: Unit | str | None, reader: Callable[[], Any]) -> Unit:
    """The unit asked of ``index`` (its default when None); unit ``answer`` calls
    ``reader()`` first, which loads the reader or raises what says how to give one."""
    if unit is None:
        return index.default_unit
    try:
        u = Unit(unit)
    except ValueError:
        raise RequestError(
            f"unknown unit {unit!r}; choose one of: {', '.join(x.value for x in Unit)}"
        ) from None
    if u is Unit.ANSWER:  # any kind: the reader reads the index's top passages
        reader()
        return u
    if u not in index.units:
        raise RequestError(
            f"unit {u.value} needs a phrase index; this {index.kind.value} index "
            f"returns passages (allowed units: {', '.join(x.value for x in index.units)})"
        )
    return u


def check_options(index: Index, options: Mapping[str, Any] | None) -> SearchOptions:
    """A request's search options, checked by the index (:mod:`.options`); a
    :class:`RequestError` naming an option it does not take or a value it refuses."""
    try:
        return client_options(index, options)
    except AnygrainError as e:
        raise RequestError(str(e)) from None


def check_filter(spec: Any) -> dict[str, Any] | None:
    """A request's metadata filter checked (None or empty: none); :class:`RequestError`
    naming what is wrong with it."""
    if spec is None or spec == "" or spec == {}:
        return None
    try:
        return parse_filter(spec)
    except AnygrainError as e:
        raise RequestError(str(e)) from None


def check_floor(
    min_confidence: float | None, unit: Unit, reader: Callable[[], Any]
) -> float | None:
    """A request's ``min_confidence`` (:func:`~anygrain.serve.reading.check_min_confidence`),
    refused as a :class:`RequestError`."""
    try:
        return check_min_confidence(min_confidence, unit, reader)
    except RequestError:
        raise
    except AnygrainError as e:
        raise RequestError(str(e)) from e


def passage_of(index: Index, passage_id: str) -> dict[str, Any]:
    """One passage of ``index`` by id, as :class:`~anygrain.serve.schemas.PassageOut`
    shapes it: its row, document, title, text, sentence spans and
    :meth:`~anygrain.corpus.store.CorpusStore.hit_meta` metadata.  :class:`RequestError`
    for an id the index does not hold (or holds deleted)."""
    if not isinstance(passage_id, str) or not passage_id.strip():
        raise RequestError("no passage id given")
    if len(passage_id) > MAX_QUESTION_CHARS:
        raise RequestError(f"passage id too long: {len(passage_id)} characters")
    store = index.corpus
    try:
        row = store.row_of(passage_id)
    except KeyError:
        row = -1
    tomb = getattr(index, "tombstones", None)
    if row < 0 or (tomb is not None and row in tomb.rows):
        raise RequestError(f"no passage {passage_id!r} in this index")
    p = store.passage(row)
    return {
        "passage_id": p.id,
        "passage_row": row,
        "doc_id": p.doc_id,
        "title": p.title,
        "text": p.text,
        "sentences": [list(s) for s in p.sentences],
        "meta": store.hit_meta([row])[0],
    }
