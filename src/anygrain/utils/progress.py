"""Progress bars: one place decides how long work reports itself.

tqdm is imported when a bar is made, not with this module: the modules that report progress
are imported by ``anygrain --help`` and by a search, which draw none."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


#: seconds between a bar's lines when stderr is not a terminal (a log file)
PLAIN_INTERVAL = 30.0


class _Lines:
    """A bar's stream for a log: each refresh a line of its own, never a carriage return."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, s: str) -> None:
        line = s.replace("\r", "").strip()
        if line:
            self.out.write(line + "\n")

    def flush(self) -> None:
        self.out.flush()


def _where(kw: dict[str, Any]) -> dict[str, Any]:
    """Where and how often a bar draws: on a terminal, refreshed in place; otherwise (stderr
    redirected to a file) plain lines every ``PLAIN_INTERVAL`` seconds and at the end."""
    import sys

    err = sys.stderr
    if "file" in kw or err is None or (hasattr(err, "isatty") and err.isatty()):
        return {"dynamic_ncols": True, **kw}
    return {
        "file": _Lines(err),
        "mininterval": PLAIN_INTERVAL,
        "maxinterval": PLAIN_INTERVAL,
        "ascii": True,
        "ncols": 100,
        **kw,
    }


def progress_bar(
    items: Iterable[T],
    *,
    desc: str,
    unit: str = "it",
    total: int | None = None,
    disable: bool = False,
    **kw: Any,
) -> Iterator[T]:
    """tqdm on stderr; disabled for quiet runs and when callers ask."""
    from tqdm.auto import tqdm

    return iter(tqdm(items, desc=desc, unit=unit, total=total, disable=disable, **_where(kw)))


def progress_counter(
    *, desc: str, unit: str = "it", total: int | None = None, disable: bool = False, **kw: Any
) -> Any:
    """A tqdm bar on stderr to advance by hand (``bar.update(n)``; a context manager), for
    work whose items finish out of the order it is done in (passages of length-sorted
    batches); disabled for quiet runs and when callers ask."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=disable, **_where(kw))
