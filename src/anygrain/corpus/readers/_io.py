"""Shared helpers for readers: strict UTF-8 line reading, JSON with locations, sniffing aids.

Every helper reports problems as :class:`InputError` naming file, line and
field; per-record problems go through :meth:`ErrorLog.handle` so that SKIP mode
counts them instead of stopping.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError, ErrorLog, InputError

R = TypeVar("R")
T = TypeVar("T")

# Sniffers parse at most this much of a JSONL file's first line.
_SNIFF_LINE_LIMIT = 8 << 20


def head(path: Path, n: int = 4096) -> str:
    """The first ``n`` bytes decoded leniently, for format sniffing."""
    with open(path, "rb") as f:
        return f.read(n).decode("utf-8", errors="replace")


def iter_text_lines(path: Path, errors: ErrorLog) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)``; a line of invalid UTF-8 goes to ``errors`` (SKIP skips it)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                errors.handle(
                    InputError(f"invalid UTF-8 at byte {e.start}", path=str(path), line=lineno)
                )
                continue
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield lineno, line.rstrip("\r\n")


def iter_jsonl(path: Path, errors: ErrorLog) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` for each non-blank line; bad JSON or non-objects go to ``errors``."""
    for lineno, line in iter_text_lines(path, errors):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            errors.handle(
                InputError(f"invalid JSON: {e.msg} (column {e.colno})", path=str(path), line=lineno)
            )
            continue
        if not isinstance(obj, dict):
            errors.handle(
                InputError(
                    f"expected a JSON object, got {type(obj).__name__}",
                    path=str(path),
                    line=lineno,
                )
            )
            continue
        yield lineno, obj


def read_text(path: Path) -> str:
    """A whole file as UTF-8 (BOM dropped); invalid bytes are reported with their line, a
    directory or a missing file in one line naming it."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise AnygrainError(f"{path}: is a directory; this format reads one file") from None
    except FileNotFoundError:
        raise AnygrainError(f"{path}: no such file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"invalid UTF-8 at byte {e.start}", path=str(path), line=line) from None


def load_json(path: Path) -> Any:
    """Load a whole JSON file; syntax errors name the line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path=str(path), line=e.lineno) from None


def iter_json_array(path: Path, key: str | None = None) -> Iterator[tuple[int, Any]]:
    """``(line, element)`` for each element of a JSON array, with the line where it starts.

    ``key=None`` reads a top-level array; otherwise the array under that key of a
    top-level object (``{"data": [...]}``).  Elements are decoded one at a time
    so each gets its own line number; the whole file is held in memory.
    """
    text = read_text(path)
    dec = json.JSONDecoder()
    pos = 0
    line = 1
    where = str(path)

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal pos, line
        line += text.count("\n", pos, i)
        pos = i
        return line

    def decode(i: int) -> tuple[Any, int]:
        try:
            return dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}", path=where, line=e.lineno) from None

    def expect(i: int, chars: str, what: str) -> int:
        i = skip_ws(i)
        if i >= len(text) or text[i] not in chars:
            found = repr(text[i]) if i < len(text) else "end of file"
            raise InputError(
                f"invalid JSON: expected {what}, found {found}", path=where, line=line_at(i)
            )
        return i

    i = skip_ws(0)
    if key is not None:
        i = expect(i, "{", "an object") + 1
        while True:
            i = skip_ws(i)
            if i < len(text) and text[i] == "}":
                raise InputError("missing field", path=where, line=1, field=key)
            i = expect(i, '"', "a key")
            name, i = decode(i)
            i = expect(i, ":", "':'") + 1
            i = skip_ws(i)
            if name == key:
                break
            _, i = decode(i)
            i = expect(i, ",}", "',' or '}'")
            if text[i] == "}":
                raise InputError("missing field", path=where, line=1, field=key)
            i += 1
        if i >= len(text) or text[i] != "[":
            value, _ = decode(i)
            raise InputError(
                f"expected list, got {type(value).__name__}",
                path=where,
                line=line_at(i),
                field=key,
            )
    i = expect(i, "[", "a list") + 1
    i = skip_ws(i)
    if i < len(text) and text[i] == "]":
        return
    while True:
        i = skip_ws(i)
        start = line_at(i)
        value, i = decode(i)
        yield start, value
        i = expect(i, ",]", "',' or ']'")
        if text[i] == "]":
            return
        i += 1


def require(
    obj: dict[str, Any],
    key: str,
    typ: type | tuple[type, ...],
    *,
    path: Path,
    line: int | None,
    where: str = "",
) -> Any:
    """``obj[key]`` checked for presence and type; the error names file, line and field."""
    name = f"{where}.{key}" if where else key
    if not isinstance(obj, dict) or key not in obj:
        raise InputError("missing field", path=str(path), line=line, field=name)
    value = obj[key]
    if not isinstance(value, typ) or (isinstance(value, bool) and bool not in _types(typ)):
        want = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise InputError(
            f"expected {want}, got {type(value).__name__}", path=str(path), line=line, field=name
        )
    return value


