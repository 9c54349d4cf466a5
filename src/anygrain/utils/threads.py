"""How many CPU threads torch and FAISS use: one setting for index, search and eval.

The library never reads ``OMP_NUM_THREADS`` itself; callers pass ``threads`` and
this sets both pools, which otherwise each default to every core (on a CPU shared
with other jobs their spin-waiting slows everyone down).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from anygrain.errors import AnygrainError

_requested: int | None = None


def set_threads(n: int | None) -> None:
    """Use ``n`` intra-op threads in torch and FAISS (and in ONNX Runtime sessions made
    after); ``None`` leaves their defaults.  torch is not imported for it: a search on
    ONNX Runtime never loads it, and a model loaded later (:func:`follow_threads`, called
    by every model load) takes the setting then."""
    global _requested
    if n is None:
        return
    if n < 1:
        raise AnygrainError(f"threads must be at least 1, got {n}")
    _requested = n
    follow_threads()
    try:
        import faiss
    except ImportError:  # training alone needs no FAISS (e.g. on a GPU machine)
        return
    faiss.omp_set_num_threads(n)


def requested_threads() -> int | None:
    """The count :func:`set_threads` was last given (None: never called)."""
    return _requested


def follow_threads() -> None:
    """Give torch, when it is imported, the count :func:`set_threads` was given."""
    torch = sys.modules.get("torch")
    if _requested is not None and torch is not None:
        torch.set_num_threads(_requested)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch single-threaded inside the block, then restore its thread count.

    Span scoring is many small operations (a few thousand vectors each); with two
    or more intra-op threads each one pays for waking the pool -- on a loaded CPU
    many times the operation itself.
    """
    torch = sys.modules.get("torch")
    if torch is None:  # nothing runs on torch (queries encoded by ONNX Runtime)
        yield
        return
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
