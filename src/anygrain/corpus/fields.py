"""How a source is read beyond its format: which fields of a record file (CSV, TSV, JSONL)
hold the text, id, title and metadata, and what an index already holds of a folder.

``--text-field``, ``--id-field``, ``--title-field`` and ``--meta-fields`` on the command line,
the same keywords in :meth:`Index.build <anygrain.index.base.Index.build>` and
:func:`anygrain.api.add_documents` where the source is a file or folder
(:func:`with_read_options`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.errors import UsageError

if TYPE_CHECKING:
    from anygrain.corpus.files import KnownFiles
    from anygrain.corpus.formats import Source

#: the keyword arguments that name a record file's fields
FIELD_OPTIONS = ("text_field", "id_field", "title_field", "meta_fields")


@dataclass(frozen=True)
class FieldMap:
    """The fields of a record (a CSV/TSV row, a JSONL object) that hold its text, id and
    title, and those kept as metadata (``None``: every other field)."""

    text: str | None = None
    id: str | None = None
    title: str | None = None
    meta: tuple[str, ...] | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.text, self.id, self.title, self.meta))

    @staticmethod
    def of(
        text_field: str | None = None,
        id_field: str | None = None,
        title_field: str | None = None,
        meta_fields: str | list[str] | tuple[str, ...] | None = None,
    ) -> FieldMap:
        """From the keyword arguments (``meta_fields`` a list or ``"a,b"``); an empty name
        is refused, naming the option."""
        named = {"text_field": text_field, "id_field": id_field, "title_field": title_field}
        for key, value in named.items():
            if value is not None and not str(value).strip():
                raise UsageError(f"--{key.replace('_', '-')}: give a field name")
        meta: tuple[str, ...] | None = None
        if meta_fields is not None:
            parts = meta_fields.split(",") if isinstance(meta_fields, str) else meta_fields
            meta = tuple(str(p).strip() for p in parts if str(p).strip())
        return FieldMap(text_field, id_field, title_field, meta)

    @staticmethod
    def take(options: MutableMapping[str, Any]) -> FieldMap:
        """The field keywords popped from ``options`` (the rest stay for the caller)."""
        return FieldMap.of(**{k: options.pop(k) for k in FIELD_OPTIONS if k in options})

    @staticmethod
    def only(options: Mapping[str, Any]) -> FieldMap:
        """The field keywords of ``options``, which may hold nothing else."""
        rest = sorted(set(options) - set(FIELD_OPTIONS))
        if rest:
            raise UsageError(
                f"unknown option {', '.join(rest)} (the field options are {', '.join(FIELD_OPTIONS)})"
            )
        return FieldMap.of(**options)


@dataclass(frozen=True)
class ReadOptions:
    """What a format that takes options is read with (:attr:`Format.read_with
    <anygrain.corpus.formats.Format.read_with>`): the record fields, and the files an
    index holds already (``anygrain add``: unchanged files are not read again, a changed
    one is added as a new version of its documents)."""

    fields: FieldMap = FieldMap()
    known: KnownFiles | None = None

    def __bool__(self) -> bool:
        return bool(self.fields) or self.known is not None


def with_read_options(source: Any, fields: FieldMap, known: KnownFiles | None = None) -> Any:
    """``source`` (``FORMAT:PATH``, a path, or a parsed :class:`Source`) to be read with
    ``fields`` and ``known``; returned as it is when neither is given.  Another source (a
    corpus store, Python documents) with fields is refused, naming the options."""
    from anygrain.corpus.formats import Source, parse_source

    options = ReadOptions(fields, known)
    if not options:
        return source
    if isinstance(source, str | os.PathLike):
        source = _record_file(source, fields) or parse_source(source)
    if not isinstance(source, Source):
        raise UsageError(
            "--text-field, --id-field, --title-field and --meta-fields name the fields of a "
            "CSV, TSV or JSONL file or folder; this source is not one"
        )
    return source.with_options(options)


def _record_file(spec: str | os.PathLike[str], fields: FieldMap) -> Source | None:
    """A CSV, TSV or JSONL file named by its path with fields given: read as that type of
    record file, whatever its first line looks like (the fields say which are which)."""
    from anygrain.corpus.files import FILE_TYPES
    from anygrain.corpus.formats import FORMATS, Source, ensure_loaded

    ensure_loaded()
    path = Path(spec)
    ft = FILE_TYPES.get(path.suffix.lower())
    if not fields or ft is None or ft.records is None or not path.is_file():
        return None
    return Source(FORMATS[ft.name], path, detected=True)


def describe(fields: FieldMap) -> Mapping[str, Any]:
    """The options given, as their command-line names (for messages)."""
    out: dict[str, Any] = {}
    for key, value in (
        ("--text-field", fields.text),
        ("--id-field", fields.id),
        ("--title-field", fields.title),
        ("--meta-fields", ",".join(fields.meta) if fields.meta is not None else None),
    ):
        if value is not None:
            out[key] = value
    return out
