"""Plain text: a ``.txt`` file, or a directory of them (searched recursively, sorted).

One document per file: ``doc_id`` is the path relative to the directory (the
file name for a single file), ``title`` the file stem.  The splitter cuts the
text (``passages=None``).  Line endings are normalised to ``\\n``; hidden
files and directories (``.name``) are skipped.  This is the fallback format: it
claims a ``.txt`` file only when no other format recognises it, and a directory
only when it is not a BEIR or Multi-CPR directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from anygrain.corpus.formats import FORMATS, Format, register
from anygrain.corpus.readers._io import no_records, read_text
from anygrain.corpus.records import SourceDocument
from anygrain.errors import ErrorLog, InputError

NAME = "text"
SUFFIXES = (".txt",)


def text_files(path: Path) -> list[Path]:
    """The files a ``text`` source reads, in a stable order."""
    if path.is_file():
        return [path]
    return sorted(
        p
        for p in path.rglob("*")
        if p.suffix.lower() in SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )


def _claimed_elsewhere(path: Path) -> bool:
    for fmt in FORMATS.values():
        if fmt.name == NAME:
            continue
        try:
            if fmt.sniff(path):
                return True
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    return False


def sniff(path: Path) -> bool:
    """A .txt file or a directory holding some, that no other format claims."""
    if path.is_file():
        return path.suffix.lower() in SUFFIXES and not _claimed_elsewhere(path)
    if path.is_dir():
        return not _claimed_elsewhere(path) and any(
            p.suffix.lower() in SUFFIXES for p in path.rglob("*") if p.is_file()
        )
    return False


def _not_read(path: Path) -> list[tuple[Path, str]]:
    """Files under a directory source that the text format leaves out, with the reason."""
    if path.is_file():
        return []
    out = []
    for p in sorted(path.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(path).parts
        if any(part.startswith(".") for part in rel):
            out.append((p, "hidden file or directory"))
        elif p.suffix.lower() not in SUFFIXES:
            fmt = p.suffix.lstrip(".").lower() or "other"
            hint = f"; index it on its own ({fmt}:{p})" if fmt in FORMATS else ""
            out.append((p, f"not a .txt file: the text format reads only .txt{hint}"))
    return out


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """One document per file; unreadable or empty files go to ``errors``.  Every file of a
    directory is noted in ``errors.files``, read or skipped with the reason (a directory
    mixing .jsonl and .txt files would otherwise lose the .jsonl ones without a word)."""
    base = path.parent if path.is_file() else path
    n_docs = 0
    for file, reason in _not_read(path):
        hidden = reason == "hidden file or directory"
        errors.file_skipped(file, reason, category="hidden" if hidden else "not .txt")
    for file in text_files(path):
        rel = file.relative_to(base).as_posix()
        try:
            text = read_text(file).replace("\r\n", "\n").replace("\r", "\n")
            if not text.strip():
                raise InputError("empty text", path=str(file), line=1, field="text")
        except InputError as e:
            errors.handle(e)
            errors.file_skipped(file, e.message, category=e.message)
            continue
        n_docs += 1
        errors.file_read(file, kind="text")
        yield SourceDocument(doc_id=rel, title=file.stem, text=text, origin=f"{file}:1")
    if not n_docs:
        raise no_records(path, "text documents (.txt files)")


register(
    Format(
        name=NAME,
        description="plain text: a .txt file or a directory of .txt files, one document each",
        sniff=sniff,
        read_documents=read_documents,
        priority=-100,
    )
)
