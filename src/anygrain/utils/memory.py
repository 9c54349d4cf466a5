"""Giving freed heap memory back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def trim_heap() -> None:
    """Return freed heap pages to the system (glibc's ``malloc_trim``; a no-op elsewhere).

    glibc keeps the memory of freed large tensors and arrays in its arenas, so a long build
    that encodes shard after shard shows the high-water mark of every shard as resident
    memory; trimming after each shard keeps the peak to one shard's."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
