"""Fusing two ranked lists (BM25 and dense, as in DPR's hybrid).

DPR reranks the union of each system's top n by ``BM25 + lambda * sim``.  The two
scores live on different scales (BM25 is unbounded, cosine is in [-1, 1]), so
raw addition lets BM25 dominate; anygrain therefore normalises each system's
scores per query over the candidate union before adding them:

- ``zscore`` (default): (s - mean) / std over the union, lambda = 1.0.
- ``minmax``: (s - min) / (max - min) over the union.
- ``raw``: the DPR paper's formula, lambda = 1.1.
- ``rrf``: reciprocal-rank fusion, sum of 1 / (60 + rank) over the systems' own lists.

Both systems score every candidate exactly (a passage only one system retrieved
still gets the other's true score), so no guessed fill-in values enter the sum.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anygrain.utils.ranges import Range

if TYPE_CHECKING:
    import numpy as np

# numpy is imported by the functions that fuse, not with the module: FusionMethod is an
# option of ``anygrain --help`` and of a BM25 search, which fuse nothing


class FusionMethod(str, enum.Enum):
    ZSCORE = "zscore"
    MINMAX = "minmax"
    RAW = "raw"
    RRF = "rrf"


DEFAULT_WEIGHT = {
    FusionMethod.ZSCORE: 1.0,
    FusionMethod.MINMAX: 1.0,
    FusionMethod.RAW: 1.1,
    FusionMethod.RRF: 1.0,
}
RRF_K = 60
#: the dense side's weight; bounded so a fused score stays finite in float32
WEIGHT_RANGE = Range("fusion weight", 0.0, 1000.0)
#: candidates taken from each system
DEPTH_RANGE = Range("fusion depth", 1, 100_000, integer=True)


@dataclass(frozen=True)
class FusionConfig:
    method: FusionMethod = FusionMethod.ZSCORE
    weight: float | None = None  # lambda on the dense side; None = the method's default
    depth: int = 100  # candidates taken from each system

    def __post_init__(self) -> None:
        # checked wherever a config is made: a build, index.json on open, a search's override
        if self.weight is not None:
            WEIGHT_RANGE.check(self.weight)
        DEPTH_RANGE.check(self.depth)

    @property
    def dense_weight(self) -> float:
        return DEFAULT_WEIGHT[self.method] if self.weight is None else self.weight


def union_candidates(a_rows: np.ndarray, b_rows: np.ndarray) -> np.ndarray:
    """Per query, the union of both lists' rows (valid rows first, -1 padding), shape (n, <=2*depth)."""
    import numpy as np

    n = a_rows.shape[0]
    unions = [np.unique(np.concatenate([a_rows[i], b_rows[i]])) for i in range(n)]
    unions = [u[u >= 0] for u in unions]
    width = max((len(u) for u in unions), default=0)
    out = np.full((n, max(width, 1)), -1, dtype=np.int64)
    for i, u in enumerate(unions):
        out[i, : len(u)] = u
    return out


def _normalise(s: np.ndarray, valid: np.ndarray, method: FusionMethod) -> np.ndarray:
    import numpy as np

    out = np.zeros_like(s, dtype=np.float64)
    for i in range(s.shape[0]):
        v = s[i, valid[i]].astype(np.float64)
        if v.size == 0:
            continue
        if method is FusionMethod.ZSCORE:
            sd = v.std()
            out[i, valid[i]] = (v - v.mean()) / sd if sd > 0 else 0.0
        elif method is FusionMethod.MINMAX:
            rng = v.max() - v.min()
            out[i, valid[i]] = (v - v.min()) / rng if rng > 0 else 0.0
        else:
            out[i, valid[i]] = v
    return out


def fuse_scores(
    cand: np.ndarray, sparse: np.ndarray, dense: np.ndarray, config: FusionConfig, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Combine exact per-candidate scores of both systems; top ``k`` rows and fused scores."""
    import numpy as np

    valid = cand >= 0
    fused = _normalise(sparse, valid, config.method) + config.dense_weight * _normalise(
        dense, valid, config.method
    )
    return _top(cand, np.where(valid, fused, -np.inf), k)


def rrf(
    a_rows: np.ndarray, b_rows: np.ndarray, k: int, weight: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal-rank fusion of two ranked lists (rank 1 = best), b weighted by ``weight``."""
    import numpy as np

    n = a_rows.shape[0]
    cand = union_candidates(a_rows, b_rows)
    scores = np.full(cand.shape, -np.inf)
    for i in range(n):
        acc: dict[int, float] = {}
        for rows, w in ((a_rows[i], 1.0), (b_rows[i], weight)):
            for rank, r in enumerate(rows, start=1):
                if r >= 0:
                    acc[int(r)] = acc.get(int(r), 0.0) + w / (RRF_K + rank)
        for j, r in enumerate(cand[i]):
            if r >= 0:
                scores[i, j] = acc[int(r)]
    return _top(cand, scores, k)


def _top(cand: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    n = cand.shape[0]
    rows = np.full((n, k), -1, dtype=np.int64)
    out = np.zeros((n, k), dtype=np.float32)
    for i in range(n):
        order = np.argsort(-scores[i], kind="stable")[:k]
        order = order[np.isfinite(scores[i][order])]
        rows[i, : len(order)] = cand[i][order]
        out[i, : len(order)] = scores[i][order]
    return rows, out
