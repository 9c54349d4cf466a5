"""Your own files: the file types a folder holds, each read into a document that records
where it came from.

Each reader module (``corpus/readers/markdown.py``, ``pdf.py``, ...) registers a
:class:`FileType` with :func:`register_file_format`, which also registers a format of the
same name for one file (or a folder of that type only).  The ``folder`` format
(``corpus/readers/folder.py``) walks a directory and reads every file of a registered
type, one at a time: nothing holds more than one file's text.

A document from a file keeps, in its metadata, ``source`` (its path relative to the folder
indexed, or its name), ``format`` (its type) and ``sha256`` (of its bytes, so
``anygrain add`` re-reads only changed files); a CSV/TSV/JSONL record adds ``line``.  Its
``text`` is the file's extracted text (for Markdown, reStructuredText and plain text the
file itself, newlines normalised), and its ``sections`` the spans under each heading or on
each PDF page, with ``headings`` / ``page`` in their metadata: every passage cut from it
has offsets into that text (:mod:`anygrain.corpus.splitters`).

A file that cannot be read (empty, binary, not UTF-8, a damaged or scanned PDF, a reader
library not installed) is skipped and noted with the reason (:meth:`ErrorLog.file_skipped`)
in a folder, and is a one-line error when it is the only file given.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.fields import FieldMap, ReadOptions
from anygrain.corpus.formats import Format, register
from anygrain.corpus.records import SourceDocument, Span
from anygrain.errors import ErrorLog, InputError, UsageError

if TYPE_CHECKING:
    from anygrain.corpus.store import CorpusStore

#: metadata names a document from a file uses for where it came from; a front-matter
#: field of one of these names is kept as ``front_matter_NAME``
PROVENANCE = ("source", "format", "sha256", "version", "line", "page", "headings", "start", "end")
#: the extra that installs the PDF, HTML and DOCX readers' libraries
DOCS_EXTRA = "docs"
#: bytes looked at for NUL bytes, which text never holds
_BINARY_PROBE = 8192


class Skip(Exception):
    """A file that cannot be read: ``reason`` names what is wrong, ``category`` groups it
    in the summary line."""

    def __init__(self, reason: str, category: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.category = category


@dataclass
class Extracted:
    """One file's extracted text, its title (empty: the file name's stem), its sections
    (None: the whole text is one) and its own metadata (front matter, PDF author, ...)."""

    text: str
    title: str = ""
    sections: list[Span] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Record:
    """One record of a CSV, TSV or JSONL file: the line it starts on, its id (None: one
    is made from the file and line), title, text and metadata."""

    line: int
    id: str | None
    title: str
    text: str
    meta: dict[str, Any]


Extractor = Callable[[bytes, Path], Extracted]
RecordReader = Callable[[str, Path, FieldMap, ErrorLog], Iterator[Record]]


@dataclass(frozen=True)
class FileType:
    """A type of file a folder may hold: its suffixes and how it is read, into one
    document (``extract``) or one per record (``records``); ``library`` is the module its
    reader needs, installed by the ``anygrain[docs]`` extra when it is not a dependency."""

    name: str
    suffixes: tuple[str, ...]
    extract: Extractor | None = None
    records: RecordReader | None = None
    library: str | None = None

    def check_library(self) -> None:
        if self.library is not None and not _installed(self.library):
            raise Skip(
                f"reading {self.name} files needs {self.library}: "
                f"pip install 'anygrain[{DOCS_EXTRA}]'",
                f"{self.name} reader not installed",
            )


@functools.cache
def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


#: file types by suffix (``.md``), as the readers register them
FILE_TYPES: dict[str, FileType] = {}


def register_file_type(ft: FileType) -> FileType:
    for suffix in ft.suffixes:
        if suffix in FILE_TYPES:
            raise ValueError(f"suffix {suffix!r} registered twice")
        FILE_TYPES[suffix] = ft
    return ft


def register_file_format(
    ft: FileType,
    description: str,
    *,
    priority: int = -50,
    looks_right: Callable[[Path], bool] | None = None,
) -> FileType:
    """Register ``ft`` for folders and a format of its name for one file of it (or a
    folder read for that type only), detected by its suffix (and ``looks_right``, when
    given); its priority is low, so the formats that recognise a file by its content (a
    DPR ``.tsv``) sniff first."""
    register_file_type(ft)

    def sniff(path: Path) -> bool:
        return (
            path.is_file()
            and path.suffix.lower() in ft.suffixes
            and (looks_right is None or looks_right(path))
        )

    def read_with(path: Path, errors: ErrorLog, options: ReadOptions) -> Iterator[SourceDocument]:
        return read_path(path, errors, options, only=ft)

    def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
        return read_with(path, errors, ReadOptions())

    register(
        Format(
            name=ft.name,
            description=description,
            sniff=sniff,
            read_documents=read_documents,
            priority=priority,
            read_with=read_with,
            tracks_files=True,
        )
    )
    return ft


# --- text ---------------------------------------------------------------------------------
def decode_text(data: bytes, path: Path) -> str:
    """A text file's bytes as text (UTF-8, BOM dropped, newlines ``\\n``); a binary file
    or one that is not UTF-8 is a :class:`Skip` naming the line of the first bad byte."""
    if b"\x00" in data[:_BINARY_PROBE]:
        raise Skip("a binary file, not text", "binary file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise Skip(f"not UTF-8 (invalid byte at line {line})", "not UTF-8") from None
    return normalize_newlines(text)


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def json_safe(value: Any) -> Any:
    """``value`` as JSON holds it (metadata is stored as JSON): dates as ISO strings,
    anything else unknown as its string."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [json_safe(v) for v in value]
    return str(value)