def _types(typ: type | tuple[type, ...]) -> tuple[type, ...]:
    return (typ,) if isinstance(typ, type) else typ


def require_text(
    obj: dict[str, Any], key: str, *, path: Path, line: int | None, where: str = ""
) -> str:
    """A required, non-blank string field."""
    value: str = require(obj, key, str, path=path, line=line, where=where)
    if not value.strip():
        name = f"{where}.{key}" if where else key
        raise InputError("empty text", path=str(path), line=line, field=name)
    return value


def require_id(
    obj: dict[str, Any], key: str, *, path: Path, line: int | None, where: str = ""
) -> str:
    """A required id, string or integer, returned as a non-empty string."""
    value = require(obj, key, (str, int), path=path, line=line, where=where)
    text = str(value).strip()
    if not text:
        name = f"{where}.{key}" if where else key
        raise InputError("empty id", path=str(path), line=line, field=name)
    return text


def string_list(value: Any, *, path: Path, line: int | None, field: str) -> list[str]:
    """``value`` checked to be a list of strings (answer lists and the like)."""
    if not isinstance(value, list):
        raise InputError(
            f"expected list, got {type(value).__name__}", path=str(path), line=line, field=field
        )
    for k, item in enumerate(value):
        if not isinstance(item, str):
            raise InputError(
                f"expected str, got {type(item).__name__}",
                path=str(path),
                line=line,
                field=f"{field}[{k}]",
            )
    return list(value)


def dedupe(items: list[str]) -> list[str]:
    """Items in first-seen order without repeats."""
    return list(dict.fromkeys(items))


def split_qrels(line: str) -> list[str]:
    """The fields of one qrels line, tab- or whitespace-separated.

    Multi-CPR and BEIR write tabs; TREC, Anserini and Pyserini write ``qid 0 docid rel``
    with single spaces.  A line holding a tab is split on tabs only (so an id may contain
    a space there); any other line on runs of whitespace, as trec_eval reads it.
    """
    if "\t" in line:
        return [f.strip() for f in line.split("\t")]
    return line.split()


def split_tsv(line: str, ncols: int | None = None) -> list[str]:
    """Split one TSV line, undoing CSV quoting where the line uses it.

    DPR's files are written by the ``csv`` module (tab delimiter, ``"``-quoted
    fields with doubled quotes), but some derived files hold raw text whose
    fields merely start with a quote (``"Heartbeat". Alan ...``), which strict
    CSV rejects.  A line is parsed as CSV when that succeeds (and gives
    ``ncols`` fields), else split on tabs as is.  Records never span lines.
    """
    raw = line.split("\t")
    if not line.startswith('"') and '\t"' not in line:
        return raw  # quoting applies only to fields that start with a quote
    try:
        row = next(csv.reader([line], delimiter="\t", strict=True))
    except csv.Error:
        return raw
    if ncols is not None and len(row) != ncols and len(raw) == ncols:
        return raw
    return row


class IdSet:
    """Seen-id tracking for very large files: small decimal ids live in a bitmap, not a set."""

    _BITMAP_MAX = 1 << 28  # 32 MiB of bitmap at most

    def __init__(self) -> None:
        self._bits = bytearray()
        self._other: set[str] = set()

    def add(self, key: str) -> bool:
        """Add ``key``; False when it was already there."""
        if key.isascii() and key.isdigit() and (key[0] != "0" or key == "0") and len(key) < 10:
            n = int(key)
            if n < self._BITMAP_MAX:
                byte, mask = n >> 3, 1 << (n & 7)
                if byte >= len(self._bits):
                    self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
                if self._bits[byte] & mask:
                    return False
                self._bits[byte] |= mask
                return True
        if key in self._other:
            return False
        self._other.add(key)
        return True


