"""Atomic file and directory writes: write to a temporary name, then rename.

A crash leaves either the old artefact or the new one, never half of one.
Temporary names carry the writer's pid (``.NAME.pidPID.XXXX.tmp``), so a later run
can tell the leftovers of a killed writer from those of one still running and
remove them (:func:`remove_stale`) instead of letting them pile up.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from anygrain.errors import AnygrainError

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path for a file; rename it onto ``path`` on success."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (one we may not signal counts too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_pattern(name: str) -> re.Pattern[str]:
    # .NAME.pidPID.XXXX.tmp (atomic_dir), .NAME.PID.tmp (atomic_path and shard writers),
    # .NAME.PID.XXXX.tmp (atomic_write_bytes), .NAME.old.PID (the replaced directory)
    n = re.escape(name)
    return re.compile(
        rf"\.{n}\.(?:pid(?P<a>\d+)\.[A-Za-z0-9_]+\.tmp|(?P<b>\d+)(?:\.[A-Za-z0-9_]+)?\.tmp|old\.(?P<old>\d+))"
    )


_ANY_TEMPORARY = re.compile(
    r"\..+\.(?:pid\d+\.[A-Za-z0-9_]+\.tmp|\d+(?:\.[A-Za-z0-9_]+)?\.tmp|old\.\d+)"
)


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is one this module (or a shard writer) gives a temporary file or
    directory, whatever its target: such a name is a writer's, never a user's."""
    return _ANY_TEMPORARY.fullmatch(name) is not None


def remove_stale(target: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed writers of ``target`` left beside it; return what was removed.

    Only names this module (or a shard writer) makes for ``target`` are touched, and
    only when the pid in the name is not running.  A replaced directory (``.old``)
    whose target is missing was being swapped out when its writer died: it is put
    back rather than removed, since it is the last complete version.
    """
    p = Path(target)
    if not p.parent.is_dir():
        return []
    pat = _stale_pattern(p.name)
    removed = []
    for entry in sorted(p.parent.iterdir()):
        m = pat.fullmatch(entry.name)
        if m is None:
            continue
        pid = int(m.group("a") or m.group("b") or m.group("old"))
        if pid_alive(pid):
            continue
        if m.group("old") and not p.exists():
            os.replace(entry, p)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def remove_stale_files(directory: str | os.PathLike[str]) -> None:
    """Remove killed writers' temporary files (``.NAME.PID.tmp``) inside ``directory``."""
    d = Path(directory)
    if not d.is_dir():
        return
    for entry in d.iterdir():
        m = re.fullmatch(r"\.(.+)\.(\d+)\.tmp", entry.name)
        if m and entry.is_file() and not pid_alive(int(m.group(2))):
            entry.unlink(missing_ok=True)


def no_space(e: BaseException) -> bool:
    """Whether ``e`` says the disk (or quota) is full; FAISS and Arrow only say so in words."""
    if isinstance(e, OSError) and e.errno in _NO_SPACE:
        return True
    return isinstance(e, OSError | RuntimeError) and "No space left on device" in str(e)


@contextmanager
def atomic_dir(path: str | os.PathLike[str], *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling directory; swap it into place on success.

    Leftovers of killed earlier writers of ``path`` are removed first.  A full disk
    becomes an :class:`AnygrainError`; either way the temporary directory goes.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(p)
    tmp = Path(tempfile.mkdtemp(dir=p.parent, prefix=f".{p.name}.pid{os.getpid()}.", suffix=".tmp"))
    try:
        try:
            yield tmp
        except (OSError, RuntimeError) as e:
            if no_space(e):
                raise AnygrainError(
                    f"{p}: no space left on device while writing it; nothing was written "
                    "(free some space and rerun)"
                ) from e
            raise
        if p.exists():
            if not overwrite:
                raise FileExistsError(p)
            old = p.with_name(f".{p.name}.old.{os.getpid()}")
            os.replace(p, old)
            os.replace(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, p)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
