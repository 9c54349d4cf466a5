"""Checksums of every file in a directory, recorded at build time and checked on open.

A flipped byte in an index file would otherwise change rankings or passage text
without any error.  :func:`file_table` records the size and BLAKE2b digest of each
file under a directory; :func:`check_files` compares a directory with such a table
at one of three depths (:class:`Verify`): sizes only (catches truncation, costs a
``stat`` per file), full hashes of files up to a size limit plus the model weights
whatever their size (the default on open; a weight file is hashed once per process for
each version of it), or full hashes of every file (``anygrain verify``).  BLAKE2b comes with Python and
hashes several hundred MB/s, fast enough that no extra dependency is needed.
"""

from __future__ import annotations

import enum
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALGORITHM = "blake2b"
#: Files up to this size are hashed on every open by default (``Verify.SMALL``).
SMALL_LIMIT = 64 * 1024 * 1024
_CHUNK = 1 << 20


class Verify(str, enum.Enum):
    """How much of an index is checked against its recorded checksums when it is opened."""

    SIZES = "sizes"  # sizes only
    SMALL = "small"  # sizes, the hash of each file up to SMALL_LIMIT bytes and of model weights
    FULL = "full"  # sizes and the hash of every file


def hash_file(path: Path) -> str:
    """BLAKE2b (128-bit) of a file, read in chunks so memory stays flat for large files."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path, exclude: Iterable[str]) -> list[str]:
    skip = set(exclude)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if rel not in skip:
                out.append(rel)
    return out


def file_table(root: Path, *, exclude: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "blake2b"}}`` for every file under ``root`` but ``exclude``."""
    root = Path(root)
    return {
        rel: {"size": (root / rel).stat().st_size, ALGORITHM: hash_file(root / rel)}
        for rel in _files(root, exclude)
    }


@dataclass(frozen=True)
class Problem:
    """One file that does not match the table: ``missing``, ``size``, ``checksum`` or ``extra``."""

    path: Path
    what: str
    detail: str = ""

    def __str__(self) -> str:
        says = {
            "missing": "missing",
            "size": "truncated or overwritten",
            "checksum": "damaged (its checksum differs from the one recorded at build time)",
            "extra": "not part of the index as built",
        }[self.what]
        return f"{self.path}: {says}" + (f" ({self.detail})" if self.detail else "")


# (device, inode, size, mtime, ctime, path, recorded digest) of the files this process has
# hashed and found matching under Verify.SMALL's ``always``: a file is hashed again only
# once any of them changes (a rewrite, a replacement, another file at that path)
_VERIFIED: set[tuple[int, int, int, int, int, str, str]] = set()


def _matches_once(p: Path, st: os.stat_result, want: str) -> bool:
    """Whether ``p`` hashes to ``want``, hashing it only the first time this process sees
    this version of it (same size, mtime, ctime and inode); a mismatch is not cached."""
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, str(p.resolve()), want)
    if key in _VERIFIED:
        return True
    if hash_file(p) != want:
        return False
    _VERIFIED.add(key)
    return True


def check_files(
    root: Path,
    table: dict[str, dict[str, Any]],
    *,
    verify: Verify = Verify.SMALL,
    small_limit: int = SMALL_LIMIT,
    extra: bool = False,
    exclude: Iterable[str] = (),
    always: Iterable[str] = (),
) -> list[Problem]:
    """Files under ``root`` that differ from ``table``; ``extra`` also lists unrecorded files.

    ``always`` (entries of ``table``: model weights) are hashed under ``Verify.SMALL``
    whatever their size, once per process for each version of the file (its size,
    mtime, ctime and inode); ``Verify.FULL`` hashes every file afresh, and
    ``Verify.SIZES`` none."""
    root = Path(root)
    must = set(always)
    problems = []
    for rel, want in table.items():
        p = root / rel
        try:
            st = p.stat()
        except FileNotFoundError:
            problems.append(Problem(p, "missing"))
            continue
        size = st.st_size
        if size != want["size"]:
            problems.append(Problem(p, "size", f"{size} bytes, expected {want['size']}"))
            continue
        if verify is Verify.SMALL and rel in must:
            if not _matches_once(p, st, want[ALGORITHM]):
                problems.append(Problem(p, "checksum"))
            continue
        full = verify is Verify.FULL or (verify is Verify.SMALL and size <= small_limit)
        if full and hash_file(p) != want[ALGORITHM]:
            problems.append(Problem(p, "checksum"))
    if extra:
        problems += [
            Problem(root / rel, "extra") for rel in _files(root, exclude) if rel not in table
        ]
    return problems
