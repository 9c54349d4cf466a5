"""What an index build reads its vectors from: a size, a dimension, a sample and batches."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


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