def heading_title(doc_title: str, headings: Sequence[str]) -> str:
    """A passage's title: the heading path, led by the document's title where the
    headings do not start with it (``Install › Configuration › Proxies``)."""
    path = list(headings)
    if doc_title and (not path or path[0] != doc_title):
        path.insert(0, doc_title)
    return " › ".join(path)


def sections_of(text: str, title: str, blocks: Iterable[tuple[int, int, list[str]]]) -> list[Span]:
    """Sections from ``(start, end, heading path)`` triples: blank ones dropped, each
    titled with its heading path and carrying ``headings`` (when it has any)."""
    out = []
    for start, end, headings in blocks:
        if not text[start:end].strip():
            continue
        meta: dict[str, Any] = {"headings": list(headings)} if headings else {}
        out.append(Span(start, end, title=heading_title(title, headings), meta=meta))
    return out


def heading_sections(
    text: str, title: str, lead: tuple[int, int], heads: Sequence[tuple[int, int, int, str]]
) -> list[Span]:
    """Sections from headings ``(level, start, end of the heading, text)`` in order: the
    text before the first (from ``lead``), then each heading's body up to the next
    heading, with the path of the headings above it."""
    blocks: list[tuple[int, int, list[str]]] = [(lead[0], lead[1], [])]
    stack: list[tuple[int, str]] = []
    for k, (level, _start, after, head) in enumerate(heads):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, head))
        end = heads[k + 1][1] if k + 1 < len(heads) else len(text)
        blocks.append((after, end, [h for _, h in stack if h]))
    return sections_of(text, title, blocks)


def join_blocks(blocks: Sequence[tuple[int, str]], title: str) -> tuple[str, list[Span]]:
    """A document's text and sections from its blocks ``(heading level or 0, text)``:
    the blocks joined by blank lines, each heading's section the blocks after it."""
    parts: list[str] = []
    heads: list[tuple[int, int, int, str]] = []
    pos = 0
    for level, block in blocks:
        if parts:
            pos += 2
        if level:
            heads.append((level, pos, pos + len(block), block))
        parts.append(block)
        pos += len(block)
    text = "\n\n".join(parts)
    lead = (0, heads[0][1] if heads else len(text))
    return text, heading_sections(text, title, lead, heads)


# --- what an index holds already (``anygrain add``) ---------------------------------------
@dataclass
class _Held:
    doc_id: str
    sha256: str
    version: int
    live: bool


class KnownFiles:
    """The files an index holds (by their documents' ``source`` and ``sha256``), so adding
    a folder again reads only new and changed files: an unchanged file is noted and not
    read, a changed one becomes version N+1 of its documents (ids ``ID#N``) and its live
    documents are listed in :attr:`replaced`, for the caller to delete."""

    def __init__(self, docs: Iterable[tuple[str, dict[str, Any]]], deleted: Iterable[str]):
        gone = set(deleted)
        self._files: dict[str, list[_Held]] = {}
        for doc_id, meta in docs:
            src, sha = meta.get("source"), meta.get("sha256")
            if isinstance(src, str) and isinstance(sha, str):
                held = _Held(doc_id, sha, int(meta.get("version") or 1), doc_id not in gone)
                self._files.setdefault(src, []).append(held)
        self.replaced: list[str] = []
        self.unchanged = 0

    @staticmethod
    def of_store(store: CorpusStore, deleted: Iterable[str]) -> KnownFiles:
        return KnownFiles(store.document_metas(), deleted)

    def plan(self, rel: str, sha256: str) -> tuple[int, bool] | None:
        """The version to add the file ``rel`` with content hash ``sha256`` as (1: new)
        and whether it replaces documents the index searches (a changed file); None when
        the index holds it unchanged."""
        held = self._files.get(rel)
        if not held:
            return 1, False
        live = [h for h in held if h.live]
        if live and all(h.sha256 == sha256 for h in live):
            self.unchanged += 1
            return None
        self.replaced.extend(h.doc_id for h in live)
        return max(h.version for h in held) + 1, bool(live)


