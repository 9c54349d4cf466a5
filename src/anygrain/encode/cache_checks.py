"""Checksums of a graph cache entry: recorded when the graph is made, checked when it is opened.

A cache entry (:class:`~anygrain.encode.onnx_runtime.GraphCache`) is keyed by the fingerprint
of the weights it was made from, but its own files could be damaged since: a flipped bit in
``graph.onnx`` silently changes every answer, NaN in the token table empties every search,
a truncated file fails deep inside ONNX Runtime.  So, as an index records its files
(:mod:`anygrain.utils.checksums`), the entry records the size and BLAKE2b digest of each of
its files in :data:`CHECKSUMS_FILE`, written last into the staging directory, and
:func:`entry_problem` checks them on every open: a missing file, another size, another
digest, or no (readable) record at all is a one-line reason naming the file.  The cache then
makes the entry again from the model (or the shipped graph) rather than use it.  An entry
written before checksums were recorded has no record: it is made again once, since nothing
could tell its files intact.

What an open costs: sizes are always compared (a ``stat`` per file, which catches truncated,
empty and missing files), and files up to :data:`ALWAYS_HASHED` bytes (``meta.json``, the
configs, an English tokenizer) are always hashed.  The graph and the token table are the big
ones (hashing them takes far longer than opening the graph at all), so each is hashed in full only when its ``stat`` (size,
modification and change times, inode) differs from the one it had when it last hashed right:
that stamp is kept for the process and in :data:`VERIFIED_FILE` for the next.  Any write to a
file -- a flipped bit included, even with its modification time put back -- moves its change
time, which no program can set back; only decay beneath the file system would go unseen,
which is the disk's own checksums' to catch.  A stamp is taken only of a file whose times lie
:data:`RACY_NS` before the hash began (file times tick coarsely: a write in the same tick
as the check would keep them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from anygrain.utils.atomic import atomic_write_text, is_temporary_name
from anygrain.utils.checksums import ALGORITHM, file_table, hash_file

log = logging.getLogger(__name__)

CHECKSUMS_FILE = "checksums.json"
# the stamps of the big files found intact (advisory: lost or unreadable, they are hashed)
VERIFIED_FILE = "verified.json"
FORMAT = "anygrain.graph-checksums"
FORMAT_VERSION = 1
# files an entry holds besides what its checksums record
NOT_RECORDED = (CHECKSUMS_FILE, VERIFIED_FILE)
# files up to this size are hashed at every open (a few milliseconds at most)
ALWAYS_HASHED = 4 << 20
# a stamp is trusted only for times this much older than the check that took it
RACY_NS = 2_000_000_000

# path -> stamp of the big files this process found intact
_STAMPS: dict[str, list[Any]] = {}
# the damage already reported by this process: one warning line each
_REPORTED: set[str] = set()


def write_checksums(directory: Path) -> None:
    """Record the size and digest of every file of the entry being made at ``directory``."""
    table = file_table(directory, exclude=NOT_RECORDED)
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, "files": table}
    (directory / CHECKSUMS_FILE).write_text(json.dumps(record, indent=1) + "\n")


def _recorded(directory: Path, required: tuple[str, ...]) -> dict[str, dict[str, Any]] | str:
    """The entry's checksum table, or why there is none to trust."""
    f = directory / CHECKSUMS_FILE
    if not f.is_file():
        return f"{directory}: no checksums (made by an earlier anygrain)"
    try:
        record = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"{f}: unreadable checksums ({type(e).__name__})"
    files = record.get("files") if isinstance(record, dict) else None
    ok = (
        isinstance(record, dict)
        and record.get("format") == FORMAT
        and record.get("format_version") == FORMAT_VERSION
        and isinstance(files, dict)
        and all(
            isinstance(v, dict)
            and isinstance(v.get("size"), int)
            and isinstance(v.get(ALGORITHM), str)
            for v in files.values()
        )
    )
    if not ok or not isinstance(files, dict):
        return f"{f}: not a graph checksum record"
    missing = [n for n in required if n not in files]
    if missing:
        return f"{f}: records no {missing[0]}"
    return files


def _stamp(st: os.stat_result, digest: str) -> list[Any]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest]


def _read_stamps(directory: Path) -> dict[str, Any]:
    try:
        stamps = json.loads((directory / VERIFIED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def entry_problem(directory: Path, required: tuple[str, ...] = ()) -> str | None:
    """Why the cache entry at ``directory`` must not be used (one line naming the file), or
    None when every file it recorded is there, of its size and digest.  ``required``: files
    the record must hold."""
    directory = Path(directory)
    files = _recorded(directory, required)
    if isinstance(files, str):
        return files
    stamps = _read_stamps(directory)
    learnt = False
    for rel, want in files.items():
        why, stamp = _file_problem(directory / rel, want, stamps.get(rel))
        if why is not None:
            return why
        if stamp is not None:
            stamps[rel] = stamp
            learnt = True
    if learnt:
        # a read-only cache is hashed at each process's first open instead
        with contextlib.suppress(OSError):
            atomic_write_text(directory / VERIFIED_FILE, json.dumps(stamps))
    return None


def _file_problem(
    p: Path, want: dict[str, Any], stamped: Any
) -> tuple[str | None, list[Any] | None]:
    """``(why p differs from want, None)``, or ``(None, a stamp newly learnt for it)``."""
    try:
        st = p.stat()
    except OSError:
        return f"{p}: missing", None
    if st.st_size != want["size"]:
        return (
            f"{p}: {st.st_size} bytes, not the {want['size']} it was made with "
            "(truncated or overwritten)"
        ), None
    big = st.st_size > ALWAYS_HASHED
    if big and _stamp(st, want[ALGORITHM]) in (stamped, _STAMPS.get(str(p))):
        return None, None
    began = time.time_ns()
    try:
        digest = hash_file(p)
    except OSError as e:
        return f"{p}: unreadable ({e.strerror or e})", None
    if digest != want[ALGORITHM]:
        return f"{p}: damaged (its checksum differs from the one recorded when it was made)", None
    if not big or max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS >= began:
        return None, None
    try:
        unchanged = _stamp(p.stat(), digest) == _stamp(st, digest)
    except OSError:
        unchanged = False
    if not unchanged:  # written while it was hashed: hashed again next time
        return None, None
    _STAMPS[str(p)] = _stamp(st, digest)
    return None, _stamp(st, digest)


def report(why: str) -> None:
    """Warn, once a process, that a damaged entry is not used and is made again."""
    if why in _REPORTED:
        return
    _REPORTED.add(why)
    log.warning("%s; this cached ONNX graph is not used, it is made again", why)


def forget(directory: Path) -> None:
    """Forget what was reported of the entry at ``directory``, made again: damaged again
    later (a long-running server), it is reported again."""
    prefix = f"{directory}/"
    _REPORTED.difference_update({w for w in _REPORTED if w.startswith((prefix, f"{directory}:"))})


def is_entry_file(name: str) -> bool:
    """Whether ``name`` (a file of an entry) belongs to the graph: not a checksum record,
    nor a writer's temporary file."""
    return name not in NOT_RECORDED and not is_temporary_name(name)
