"""The files a served index has memory-mapped, and how to tell that they changed on disk.

A mapped file truncated in place kills the process with SIGBUS at the next read past its new
end, so the server (:mod:`anygrain.serve.service`) compares each file's size, mtime and
inode with what they were when the index was loaded before it searches, and reopens the
index when they differ.
"""

from __future__ import annotations

import os
from pathlib import Path

from anygrain.index.base import Index
from anygrain.index.manifest import external_corpus

#: Suffixes of the index files that are memory-mapped (NumPy arrays, FAISS, Arrow tables).
MAPPED_SUFFIXES = (".npy", ".faiss", ".arrow")


#: A file's identity as loaded: size, mtime (ns) and inode; None when it was missing.
Stamp = tuple[int, int, int] | None


def mapped_files(index: Index) -> list[Path]:
    """The files ``index`` may have memory-mapped: the ``.npy``, ``.faiss`` and ``.arrow``
    files its manifest lists (``files``, and ``corpus_files`` of a corpus kept outside it).
    Nothing for an index object with no directory (a stand-in built in memory)."""
    m = getattr(index, "manifest", None)
    if getattr(index, "path", None) is None or not isinstance(m, dict):
        return []
    root = Path(index.path)
    out = [root / rel for rel in m.get("files") or {} if rel.endswith(MAPPED_SUFFIXES)]
    corpus = external_corpus(root, m)
    if corpus is not None:
        files = m.get("corpus_files") or {}
        out += [corpus / rel for rel in files if rel.endswith(MAPPED_SUFFIXES)]
    return out


def stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def describe_change(path: Path, was: Stamp, now: Stamp) -> str:
    """What happened to one mapped file, in words."""
    if now is None:
        return f"{path}: missing (deleted, or being replaced)"
    if was is None:
        return f"{path}: appeared after the index was loaded"
    if now[0] != was[0]:
        return f"{path}: its size changed from {was[0]} to {now[0]} bytes (truncated or rewritten)"
    if now[2] != was[2]:
        return f"{path}: replaced by another file"
    return f"{path}: rewritten (its modification time changed)"
