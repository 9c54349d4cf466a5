"""One writer at a time per index: a lock held for the whole of an update.

Every command that changes or replaces an index directory takes :func:`writer_lock` on its
target first: each works on a staged copy and swaps it in, so two at once would both
succeed and the second swap would silently drop the first one's work.  The lock is
``flock`` on ``.NAME.lock`` beside the index (the directory itself is replaced whole),
released by the kernel when its holder dies.  A second writer fails at once, naming the
holder's pid, rather than waiting on an update that may run for hours; readers take none.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from anygrain.errors import AnygrainError
from anygrain.utils.targets import resolved

#: per thread: the lock files this thread holds and how deeply (an update that builds
#: in a place it already holds, such as a build inside an ``--overwrite``, nests)
_held = threading.local()


class IndexBusyError(AnygrainError):
    """Another writer holds the index's lock."""


def lock_path(target: str | os.PathLike[str]) -> Path:
    """The lock file of ``target``: ``.NAME.lock`` beside it (after resolving links, so
    ``idx``, ``./idx`` and a link to it share one lock)."""
    t = resolved(target)  # a link loop: one line naming it
    return t.parent / f".{t.name}.lock"


def _holder(path: Path) -> str:
    """``PID N (operation)`` as the lock file names its holder, or ``another process``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    pid, _, what = text.partition(" ")
    if not pid.isdigit():
        return "another process"
    return f"PID {pid}" + (f" ({what})" if what else "")


def _counts() -> dict[Path, int]:
    if not hasattr(_held, "counts"):
        _held.counts = {}
    counts: dict[Path, int] = _held.counts
    return counts


@contextmanager
def writer_lock(target: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Hold the writer lock of the index at ``target`` (which may not exist yet) for the
    block; ``what`` names the operation for the message another writer gets.  Raises
    :class:`IndexBusyError` at once when another writer holds it (see the module
    docstring for why it does not wait).  Nested use in one thread is allowed."""
    path = lock_path(target)
    counts = _counts()
    if counts.get(path):
        counts[path] += 1
        try:
            yield
        finally:
            counts[path] -= 1
        return
    if not path.parent.is_dir():  # a build into a new tree: nothing to race with there yet
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, Path(target), what)
    counts[path] = 1
    try:
        yield
    finally:
        counts.pop(path, None)
        try:
            path.unlink(missing_ok=True)  # before unlocking: a waiter re-checks the inode
        finally:
            os.close(fd)


def _acquire(path: Path, target: Path, what: str) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise AnygrainError(
                f"{target}: cannot create the lock file {path} ({e.strerror}); an update "
                "needs the directory holding the index to be writable"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise AnygrainError(f"{target}: cannot lock {path} ({e.strerror})") from None
            raise IndexBusyError(
                f"{target}: the index is being updated by {_holder(path)}; nothing was "
                "changed. Run this again when that has finished"
            ) from None
        # the holder before us may have removed the file after we opened it: lock the
        # file at the path, or two writers would each hold a different one
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {what}\n".encode())
            return fd
        os.close(fd)
