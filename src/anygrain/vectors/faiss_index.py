"""The FAISS index the kinds build, open and search: scored by inner product.

Which factory and training an index gets is :mod:`anygrain.vectors.factory`'s; how it is
kept on disk (memory-mapped, or in blocks) is :mod:`anygrain.vectors.disk`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from anygrain.errors import AnygrainError
from anygrain.utils.memory import trim_heap
from anygrain.vectors.adding import add_vectors
from anygrain.vectors.disk import (
    faiss_message,
    read_index,
    stack_blocks,
    write_blocks,
    write_index,
)
from anygrain.vectors.factory import MIN_POINTS_PER_CENTROID, default_nprobe, plan_training
from anygrain.vectors.sources import ArrayVectors, RangeVectorSource, VectorSource

DEFAULT_EF_SEARCH = 64
_HNSWParams: Any = getattr(faiss, "SearchParametersHNSW")  # noqa: B009  (missing from faiss's stubs)


def unwrap_index(index: faiss.Index) -> faiss.Index:
    """The index under pre-transforms (OPQ, PCA) and id maps."""
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform | faiss.IndexIDMap):
        index = faiss.downcast_index(index.index)
    return index


def _quiet_kmeans(index: faiss.Index) -> None:
    """We already warned once about a small training set; stop FAISS repeating it per sub-quantizer."""
    base = unwrap_index(index)
    cps = []
    if isinstance(base, faiss.IndexIVF):
        cps.append(base.cp)
    pq = getattr(base, "pq", None)
    if pq is not None:
        cps.append(pq.cp)
    for cp in cps:
        cp.min_points_per_centroid = 1


class FaissIndex:
    """A FAISS index plus what search needs to know about it (IVF? HNSW?), found once."""

    def __init__(self, index: faiss.Index, factory: str = "") -> None:
        self.index = index
        self.factory = factory
        self._d = int(index.d)  # cached: SWIG attribute reads cost more than the check itself
        base = unwrap_index(index)
        self.ivf: faiss.IndexIVF | None = base if isinstance(base, faiss.IndexIVF) else None
        self.hnsw: faiss.IndexHNSW | None = base if isinstance(base, faiss.IndexHNSW) else None
        q = faiss.downcast_index(self.ivf.quantizer) if self.ivf is not None else None
        self.hnsw_quantizer: faiss.IndexHNSW | None = q if isinstance(q, faiss.IndexHNSW) else None
        self._parts: list[faiss.Index] = []  # the blocks of a blocked index (load(blocks=))

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def nprobe(self) -> int | None:
        return int(self.ivf.nprobe) if self.ivf is not None else None

    @property
    def ef_search(self) -> int | None:
        h = self.hnsw or self.hnsw_quantizer
        return int(h.hnsw.efSearch) if h is not None else None

    # --- building --------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        vectors: VectorSource | np.ndarray,
        factory: str | None = None,
        *,
        train_size: int | None = None,
        seed: int = 0,
        add_batch: int = 65536,
        nprobe: int | None = None,
        ef_search: int | None = None,
        progress: bool = False,
    ) -> FaissIndex:
        """Train on a sample of ``vectors`` (see :func:`~anygrain.vectors.factory.plan_training`)
        and add them all in batches, so memory stays bounded by the sample and one batch
        (and the index)."""
        src: VectorSource = ArrayVectors(vectors) if isinstance(vectors, np.ndarray) else vectors
        index, spec = cls._trained(src, factory, train_size, seed)
        add_vectors(index, src, 0, len(src), add_batch, progress)
        return cls._ready(index, spec, nprobe, ef_search)

    @classmethod
    def build_blocks(
        cls,
        vectors: RangeVectorSource,
        path: str | Path,
        factory: str,
        *,
        block_bytes: int,
        train_size: int | None = None,
        seed: int = 0,
        add_batch: int = 65536,
        progress: bool = False,
    ) -> int:
        """Build an IVF index at ``path`` whose codes never are all in memory at once.

        The trained, empty index is written at ``path`` and the vectors are added in blocks
        of at most ``block_bytes`` of codes and ids (:func:`~anygrain.vectors.disk.write_blocks`).
        :meth:`load` with ``blocks`` stacks them under the trained index: the same search
        results as one index holding every vector.  Returns the number of blocks."""
        index, spec = cls._trained(vectors, factory, train_size, seed)
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = default_nprobe(ivf.nlist)  # saved with the index, as build() does
        per_block = max(1, block_bytes // (int(ivf.code_size) + 8))  # codes + int64 id
        return write_blocks(index, vectors, path, per_block, add_batch, progress)

    @classmethod
    def _trained(
        cls, src: VectorSource, factory: str | None, train_size: int | None, seed: int
    ) -> tuple[faiss.Index, str]:
        """The empty index of ``factory``, trained on a sample of ``src``."""
        spec, info, train_size = plan_training(len(src), src.dim, factory, train_size)
        dim = src.dim
        try:
            index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise AnygrainError(
                f"FAISS cannot build factory {spec!r}: {faiss_message(e)}"
            ) from None
        base: Any = unwrap_index(index)
        if getattr(base, "do_polysemous_training", False):
            # Polysemous codes only help with polysemous_ht search, which anygrain never sets;
            # their training takes tens of seconds.
            base.do_polysemous_training = False
        if not index.is_trained:
            if train_size < info.recommended_train:
                warnings.warn(
                    f"training FAISS {spec!r} on {train_size} vectors; it recommends at least "
                    f"{info.recommended_train} ({MIN_POINTS_PER_CENTROID} per centroid), so recall may suffer",
                    stacklevel=2,
                )
                _quiet_kmeans(index)
            # what an earlier index freed (the other side's blocks) back first: the sample
            # and its residuals are the training's peak
            trim_heap()
            index.train(src.sample(train_size, seed=seed))
            trim_heap()  # the sample is freed: its pages back before the codes are added
        return index, spec

    @classmethod
    def _ready(
        cls, index: faiss.Index, spec: str, nprobe: int | None, ef_search: int | None
    ) -> FaissIndex:
        out = cls(index, spec)
        if out.ivf is not None:
            out.ivf.nprobe = nprobe or default_nprobe(out.ivf.nlist)
        for h in (out.hnsw, out.hnsw_quantizer):
            if h is not None:
                h.hnsw.efSearch = ef_search or DEFAULT_EF_SEARCH
        return out

    def save(self, path: str | Path) -> None:
        """Written under a temporary name, then renamed (never half an index)."""
        write_index(self.index, path)

    @classmethod
    def load(
        cls, path: str | Path, *, factory: str = "", mmap: bool = True, blocks: int = 0
    ) -> FaissIndex:
        """Read an index, memory-mapped where the index type allows it
        (:func:`~anygrain.vectors.disk.read_index`); ``blocks``: the number of blocks
        :meth:`build_blocks` wrote beside it."""
        if not blocks:
            return cls(read_index(path, mmap=mmap), factory)
        index, parts = stack_blocks(Path(path), blocks)
        out = cls(index, factory)
        out._parts = parts  # the stacked lists point into the blocks: keep them alive
        return out

    # --- search ----------------------------------------------------------------------
    def params(
        self, *, nprobe: int | None = None, ef_search: int | None = None
    ) -> faiss.SearchParameters | None:
        """Per-call search parameters; the index itself is left untouched (thread-safe)."""
        if nprobe is None and ef_search is None:
            return None
        name = self.factory or type(unwrap_index(self.index)).__name__
        if nprobe is not None and self.ivf is None:
            raise AnygrainError(f"nprobe applies to IVF indexes; this index is {name!r}")
        if ef_search is not None and self.hnsw is None and self.hnsw_quantizer is None:
            raise AnygrainError(f"ef_search applies to HNSW indexes; this index is {name!r}")
        if self.ivf is not None:
            p = faiss.SearchParametersIVF()
            p.nprobe = int(nprobe) if nprobe is not None else int(self.ivf.nprobe)
            if ef_search is not None:
                qp = _HNSWParams()
                qp.efSearch = int(ef_search)
                p.quantizer_params = qp
                p._keep = qp  # type: ignore[attr-defined]  # C++ does not own it: keep it alive
            return p
        hp = _HNSWParams()
        hp.efSearch = int(ef_search)  # type: ignore[arg-type]
        return hp

    def search(
        self, q: np.ndarray, k: int, *, nprobe: int | None = None, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of shape (n, k), best first; rows are -1 past the last match."""
        if q.dtype != np.float32 or not q.flags.c_contiguous:
            q = np.ascontiguousarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self._d:
            raise AnygrainError(f"query vectors have shape {q.shape}, expected (n, {self._d})")
        if nprobe is None and ef_search is None and k > 0:
            scores, rows = self.index.search(q, k)  # the common case: nothing between us and FAISS
            return rows, scores
        if k <= 0 or len(q) == 0:
            return np.zeros((len(q), max(k, 0)), dtype=np.int64), np.zeros(
                (len(q), max(k, 0)), dtype=np.float32
            )
        p = self.params(nprobe=nprobe, ef_search=ef_search)
        scores, rows = self.index.search(q, k) if p is None else self.index.search(q, k, params=p)
        return rows, scores


def shard_faiss(parts: Sequence[FaissIndex]) -> FaissIndex:
    """Indexes over successive row ranges (a sharded index's) as one: ``IndexShards``
    searches them in threads and merges their top-k, the ids of part i offset by the
    vectors of the parts before it."""
    # threaded, successive ids (faiss's stubs know only the one-argument constructor)
    combined = faiss.IndexShards(parts[0].dim, True, True)  # type: ignore[call-arg]
    for p in parts:
        combined.add_shard(p.index)  # the Python wrapper keeps a reference to each shard
    fx = FaissIndex(combined, parts[0].factory)
    # nprobe/efSearch parameters pass through IndexShards to each shard, which share a
    # factory: let FaissIndex build them as for the first shard
    fx.ivf, fx.hnsw, fx.hnsw_quantizer = parts[0].ivf, parts[0].hnsw, parts[0].hnsw_quantizer
    return fx
