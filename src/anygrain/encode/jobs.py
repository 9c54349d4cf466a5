"""Shards of an encode: the row ranges a corpus is cut into, and what a finished one left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anygrain.errors import AnygrainError


@dataclass(frozen=True)
class ShardJob:
    """Shard ``index`` of ``n_shards``: rows ``[start, end)`` of the corpus."""

    index: int
    start: int
    end: int
    n_shards: int

    @property
    def rows(self) -> range:
        return range(self.start, self.end)

    @property
    def n(self) -> int:
        return self.end - self.start


def plan_shards(n_rows: int, shard_size: int) -> list[ShardJob]:
    """Consecutive shards of ``shard_size`` rows (the last may be shorter) covering ``n_rows``."""
    if shard_size <= 0:
        raise AnygrainError(f"shard_size must be positive, not {shard_size}")
    starts = range(0, n_rows, shard_size)
    return [ShardJob(i, s, min(s + shard_size, n_rows), len(starts)) for i, s in enumerate(starts)]


@dataclass(frozen=True)
class ShardRecord:
    """A finished shard: its files with their sizes (None where the manifest keeps none)
    and what its encoder reported (token counts, say), as the manifest records them."""

    job: ShardJob
    sizes: dict[str, int | None]
    info: dict[str, Any] = field(default_factory=dict)