def renamed(meta: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A file's own metadata with each field named as a provenance one prefixed, so
    neither hides the other."""
    return {(f"{prefix}{k}" if k in PROVENANCE else k): v for k, v in meta.items()}


def versioned(doc_id: str, version: int) -> str:
    return doc_id if version == 1 else f"{doc_id}#{version}"


# --- reading ------------------------------------------------------------------------------
@dataclass
class _Reading:
    """One read of a file or folder: the options, the error log, the ids seen."""

    errors: ErrorLog
    options: ReadOptions
    single: bool
    ids: set[str] = field(default_factory=set)
    n_docs: int = 0
    n_record_files: int = 0

    def skip(self, path: Path, ft: FileType | None, s: Skip) -> None:
        if self.single:
            raise InputError(s.reason, path=str(path)) from None
        self.errors.file_skipped(path, s.reason, kind=ft.name if ft else "", category=s.category)


def read_file(path: Path, rel: str, ft: FileType, reading: _Reading) -> Iterator[SourceDocument]:
    """The documents of one file (none when it is skipped, noted in the error log)."""
    try:
        ft.check_library()
        data = path.read_bytes()
        if not data.strip():
            raise Skip("empty file", "empty file")
    except Skip as s:
        reading.skip(path, ft, s)
        return
    except OSError as e:
        reading.skip(path, ft, Skip(f"unreadable: {e.strerror or e}", "unreadable"))
        return
    sha = hashlib.sha256(data).hexdigest()
    version, changed = 1, False
    known = reading.options.known
    if known is not None:
        plan = known.plan(rel, sha)
        if plan is None:
            reason = "unchanged since it was indexed"
            reading.errors.file_skipped(path, reason, kind=ft.name, category="unchanged")
            return
        version, changed = plan
    base: dict[str, Any] = {"source": rel, "format": ft.name, "sha256": sha}
    if version > 1:
        base["version"] = version
    category = "changed" if changed else ""
    if ft.records is not None:
        yield from _read_records(path, rel, ft, data, base, version, category, reading)
        return
    assert ft.extract is not None
    try:
        ex = ft.extract(data, path)
        if not ex.text.strip():
            raise Skip("no text in it", "no text")
    except Skip as s:
        reading.skip(path, ft, s)
        return
    own = renamed(ex.meta, "front_matter_")
    reading.errors.file_read(path, kind=ft.name, category=category)
    reading.n_docs += 1
    yield SourceDocument(
        doc_id=versioned(rel, version),
        title=ex.title or Path(rel).stem,
        text=ex.text,
        meta={**json_safe(own), **base},
        origin=f"{path}:1",
        # headings alone (no body under any): the whole text is the one section
        sections=ex.sections or [Span(0, len(ex.text))],
    )


def _read_records(
    path: Path,
    rel: str,
    ft: FileType,
    data: bytes,
    base: dict[str, Any],
    version: int,
    category: str,
    reading: _Reading,
) -> Iterator[SourceDocument]:
    assert ft.records is not None
    reading.n_record_files += 1
    try:
        text = decode_text(data, path)
        records = ft.records(text, path, reading.options.fields, reading.errors)
        first = next(records, None)
    except Skip as s:
        reading.skip(path, ft, s)
        return
    if first is None:
        reading.skip(path, ft, Skip("no records in it", "no records"))
        return
    reading.errors.file_read(path, kind=ft.name, category=category)
    for rec in _chain(first, records):
        doc_id = versioned(rec.id if rec.id is not None else f"{rel}:{rec.line}", version)
        if doc_id in reading.ids:
            reading.errors.handle(
                InputError(f"duplicate document id {doc_id!r}", path=str(path), line=rec.line)
            )
            continue
        reading.ids.add(doc_id)
        reading.n_docs += 1
        yield SourceDocument(
            doc_id=doc_id,
            title=rec.title,
            text=rec.text,
            meta={**json_safe(renamed(rec.meta, "field_")), **base, "line": rec.line},
            origin=f"{path}:{rec.line}",
            sections=[Span(0, len(rec.text))],
        )


def _chain(first: Record, rest: Iterator[Record]) -> Iterator[Record]:
    yield first
    yield from rest


def walk(root: Path, errors: ErrorLog) -> Iterator[tuple[Path, str]]:
    """``(path, relative posix path)`` of every file under ``root``, in name order, one
    directory at a time; hidden files and directories (``.name``) are noted skipped (a
    hidden directory once, not each file in it)."""
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        for d in sorted(dirs):
            if d.startswith("."):
                errors.file_skipped(here / d, "hidden directory", category="hidden")
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            p = here / name
            if name.startswith("."):
                errors.file_skipped(p, "hidden file", category="hidden")
                continue
            yield p, p.relative_to(root).as_posix()


def read_path(
    path: Path, errors: ErrorLog, options: ReadOptions, only: FileType | None = None
) -> Iterator[SourceDocument]:
    """The documents of a file, or of every file under a directory (of type ``only``, or
    of any registered type when None: the ``folder`` format)."""
    if path.is_file():
        ft = only or FILE_TYPES.get(path.suffix.lower())
        if ft is None:
            raise InputError(
                f"not a file type anygrain reads ({path.suffix or 'no suffix'})", path=str(path)
            )
        _check_fields(path, options.fields, ft)
        reading = _Reading(errors, options, single=True)
        yield from read_file(path, path.name, ft, reading)
        return
    reading = _Reading(errors, options, single=False)
    for p, rel in walk(path, errors):
        suffix = p.suffix.lower()
        ft = FILE_TYPES.get(suffix)
        if only is not None and ft is not only:
            errors.file_skipped(p, f"not a {only.name} file", category=f"not {only.name}")
            continue
        if ft is None:
            what = suffix or "no suffix"
            errors.file_skipped(
                p, f"not a file type anygrain reads ({what})", category=f"unsupported {what}"
            )
            continue
        yield from read_file(p, rel, ft, reading)
    if options.fields and not reading.n_record_files:
        raise UsageError(
            f"{path}: {', '.join(_given(options.fields))} name the fields of CSV, TSV and "
            "JSONL files, and none was read here"
        )
    if not reading.n_docs and not (options.known is not None and options.known.unchanged):
        what = f"{only.name} files" if only else "files of a type anygrain reads"
        raise InputError(f"no documents found: no readable {what}", path=str(path))


def _given(fields: FieldMap) -> list[str]:
    from anygrain.corpus.fields import describe

    return list(describe(fields))


def _check_fields(path: Path, fields: FieldMap, ft: FileType) -> None:
    if fields and ft.records is None:
        raise UsageError(
            f"{path}: {', '.join(_given(fields))} name the fields of CSV, TSV and JSONL "
            f"files, not of a {ft.name} file"
        )


def record_fields(
    names: Sequence[str], fields: FieldMap, path: Path, *, line: int | None = None
) -> tuple[str, str | None, str | None]:
    """Which of ``names`` (a header's columns, a record's keys) hold the text, id and
    title: the fields named, else ``text``/``contents``/``body``/``content``, ``id``/
    ``_id`` and ``title`` where present.  A text field missing is a :class:`Skip` listing
    the fields there are, and so is a named id or title field missing."""
    have = set(names)
    listed = ", ".join(list(names)[:12]) or "none"
    text = fields.text or next((k for k in TEXT_KEYS if k in have), None)
    if fields.text is not None and fields.text not in have:
        raise Skip(f"no field {fields.text!r} (--text-field; fields: {listed})", "no text field")
    if text is None:
        raise Skip(
            f"no text field ({', '.join(TEXT_KEYS)}): name it with --text-field (fields: {listed})",
            "no text field",
        )
    for key, value in (("--id-field", fields.id), ("--title-field", fields.title)):
        if value is not None and value not in have:
            raise Skip(f"no field {value!r} ({key}; fields: {listed})", f"no {key[2:-6]} field")
    id_key = fields.id or next((k for k in ID_KEYS if k in have), None)
    title_key = fields.title or ("title" if "title" in have else None)
    return text, id_key, title_key


TEXT_KEYS = ("text", "contents", "body", "content")
ID_KEYS = ("id", "_id")


def record_meta(
    obj: dict[str, Any], used: Iterable[str | None], fields: FieldMap
) -> dict[str, Any]:
    """A record's metadata: the fields named by ``--meta-fields`` (those present), else
    every field but its text, id and title."""
    if fields.meta is not None:
        return {k: obj[k] for k in fields.meta if k in obj}
    skip = {u for u in used if u is not None}
    return {k: v for k, v in obj.items() if k not in skip}
