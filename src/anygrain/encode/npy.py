"""``.npy`` files of an encode: shard arrays joined into one memory-mappable file."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from anygrain.utils.atomic import atomic_path


def drop_pages(arr: np.ndarray) -> None:
    """Drop the pages of the file ``arr`` maps from this process's resident set.

    A file read (or written) through a memory map stays resident in the process as far as
    it was touched, so streaming a dump through a map shows the whole dump resident although the
    pages are the kernel's to evict.  After each chunk a build drops them
    (``MADV_DONTNEED``: the data stays in the page cache and in the file; written pages
    must be flushed first, which this does).  No-op for an array that maps no file."""
    m = getattr(arr, "_mmap", None)
    if m is None:
        return
    if isinstance(arr, np.memmap) and arr.mode in ("r+", "w+"):
        arr.flush()
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no madvise: no harm
        m.madvise(mmap.MADV_DONTNEED)


def concatenate_npy(
    sources: Sequence[Path], dest: Path, *, dtype: DTypeLike, row_shape: tuple[int, ...]
) -> int:
    """Write ``sources`` one after another along the first axis into ``dest`` (atomically),
    streaming through memory maps so no more than one shard is ever read at once.
    ``row_shape`` is the shape of one row (it gives the shape of an empty result).
    Returns the number of rows."""
    total = sum(len(np.load(s, mmap_mode="r")) for s in sources)
    with atomic_path(dest) as tmp:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(total, *row_shape))
        pos = 0
        for s in sources:
            a = np.load(s, mmap_mode="r")
            mm[pos : pos + len(a)] = a
            pos += len(a)
            drop_pages(mm)  # written pages would stay resident: a dump's size of RSS
            del a
        mm.flush()
        del mm
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    return total
