"""Format registry: every reader registers here under its name.

A source is given as ``PATH`` (format detected from the file and reported) or
``FORMAT:PATH`` (format forced).  Readers yield :class:`SourceDocument` s and,
where the format carries them, :class:`Questions`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from anygrain.corpus.fields import ReadOptions, describe
from anygrain.corpus.questions import Questions
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError, ErrorLog, UsageError

DocumentReader = Callable[[Path, ErrorLog], Iterator[SourceDocument]]
OptionReader = Callable[[Path, ErrorLog, ReadOptions], Iterator[SourceDocument]]
QuestionReader = Callable[[Path, ErrorLog], Questions]
Sniffer = Callable[[Path], bool]


@dataclass(frozen=True)
class Format:
    """A source format: how to recognise it and how to read it.

    ``read_with`` reads it with :class:`ReadOptions` (record fields, files already
    indexed), for the formats that take them; ``tracks_files``: its documents record the
    file they come from and its content hash, so ``anygrain add`` adds only new and
    changed files."""

    name: str
    description: str
    sniff: Sniffer
    read_documents: DocumentReader | None = None
    read_questions: QuestionReader | None = None
    priority: int = 0  # higher sniffs first; specific formats before generic ones
    read_with: OptionReader | None = None
    tracks_files: bool = False


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    if fmt.name in FORMATS:
        raise ValueError(f"format {fmt.name!r} registered twice")
    FORMATS[fmt.name] = fmt
    return fmt


@dataclass(frozen=True)
class Source:
    """A parsed ``FORMAT:PATH`` argument."""

    format: Format
    path: Path
    detected: bool  # True when the format was sniffed rather than forced
    options: ReadOptions | None = None  # record fields, files indexed already

    def with_options(self, options: ReadOptions) -> Source:
        """This source read with ``options``; a format that takes none refuses them here,
        naming the options."""
        if options and self.format.read_with is None:
            given = ", ".join(describe(options.fields)) or "reading options"
            raise UsageError(
                f"{self.path}: format '{self.format.name}' does not take {given} "
                "(CSV, TSV, JSONL files and folders do)"
            )
        return Source(self.format, self.path, self.detected, options)

    def documents(self, errors: ErrorLog | None = None) -> Iterator[SourceDocument]:
        if self.format.read_documents is None:
            raise AnygrainError(f"format '{self.format.name}' holds no documents: {self.path}")
        log = errors or ErrorLog()
        if self.options and self.format.read_with is not None:
            return self._file_or_dir(self.format.read_with(self.path, log, self.options))
        return self._file_or_dir(self.format.read_documents(self.path, log))

    def _file_or_dir(self, docs: Iterator[SourceDocument]) -> Iterator[SourceDocument]:
        """A file where a directory is wanted (or the reverse) as one line, not a traceback."""
        try:
            yield from docs
        except (IsADirectoryError, NotADirectoryError) as e:
            kind = "a directory" if isinstance(e, IsADirectoryError) else "not a directory"
            raise AnygrainError(
                f"{e.filename or self.path}: is {kind}, which format '{self.format.name}' "
                "does not read here"
            ) from None

    def questions(self, errors: ErrorLog | None = None) -> Questions:
        if self.format.read_questions is None:
            raise AnygrainError(f"format '{self.format.name}' holds no questions: {self.path}")
        return self.format.read_questions(self.path, errors or ErrorLog())


def ensure_loaded() -> None:
    # Readers register themselves on import.
    import anygrain.corpus.readers  # noqa: F401


def names_format(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` is ``FORMAT:PATH`` with a known format (and not itself a path)."""
    ensure_loaded()
    text = os.fspath(spec)
    name, sep, _ = text.partition(":")
    return bool(sep) and name.lower() in FORMATS and not Path(text).exists()


def parse_source(spec: str | os.PathLike[str], *, want: str = "documents") -> Source:
    """Parse ``FORMAT:PATH`` or ``PATH``; detect the format when not forced.

    ``want`` is ``"documents"`` or ``"questions"`` and restricts detection to
    formats that can provide it.
    """
    ensure_loaded()
    text = os.fspath(spec)
    name, sep, rest = text.partition(":")
    if sep and name.lower() in FORMATS and not Path(text).exists():
        fmt = FORMATS[name.lower()]
        path = Path(rest)
        if not path.exists():
            raise AnygrainError(f"{path}: no such file or directory")
        return Source(fmt, path, detected=False)
    path = Path(text)
    if not path.exists():
        known = ", ".join(sorted(FORMATS))
        raise AnygrainError(f"{path}: no such file or directory (formats for FORMAT:PATH: {known})")
    attr = "read_documents" if want == "documents" else "read_questions"
    candidates = sorted(
        (f for f in FORMATS.values() if getattr(f, attr) is not None),
        key=lambda f: -f.priority,
    )
    for fmt in candidates:
        try:
            if fmt.sniff(path):
                return Source(fmt, path, detected=True)
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    names = ", ".join(f.name for f in candidates)
    raise AnygrainError(
        f"{path}: could not detect the {want} format; force one with FORMAT:PATH ({names})"
    )
