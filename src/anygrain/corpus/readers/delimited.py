"""CSV and TSV files with a header row: one document per row.

The text is the column named by ``--text-field`` (else ``text``, ``contents``, ``body``
or ``content``), the id ``--id-field`` (else ``id`` or ``_id``; without one, ``FILE:LINE``),
the title ``--title-field`` (else ``title``), and the metadata ``--meta-fields`` (else
every other column), each kept as a string.  Every row records its ``source`` file and
the ``line`` it starts on.  Quoted fields may span lines (Python's ``csv`` module).  A
row with another number of fields than the header, or an empty text, is a bad record
(stopped, or skipped and counted with ``--on-error skip``).  A ``.tsv`` file that
another format recognises (DPR's passages, Multi-CPR's corpus) is read as that format.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from anygrain.corpus.fields import FieldMap
from anygrain.corpus.files import (
    FileType,
    Record,
    RecordReader,
    Skip,
    record_fields,
    record_meta,
    register_file_format,
)
from anygrain.corpus.readers._io import first_line
from anygrain.errors import ErrorLog, InputError

# a text column may be long (a whole article)
csv.field_size_limit(1 << 30)


def _reader(delimiter: str) -> RecordReader:
    def records(text: str, path: Path, fields: FieldMap, errors: ErrorLog) -> Iterator[Record]:
        rows = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        try:
            header = next(rows, None)
        except csv.Error as e:
            raise Skip(f"not {delimiter!r}-separated values: {e}", "bad header") from None
        if not header or not any(h.strip() for h in header):
            raise Skip("no header row", "no header row")
        header = [h.strip() for h in header]
        text_key, id_key, title_key = record_fields(header, fields, path, line=1)
        while True:
            line = rows.line_num + 1
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as e:
                errors.handle(InputError(f"malformed row: {e}", path=str(path), line=line))
                continue
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                errors.handle(
                    InputError(
                        f"{len(row)} fields where the header has {len(header)}",
                        path=str(path),
                        line=line,
                    )
                )
                continue
            obj = dict(zip(header, row, strict=True))
            body = obj[text_key]
            if not body.strip():
                errors.handle(InputError("empty text", path=str(path), line=line, field=text_key))
                continue
            doc_id = obj[id_key].strip() if id_key is not None else None
            if id_key is not None and not doc_id:
                errors.handle(InputError("empty id", path=str(path), line=line, field=id_key))
                continue
            title = obj[title_key] if title_key is not None else ""
            meta = record_meta(obj, (text_key, id_key, title_key), fields)
            yield Record(line, doc_id, title, body, meta)

    return records


def _csv_header(path: Path) -> bool:
    """A first line without a tab (DPR's question files are tab-separated ``.csv``)."""
    line = first_line(path)
    return bool(line) and "\t" not in line


def _tsv_header(path: Path) -> bool:
    return "\t" in first_line(path)


register_file_format(
    FileType("csv", (".csv",), records=_reader(",")),
    "CSV with a header row: one document per row; --text-field, --id-field, --title-field, "
    "--meta-fields name the columns (default: text, id, title, the rest as metadata)",
    looks_right=_csv_header,
)
register_file_format(
    FileType("tsv", (".tsv", ".tab"), records=_reader("\t")),
    "TSV with a header row, read as csv is (a DPR or Multi-CPR .tsv is detected as those)",
    looks_right=_tsv_header,
)
