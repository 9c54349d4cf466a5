"""A sharded phrase index searched as one (:mod:`anygrain.composite.sharded` opens it).

Both MIPS sides sit under one threaded ``faiss.IndexShards`` each (successive ids), as a
sharded dense index's do.  Span scoring reads one token table concatenated from the
shards' (the vectors stay memory-mapped in each shard), so rounds, units, scopes and
``score_rows`` are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.index.shard_view import ShardView
from anygrain.phrase.build import SUBDIR
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.search import PhraseTable
from anygrain.vectors.faiss_index import shard_faiss


class ConcatRows:
    """Row-indexed vectors of several shards read as one array (``rows[token_indices]``),
    each part from its own memory map (or FAISS codes)."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)
        self.starts = np.cumsum([0, *(len(p) for p in self.parts)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), int(self.parts[0].shape[1]))
        self.dtype = np.dtype(self.parts[0].dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx: Any) -> np.ndarray:
        if isinstance(idx, slice):
            idx = np.arange(self.shape[0])[idx]
        tok = np.asarray(idx, dtype=np.int64)
        flat = np.atleast_1d(tok)
        out = np.empty((len(flat), self.shape[1]), dtype=self.dtype)
        which = np.searchsorted(self.starts, flat, side="right") - 1
        for i in np.unique(which).tolist():
            sel = which == i
            out[sel] = self.parts[i][flat[sel] - self.starts[i]]
        return out[0] if tok.ndim == 0 else out


class ShardedPhrase(ShardView, PhraseIndex):
    """A phrase index over shards: ``IndexShards`` for both MIPS sides, one token table."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        shards: list[PhraseIndex],
        bounds: list[tuple[int, int]],
    ) -> None:
        tokens, ptrs, sids, eids = [], [], [], []
        off = 0
        for s, (a, _) in zip(shards, bounds, strict=True):
            # metadata is held in memory anyway (PhraseTable); global rows and token indices
            t = np.load(s.path / SUBDIR / "tokens.npy").astype(np.int64)
            t[:, 0] += a
            tokens.append(t)
            ptrs.append(s.table.passage_ptr[:-1] + off)
            sids.append(s.start_ids.astype(np.int64) + off)
            eids.append(s.end_ids.astype(np.int64) + off)
            off += len(s.table)
        table = PhraseTable(
            ConcatRows([s.table.start for s in shards]),  # type: ignore[arg-type]
            ConcatRows([s.table.end for s in shards]),  # type: ignore[arg-type]
            np.concatenate(tokens),
            np.concatenate([*ptrs, np.array([off], dtype=np.int64)]),
        )
        super().__init__(
            path,
            manifest,
            store,
            shards[0].model,
            table,
            shard_faiss([s.start_index for s in shards]),
            shard_faiss([s.end_index for s in shards]),
            np.concatenate(sids),
            np.concatenate(eids),
        )
        self.shards, self.bounds = shards, bounds

    @property
    def exact_mips(self) -> bool:
        # IndexShards merges exhaustive scans exactly, so the bound holds when it holds per shard
        return all(s.exact_mips for s in self.shards)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shards": self.shard_info()}
