"""Progress bars: one place decides how long work reports itself.

tqdm is imported when a bar is made, not with this module: the modules that report progress
are imported by ``anygrain --help`` and by a search, which draw none."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


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

    return iter(
        tqdm(items, desc=desc, unit=unit, total=total, disable=disable, dynamic_ncols=True, **kw)
    )


def progress_counter(
    *, desc: str, unit: str = "it", total: int | None = None, disable: bool = False, **kw: Any
) -> Any:
    """A tqdm bar on stderr to advance by hand (``bar.update(n)``; a context manager), for
    work whose items finish out of the order it is done in (passages of length-sorted
    batches); disabled for quiet runs and when callers ask."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, **kw)
