"""Giving freed heap memory back to the system."""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import mmap
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


# madvise advice: reclaim these pages now (Linux >= 5.4). Clean file pages are dropped and
# read again on the next touch; dirty ones stay (nothing is lost, whatever the mapping).
_MADV_PAGEOUT = 21
MIN_RELEASE = 1 << 20  # buffers smaller than this are left alone (a bias, a norm)


def file_mappings() -> list[tuple[int, int]]:
    """``(start, end)`` of this process's file-backed mappings (empty off Linux)."""
    try:
        lines = open("/proc/self/maps", encoding="utf-8").read().splitlines()  # noqa: SIM115
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(maxsplit=5)
        # the sixth field is the mapped file; anonymous and special ([heap]...) maps have none
        if len(fields) == 6 and fields[5].startswith("/"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            out.append((start, end))
    return out


def release_mapped(
    buffers: list[tuple[int, int]], maps: list[tuple[int, int]] | None = None
) -> int:
    """Give back the resident pages of ``(address, size)`` buffers that are mapped from a
    file; returns the bytes advised.

    Hugging Face loads safetensors weights by mapping the file, and hashing them once to
    check a fingerprint makes every page resident: for a multilingual token-embedding table
    that is most of the model, of which a Chinese corpus touches a few percent.  After the check the
    pages can go; those a model uses come back from the file (the page cache) on demand."""
    libc = _libc()
    madvise = getattr(libc, "madvise", None) if libc is not None else None
    if maps is None:
        maps = file_mappings() if madvise is not None else []
    if madvise is None or not maps:
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    spans = sorted(maps)  # mappings never overlap: sorted by start, they are by end too
    starts = [start for start, _ in spans]
    page = mmap.PAGESIZE
    done = 0
    for addr, size in buffers:
        if size < MIN_RELEASE:
            continue  # not worth a system call
        j = bisect.bisect_left(starts, addr + size) - 1  # the last mapping starting inside
        while j >= 0 and spans[j][1] > addr:
            start, end = spans[j]
            lo, hi = max(addr, start), min(addr + size, end)
            lo, hi = lo - lo % page, hi - hi % page  # whole pages inside the mapping
            if hi > lo and madvise(lo, hi - lo, _MADV_PAGEOUT) == 0:
                done += hi - lo
            j -= 1
    return done
