"""What every sharded view shares, whatever its kind: its shards and their row ranges, the
threads that search them, and the merge of their top-k.

A sharded index (:mod:`anygrain.composite.sharded`) opens as a view *of its shards' kind*;
each kind keeps its own view beside it (``dense/sharded.py``, ``phrase/sharded.py``,
``sparse/sharded.py``), standing on this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

_POOL: dict[int, ThreadPoolExecutor] = {}


def pool_map(fn: Any, items: Sequence[Any]) -> list[Any]:
    """``fn`` over the shards in parallel threads (their numpy/FAISS work releases the GIL).
    The pool lives as long as the process: starting threads on every query cost more than
    a one-question search."""
    if len(items) == 1:
        return [fn(items[0])]
    n = len(items)
    if n not in _POOL:
        _POOL[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="anygrain-shard")
    return list(_POOL[n].map(fn, items))


def local_rows(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Global ``rows`` as rows of the shard ``[start, stop)``; -1 for rows outside it."""
    r = np.asarray(rows, dtype=np.int64)
    return np.where((r >= start) & (r < stop), r - start, -1)


def merge_top_k(
    rows: Sequence[np.ndarray], scores: Sequence[np.ndarray], offsets: Sequence[int], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The global top-``k`` of per-shard results (local rows, -1 = none; shape (n, k_i)).

    Best score first; equal scores by global row, so the merge does not depend on the order
    the shards answered in.  Rows are -1 (score 0) past the last hit.
    """
    n = len(rows[0]) if rows else 0
    if not rows or k <= 0:
        return np.full((n, max(k, 0)), -1, np.int64), np.zeros((n, max(k, 0)), np.float32)
    r = np.concatenate(
        [
            np.where(x >= 0, x.astype(np.int64) + off, -1)
            for x, off in zip(rows, offsets, strict=True)
        ],
        axis=1,
    )
    s = np.concatenate([np.asarray(x, dtype=np.float32) for x in scores], axis=1)
    valid = r >= 0
    # lexsort's last key is the primary one: score descending, then row ascending
    order = np.lexsort((np.where(valid, r, np.iinfo(np.int64).max), np.where(valid, -s, np.inf)))
    order = order[:, :k]
    out_r = np.take_along_axis(r, order, axis=1)
    out_s = np.where(out_r >= 0, np.take_along_axis(s, order, axis=1), 0).astype(np.float32)
    if out_r.shape[1] < k:  # fewer candidates than k in all shards together
        pad = k - out_r.shape[1]
        out_r = np.pad(out_r, ((0, 0), (0, pad)), constant_values=-1)
        out_s = np.pad(out_s, ((0, 0), (0, pad)))
    return out_r, out_s


class ShardView:
    """What every sharded view keeps: the shard indexes and their row ranges (mixed in
    before the kind's index class)."""

    shards: list[Any]
    bounds: list[tuple[int, int]]

    def shard_info(self) -> list[dict[str, Any]]:
        return [
            {"path": str(s.path), "rows": [a, b]}
            for s, (a, b) in zip(self.shards, self.bounds, strict=True)
        ]

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "shards": len(self.shards)}  # type: ignore[misc]

    def summed_over_shards(self, score: Any, rows: np.ndarray) -> np.ndarray:
        """``score(shard, local_rows)`` of every shard, summed: each row lives in one shard,
        and the others score it 0 (their -1)."""
        parts = pool_map(
            lambda sb: score(sb[0], local_rows(rows, *sb[1])),
            list(zip(self.shards, self.bounds, strict=True)),
        )
        return np.asarray(np.sum(parts, axis=0), dtype=np.float32)
