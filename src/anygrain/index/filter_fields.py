"""A filter's fields checked against the passages it is evaluated over.

A filter that names a field no passage has, or compares a field with a value of a type it
never holds (a range of numbers on a text field), matches nothing, or everything, whatever
the question: a misspelt field is refused in one line naming it and the fields there are,
rather than answered with no hits and no word.  :class:`FieldSurvey` notes, while
:func:`anygrain.index.filters.row_mask` reads each passage's fields for the mask, what the
filter's fields hold; :meth:`FieldSurvey.check` then refuses (:class:`UsageError`) or warns.

A field no passage has is refused where the filter's test needs it present to pass (``$eq``,
``$in``, a range, ``$exists: true``; inverted under ``$not``), and only warned about where
its absence passes (``$ne``, ``$nin``, ``$exists: false``): those are documented for
optional fields, which an index may hold in no passage yet.  A string value that differs
from a stored one only by case, underscores or spaces is named in a warning when the
filter matches nothing (``Super Bowl 50`` for ``Super_Bowl_50``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from anygrain.errors import UsageError

log = logging.getLogger(__name__)

COMPARE = ("$gt", "$gte", "$lt", "$lte")
#: Fields a refusal lists at most (an index's metadata may have many).
MAX_LISTED = 40

MISSING = object()


def get_field(rec: Mapping[str, Any], key: str) -> Any:
    """``rec``'s value of ``key`` (a dotted name reaches into objects), as the filter reads
    it; ``MISSING`` when it has none."""
    if key in rec:
        return rec[key]
    v: Any = rec
    for part in key.split("."):
        if not isinstance(v, Mapping) or part not in v:
            return MISSING
        v = v[part]
    return v


def kind_of(v: Any) -> str:
    """The JSON type of ``v``, as a message names it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "text"
    if isinstance(v, Mapping):
        return "object"
    if isinstance(v, list | tuple):
        return "list"
    return type(v).__name__


def loose(text: str) -> str:
    """``text`` with case, underscores and runs of spaces ignored."""
    return " ".join(text.replace("_", " ").casefold().split())


@dataclass(frozen=True)
class Use:
    """One test a filter makes of a field: its operator, argument and whether the test
    counts toward a match (False under an odd number of ``$not``)."""

    field: str
    op: str
    arg: Any
    positive: bool

    @property
    def needs_field(self) -> bool:
        """Whether only a passage that has the field can pass the test as the filter uses it."""
        if self.op == "$exists":
            return bool(self.arg) == self.positive
        if self.op in ("$ne", "$nin"):
            return not self.positive
        return self.positive

    @property
    def values(self) -> list[Any]:
        return list(self.arg) if self.op in ("$in", "$nin") else [self.arg]


def uses(spec: Mapping[str, Any], positive: bool = True) -> Iterator[Use]:
    """Every field test of ``spec`` (a filter already checked for syntax)."""
    for key, value in spec.items():
        if key in ("$and", "$or"):
            for sub in value:
                yield from uses(sub, positive)
        elif key == "$not":
            yield from uses(value, not positive)
        elif isinstance(value, Mapping):
            for op, arg in value.items():
                yield Use(key, op, arg, positive)
        elif isinstance(value, list | tuple):
            yield Use(key, "$in", value, positive)
        else:
            yield Use(key, "$eq", value, positive)


@dataclass
class Held:
    """What one field holds across the passages surveyed."""

    kinds: set[str] = field(default_factory=set)  # of the values themselves
    items: set[str] = field(default_factory=set)  # of a list value's items
    siblings: set[str] = field(default_factory=set)  # keys beside a dotted field's last part
    near: dict[str, str] = field(default_factory=dict)  # loose wanted value -> a stored one