class UniqueNames:
    """Derived ids (titles) made unique as ``name#2``, ``name#3``...; stores 8-byte digests only."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._repeats: dict[str, int] = {}

    def claim(self, name: str) -> str:
        digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
        if digest not in self._seen:
            self._seen.add(digest)
            return name
        n = self._repeats.get(name, 1)
        while True:
            n += 1
            candidate = f"{name}#{n}"
            d2 = hashlib.blake2b(candidate.encode("utf-8"), digest_size=8).digest()
            if d2 not in self._seen:
                self._seen.add(d2)
                self._repeats[name] = n
                return candidate


def first_tsv_row(path: Path, ncols: int) -> list[str] | None:
    """The first line's fields when ``path`` is a file whose first line has ``ncols``
    tab-separated columns, else None (for sniffing)."""
    if not path.is_file():
        return None
    fields = split_tsv(first_line(path), ncols)
    return fields if len(fields) == ncols else None


def iter_rows(
    path: Path,
    errors: ErrorLog,
    split: Callable[[str], list[str]],
    header: Callable[[list[str]], bool],
) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of every non-blank line of a delimited file, split by ``split``;
    the first such line is left out when ``header(fields)`` says it is a header."""
    first = True
    for lineno, line in iter_text_lines(path, errors):
        if not line.strip():
            continue
        fields = split(line)
        if first:
            first = False
            if header(fields):
                continue
        yield lineno, fields


def no_records(path: Path, what: str) -> InputError:
    """The error for an input that yielded nothing usable; always raised, whatever the policy."""
    return InputError(f"no {what} found", path=str(path))


# --- sniffing -------------------------------------------------------------------------------


def first_line(path: Path, limit: int = 65536) -> str:
    """The first non-blank line (at most ``limit`` bytes), decoded leniently, without its newline."""
    with open(path, "rb") as f:
        for _ in range(64):
            raw = f.readline(limit)
            if not raw:
                return ""
            text = raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")
            if text.strip():
                return text
    return ""


@functools.lru_cache(maxsize=16)
def _first_json_object(path: str, _stamp: tuple[int, int, int, bytes]) -> dict[str, Any] | None:
    with open(path, "rb") as f:
        raw = b""
        for _ in range(64):
            raw = f.readline(_SNIFF_LINE_LIMIT)
            if not raw or raw.strip():
                break
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def first_json_object(path: Path) -> dict[str, Any] | None:
    """The first non-blank line parsed as a JSON object, or None; cached across sniffers.

    The cache key holds the file's size, times and first 4 KiB, so a rewritten file
    is parsed again.
    """
    if not path.is_file():
        return None
    st = os.stat(path)
    with open(path, "rb") as f:
        start = f.read(4096)
    return _first_json_object(str(path), (st.st_size, st.st_mtime_ns, st.st_ino, start))


def add_unique(
    out: list[Question], seen: set[str], q: Question, *, path: Path, line: int, errors: ErrorLog
) -> None:
    """Append ``q`` unless its id was seen; a repeat is a per-record error."""
    if q.id in seen:
        errors.handle(
            InputError(f"duplicate question id {q.id!r}", path=str(path), line=line, field="id")
        )
        return
    seen.add(q.id)
    out.append(q)


def converted(
    records: Iterable[tuple[int, R]], convert: Callable[[R, int], T], errors: ErrorLog
) -> Iterator[tuple[int, R, T]]:
    """``(line, record, convert(record, line))`` of each record that converts; a record that
    does not (:class:`InputError`) goes to ``errors`` (stop, or skip and count)."""
    for line, record in records:
        try:
            item = convert(record, line)
        except InputError as e:
            errors.handle(e)
            continue
        yield line, record, item


def dict_elements(
    items: list[Any], where: str, *, path: Path, line: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(field, element)`` of a list field whose elements must be JSON objects; ``field``
    names the element (``where[i]``), and an element of another type is an error."""
    for i, item in enumerate(items):
        field = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise InputError(
                f"expected dict, got {type(item).__name__}", path=str(path), line=line, field=field
            )
        yield field, item


def collect_questions(
    records: Iterable[tuple[int, R]],
    convert: Callable[[R, int], Question],
    *,
    path: Path,
    errors: ErrorLog,
    format: str,
) -> Questions:
    """Convert ``(line, record)`` pairs into a question set with unique ids.

    A bad record goes to ``errors`` (stop, or skip and count); an empty result always raises.
    """
    out: list[Question] = []
    seen: set[str] = set()
    for line, _, q in converted(records, convert, errors):
        add_unique(out, seen, q, path=path, line=line, errors=errors)
    if not out:
        raise no_records(path, "questions")
    return Questions(out, source=str(path), format=format)


def question_reader(
    records: Callable[[Path, ErrorLog], Iterable[tuple[int, Any]]],
    convert: Callable[..., Question],
    *,
    format: str,
) -> Callable[[Path, ErrorLog], Questions]:
    """A format's ``read_questions``: every record of ``records(path, errors)`` through
    ``convert(record, path=path, line=line)``, ids unique (:func:`collect_questions`)."""

    def read_questions(path: Path, errors: ErrorLog) -> Questions:
        return collect_questions(
            records(path, errors),
            lambda obj, line: convert(obj, path=path, line=line),
            path=path,
            errors=errors,
            format=format,
        )

    return read_questions
