"""What an index build reads its vectors from: a size, a dimension, a sample and batches."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from anygrain.encode.npy import drop_pages


class VectorSource(Protocol):
    """What :meth:`~anygrain.vectors.faiss_index.FaissIndex.build` reads: a
    :class:`~anygrain.dense.shards.ShardSet` fits, as does a phrase dump's side."""

    def __len__(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray: ...

    def iter_batches(self, batch_size: int = 65536) -> Any: ...


class RangeVectorSource(VectorSource, Protocol):
    """A :class:`VectorSource` that also reads a range: what a blocked build needs."""

    def iter_batches(
        self, batch_size: int = 65536, *, start: int = 0, stop: int | None = None
    ) -> Any:
        """``(position, batch)`` pairs over vectors ``start:stop``."""
        ...


class ArrayVectors:
    """An in-memory array seen as a :class:`VectorSource` (tests, small corpora)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.x)

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray:
        if n >= len(self.x):
            return self.x
        return self.x[
            np.sort(np.random.default_rng(seed).choice(len(self.x), size=n, replace=False))
        ]

    def iter_batches(
        self, batch_size: int = 65536, *, start: int = 0, stop: int | None = None
    ) -> Any:
        end = len(self.x) if stop is None else min(stop, len(self.x))
        for i in range(start, end, batch_size):
            yield i, self.x[i : min(i + batch_size, end)]


#: rows of a file read between two drops of its mapped pages
SPAN = 65536


class StoredVectors:
    """Rows ``ids`` of a memory-mapped array (a phrase dump's side) as a
    :class:`VectorSource`, read so that its mapped pages are dropped as it goes."""

    def __init__(self, arr: np.ndarray, ids: np.ndarray) -> None:
        self.arr = arr
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.arr.shape[1])

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray:
        if n >= len(self.ids):
            pick = self.ids
        else:
            rng = np.random.default_rng(seed)
            pick = self.ids[np.sort(rng.choice(len(self.ids), size=n, replace=False))]
        out = np.empty((len(pick), self.dim), dtype=np.float32)
        # Read by ranges of the file, dropping each range's pages: a sample is spread over
        # the whole file, and the kernel maps the pages around every row read, so reading
        # it by count of rows would map most of the file at once.
        bounds = np.searchsorted(pick, np.arange(0, len(self.arr) + SPAN, SPAN))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                out[lo:hi] = self.arr[pick[lo:hi]]
                drop_pages(self.arr)
        return out

    def iter_batches(
        self, batch_size: int = 65536, *, start: int = 0, stop: int | None = None
    ) -> Any:
        end = len(self.ids) if stop is None else min(stop, len(self.ids))
        for i in range(start, end, batch_size):
            rows = self.ids[i : min(i + batch_size, end)]
            batch = np.asarray(self.arr[rows], dtype=np.float32)
            drop_pages(self.arr)
            yield i, batch
