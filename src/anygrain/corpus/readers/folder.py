"""A folder of your own files: every file of a type anygrain reads, recursively.

Markdown, reStructuredText, HTML, PDF, DOCX, plain text, CSV/TSV and JSONL files
(:mod:`anygrain.corpus.files` and the reader of each type) are read one at a time, in
name order; every other file, and hidden ones, are noted as skipped with the reason, and
so is a file that cannot be read (empty, binary, not UTF-8, a damaged or scanned PDF).
Each document's id is its path relative to the folder (a record's, its id field or
``PATH:LINE``).

A directory is detected as a folder when it holds a file of a type the ``text`` format
does not read (a directory of ``.txt`` files alone stays ``text``, whose documents carry
no provenance); ``folder:DIR`` forces it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from anygrain.corpus.fields import ReadOptions
from anygrain.corpus.files import (
    FILE_TYPES,
    Extracted,
    FileType,
    decode_text,
    read_path,
    register_file_type,
)
from anygrain.corpus.formats import Format, register
from anygrain.corpus.records import SourceDocument
from anygrain.errors import ErrorLog

NAME = "folder"
#: suffixes that alone do not make a directory a folder: the text format reads .txt
#: directories, and a directory of .jsonl files is read with jsonl:DIR
_NOT_CLAIMING = (".txt", ".jsonl")


def _plain_text(data: bytes, path: Path) -> Extracted:
    return Extracted(decode_text(data, path))


TEXT = register_file_type(FileType("text", (".txt",), extract=_plain_text))


def sniff(path: Path) -> bool:
    """A directory holding (not under a hidden directory) a file of a registered type
    other than .txt and .jsonl."""
    if not path.is_dir():
        return False
    for _dirpath, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            suffix = os.path.splitext(name)[1].lower()
            if not name.startswith(".") and suffix in FILE_TYPES and suffix not in _NOT_CLAIMING:
                return True
    return False


def read_with(path: Path, errors: ErrorLog, options: ReadOptions) -> Iterator[SourceDocument]:
    return read_path(path, errors, options)


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    return read_with(path, errors, ReadOptions())


register(
    Format(
        name=NAME,
        description="a folder of your own files: Markdown, reStructuredText, HTML, PDF, DOCX, "
        "text, CSV/TSV, JSONL; each passage keeps its file, page and heading path",
        sniff=sniff,
        read_documents=read_documents,
        priority=-90,  # below every format that recognises a directory by its content
        read_with=read_with,
        tracks_files=True,
    )
)
