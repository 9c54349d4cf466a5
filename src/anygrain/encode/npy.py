"""``.npy`` files of an encode: shard arrays joined into one memory-mappable file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from anygrain.utils.atomic import atomic_path


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
        mm.flush()
        del mm
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    return total