class FieldSurvey:
    """What the fields a filter names hold in the passages :meth:`add` is given, and the
    verdict on them (:meth:`check`)."""

    def __init__(self, spec: Mapping[str, Any], columns: tuple[str, ...] = ()) -> None:
        self.uses = list(uses(spec))
        self.columns = columns
        self.keys: set[str] = set()
        self.held = {u.field: Held() for u in self.uses}
        self.seen = 0
        # exact text values an equality wants, by their loose form: the hint's candidates
        self.wanted: dict[str, dict[str, str]] = {}
        for u in self.uses:
            if u.op in ("$eq", "$in") and u.positive:
                for v in u.values:
                    if isinstance(v, str):
                        self.wanted.setdefault(u.field, {})[loose(v)] = v

    def add(self, rec: Mapping[str, Any]) -> None:
        """Note what ``rec`` (one passage's fields) holds of the filter's fields."""
        self.seen += 1
        self.keys.update(rec)
        for name, held in self.held.items():
            v = get_field(rec, name)
            if v is MISSING:
                head, dot, _ = name.rpartition(".")
                if dot:
                    parent = get_field(rec, head)
                    if isinstance(parent, Mapping):
                        held.siblings.update(str(k) for k in parent)
                continue
            held.kinds.add(kind_of(v))
            if isinstance(v, list):
                held.items.update(kind_of(x) for x in v)
            wanted = self.wanted.get(name)
            if wanted:
                for s in v if isinstance(v, list) else (v,):
                    if isinstance(s, str) and s not in wanted.values():
                        want = wanted.get(loose(s))
                        if want is not None:
                            held.near.setdefault(want, s)

    def settled(self, matched: bool) -> bool:
        """Whether what is surveyed already clears every test (each field seen, holding a
        type its values are), so the rest need not be: the verdict could only be a hint,
        and a filter that ``matched`` needs none."""
        if self.wanted and not matched:
            return False
        return all(self._clears(u, self.held[u.field]) for u in self.uses)

    @staticmethod
    def _clears(u: Use, held: Held) -> bool:
        if not held.kinds:
            return False
        if u.op in COMPARE:
            return kind_of(u.arg) in held.kinds
        if u.op in ("$eq", "$ne", "$in", "$nin"):
            given = {kind_of(v) for v in u.values if v is not None}
            return not given or bool(given & (held.kinds | held.items))
        return True

    def known(self) -> list[str]:
        return sorted(self.keys | set(self.columns))

    def check(self, matched: bool) -> None:
        """:class:`UsageError` for a field no passage has that a test needs, or a value of a
        type the field never holds; a warning for a field no passage has whose absence
        passes, and for a filter that matched nothing where a value is near a stored one."""
        if not self.seen:
            return  # an empty corpus: nothing to check against
        warned: set[str] = set()
        for u in self.uses:
            held = self.held[u.field]
            if not held.kinds:
                if u.needs_field:
                    raise UsageError(self._unknown(u.field))
                if u.field not in warned:
                    warned.add(u.field)
                    log.warning(
                        "%s; its %s test%s passes on every passage",
                        self._unknown(u.field),
                        u.op,
                        "" if u.positive else " (under $not)",
                    )
                continue
            self._check_type(u, held)
        if not matched:
            for name, held in self.held.items():
                for want, stored in held.near.items():
                    log.warning(
                        "filter: no passage matches; field %r holds %r, not %r",
                        name,
                        stored,
                        want,
                    )

    def _unknown(self, name: str) -> str:
        held = self.held[name]
        known = sorted(held.siblings) if held.siblings else self.known()
        where = f"the fields under {name.rpartition('.')[0]!r}" if held.siblings else "fields"
        head, _, last = name.rpartition(".")
        if not held.siblings:
            head, last = "", name
        close = [k for k in known if loose(k) == loose(last)]
        close = close or difflib.get_close_matches(last, known, n=1, cutoff=0.6)
        hint = f" (did you mean {(head + '.' if head else '') + close[0]!r}?)" if close else ""
        listed = ", ".join(known[:MAX_LISTED])
        if len(known) > MAX_LISTED:
            listed += f", ... ({len(known) - MAX_LISTED} more)"
        return f"filter: no passage has field {name!r}{hint}; {where}: {listed}"

    def _check_type(self, u: Use, held: Held) -> None:
        holds = ", ".join(sorted(held.kinds))
        if u.op in COMPARE:
            want = kind_of(u.arg)
            if want not in held.kinds:
                raise UsageError(
                    f"filter: field {u.field!r} {u.op} {u.arg!r} compares {want}, but "
                    f"{u.field!r} holds {holds}"
                )
            return
        if u.op not in ("$eq", "$ne", "$in", "$nin"):
            return
        given = [v for v in u.values if v is not None]  # null: a field set to null, or not
        scalars = (held.kinds | held.items) - {"list", "object"}
        if given and not any(kind_of(v) in scalars for v in given):
            shown = ", ".join(repr(v) for v in given[:5])
            raise UsageError(
                f"filter: field {u.field!r} holds {holds}"
                + (f" (of {', '.join(sorted(held.items))})" if held.items else "")
                + f", never {' or '.join(sorted({kind_of(v) for v in given}))} like {shown} "
                "(values are not coerced)"
            )
