"""Compressed phrase indexes: the MIPS indexes hold quantized codes, span scoring decodes them.

``--compress`` picks how the start and end FAISS indexes store vectors: ``none`` (float16),
``sq8`` / ``sq4`` (scalar quantization), ``pq`` (``IVF{n},PQ{m}``, ``m`` bytes a vector) or
``opq-pq`` (``pq`` after a learned rotation); large indexes get an IVF layer and tiny ones a
factory FAISS can train (:data:`PHRASE_POLICY`).  Span scoring reads the vectors decoded
from the codes (:class:`DecodedVectors`), the ones the MIPS scores come from, so the
float16 dump is needed only uncompressed; PQ codes only find passages, and exact
re-scoring (:mod:`anygrain.phrase.rescore`) ranks the spans in them.
"""

from __future__ import annotations

import math
from typing import Any

import faiss
import numpy as np

from anygrain.errors import AnygrainError
from anygrain.phrase.options import Compress
from anygrain.vectors.factory import FactoryPolicy, default_pq_m
from anygrain.vectors.faiss_index import FaissIndex, unwrap_index

#: The FAISS factory of phrase vectors when none is given (the rule: ``FactoryPolicy``).
#: They are stored as float16, so FAISS keeps them as float16 too (``SQfp16``: half of
#: ``Flat``'s memory, the same scores, and faster to scan); ``sqrt(N)`` cells (rounded
#: down) rather than dense's ``4·sqrt(N)``, since a phrase index holds ~100x more vectors
#: than passages and k-means on 4·sqrt(N) cells is slow to train on a CPU; PQ codes
#: (8 dimensions per byte) from 20M vectors, where fp16 cells get large.
PHRASE_POLICY = FactoryPolicy(
    codes="SQfp16", cells_per_root=1, pq_limit=20_000_000, round_cells=False, pq_dims_max=None
)
#: OPQ trains its own 256-centroid k-means per sub-space, whatever the PQ bits.
OPQ_MIN_TRAIN = 256


def ivf_prefix(n_vectors: int) -> str:
    """``IVF{sqrt(N)},`` from 100k vectors on (phrase indexes' rule: :data:`PHRASE_POLICY`),
    else ``""``."""
    return PHRASE_POLICY.ivf_prefix(n_vectors)


def compressed_factory(
    compress: Compress | str, n_vectors: int, dim: int, *, pq_m: int | None = None
) -> str | None:
    """The FAISS factory for ``compress`` over ``n_vectors`` (None: the uncompressed default)."""
    c = Compress(compress)
    if c is Compress.NONE:
        return None
    ivf = ivf_prefix(n_vectors)
    if c is Compress.SQ8:
        return f"{ivf}SQ8"
    if c is Compress.SQ4:
        return f"{ivf}SQ4"
    m = pq_m or default_pq_m(dim)
    if dim % m:
        raise AnygrainError(f"--pq-m {m} must divide the vector dimension {dim}")
    if n_vectors < 2:  # PQ trains on two points at least: one vector is stored as it is
        return "Flat"
    bits = max(1, min(8, int(math.floor(math.log2(max(n_vectors, 2))))))
    pq = f"PQ{m}" if bits == 8 else f"PQ{m}x{bits}"
    opq = f"OPQ{m}," if c is Compress.OPQ_PQ and n_vectors >= OPQ_MIN_TRAIN else ""
    return f"{opq}{ivf}{pq}"


class DecodedVectors:
    """Token vectors of one side, read by reconstructing them from a FAISS index's codes.

    Indexed like the float16 dump (``vectors[token_indices]``, float32 rows); tokens
    the index does not hold (not start-capable, say) read as zeros, which search never
    asks for.
    """

    def __init__(self, index: FaissIndex, ids: np.ndarray, n_tokens: int) -> None:
        self.index = index
        self._mapped = False  # the IVF direct map, made at the first read (see _direct_map)
        self.pos = np.full(n_tokens, -1, dtype=np.int64)
        self.pos[np.asarray(ids, dtype=np.int64)] = np.arange(len(ids), dtype=np.int64)
        self.shape = (n_tokens, index.dim)
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx: Any) -> np.ndarray:
        tok = np.atleast_1d(np.arange(self.shape[0])[idx] if isinstance(idx, slice) else idx)
        keys = self.pos[np.asarray(tok, dtype=np.int64)]
        out = np.zeros((len(keys), self.shape[1]), dtype=np.float32)
        have = keys >= 0
        if have.any():
            self._direct_map()
            out[have] = self.index.index.reconstruct_batch(np.ascontiguousarray(keys[have]))
        return out if np.ndim(idx) or isinstance(idx, slice) else out[0]

    def _direct_map(self) -> None:
        """id -> (list, offset) for an IVF index, 8 bytes per vector.  Made at the first read,
        not on open: making it reads every id of the memory-mapped lists, and the kernel maps
        the codes around them (a large share of the index at the end of its build)."""
        if not self._mapped:
            base = unwrap_index(self.index.index)
            if isinstance(base, faiss.IndexIVF) and base.direct_map.type == 0:
                base.make_direct_map()
            self._mapped = True

    def astype(self, dtype: Any) -> np.ndarray:
        """All rows (tests and small indexes only)."""
        return self[np.arange(self.shape[0])].astype(dtype)
