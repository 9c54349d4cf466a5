"""Errors that name where bad input is: file, line and field.

Readers raise :class:`InputError`; the CLI prints its message without a
traceback.  :class:`ErrorPolicy` decides whether a bad record stops the run
(default) or is skipped and counted, so nothing is ever dropped silently.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

E = TypeVar("E", bound=enum.Enum)


class AnygrainError(Exception):
    """Base class for every error anygrain raises on purpose."""


def parse_enum(kind: type[E], value: E | str) -> E:
    """``kind(value)``, or an error naming the value and the choices there are."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(v.value) for v in kind)
        raise AnygrainError(
            f"unknown {kind.__name__.lower()} {value!r}: use one of {known}"
        ) from None


class InputError(AnygrainError):
    """A record in a user's file is malformed."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.field is not None:
            where.append(f"field '{self.field}'")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class UsageError(AnygrainError):
    """An option an operation does not take, or a value it cannot use."""


class IndexMismatchError(AnygrainError):
    """A model, index or corpus does not belong with the others it is used with."""


class ModelNotFoundError(AnygrainError):
    """A model name could not be resolved (offline, or unknown)."""


class ErrorPolicy(str, enum.Enum):
    """What to do with a malformed record."""

    STOP = "stop"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)  # one per file of a folder: kept small
class FileNote:
    """A file a directory reader met: read, or skipped with the reason.  ``kind`` is its
    type where the reader knows it (``pdf``, ``markdown``, ...); ``category`` groups files
    in :meth:`ErrorLog.files_summary`: why it was skipped (``empty file``), or what a read
    file was (``changed``: a new version of a file an index held)."""

    path: str
    read: bool
    reason: str = ""
    kind: str = ""
    category: str = ""

    def __str__(self) -> str:
        return f"read {self.path}" if self.read else f"skipped {self.path}: {self.reason}"


@dataclass
class ErrorLog:
    """Collects skipped records so callers can report how many were dropped and why, and
    the files a directory source was read from or skipped (so none is ignored silently)."""

    policy: ErrorPolicy = ErrorPolicy.STOP
    skipped: list[InputError] = field(default_factory=list)
    files: list[FileNote] = field(default_factory=list)
    # irregular records that were kept (not skipped): how many of each, by what was
    # irregular (e.g. SQuAD answers not at their answer_start), counted by ``note``
    noted: dict[str, int] = field(default_factory=dict)

    def note(self, what: str, n: int = 1) -> None:
        """Count ``n`` records kept despite ``what`` (under either policy: nothing is
        dropped); the reader warns once with the count."""
        if n:
            self.noted[what] = self.noted.get(what, 0) + n

    def file_read(self, path: object, kind: str = "", category: str = "") -> None:
        self.files.append(FileNote(str(path), True, kind=kind, category=category))

    def file_skipped(
        self, path: object, reason: str, *, kind: str = "", category: str = ""
    ) -> None:
        self.files.append(FileNote(str(path), False, reason, kind, category))

    @property
    def files_skipped(self) -> list[FileNote]:
        return [f for f in self.files if not f.read]

    def files_summary(self) -> str:
        """One line: the files read, by type, and those skipped, by why (``""`` when no
        file was noted), e.g. ``read 12 files (markdown 9, pdf 3; 1 changed); skipped 2
        (empty file 1, no text layer 1)``."""
        if not self.files:
            return ""
        read = [f for f in self.files if f.read]
        line = f"read {len(read)} file{'s' * (len(read) != 1)}"
        kinds = _counts(f.kind or "other" for f in read)
        changed = sum(f.category == "changed" for f in read)
        if kinds:
            line += f" ({kinds}{f'; {changed} changed' if changed else ''})"
        skipped = self.files_skipped
        if skipped:
            line += f"; skipped {len(skipped)} ({_counts(f.category or f.reason for f in skipped)})"
        return line

    def handle(self, error: InputError) -> None:
        """Raise under STOP; record and continue under SKIP."""
        if self.policy is ErrorPolicy.STOP:
            raise error
        self.skipped.append(error)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def summary(self, limit: int = 5) -> str:
        if not self.skipped:
            return "no records skipped"
        head = "\n".join(f"  {e}" for e in self.skipped[:limit])
        more = f"\n  ... and {self.n_skipped - limit} more" if self.n_skipped > limit else ""
        return f"skipped {self.n_skipped} malformed record(s):\n{head}{more}"


def _counts(names: Iterable[str]) -> str:
    """``a 3, b 1``: how many of each, most first (then by name)."""
    c = Counter(names)
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
