"""FAISS factories: which one an index gets from its size, and what training it needs.

Supported factories (any other FAISS factory string is passed through as is):

- ``Flat``: exact search; every query scans every vector.
- ``SQfp16``: exact up to float16 rounding, half of ``Flat``'s memory.
- ``HNSW32``: graph search, no training; ``ef_search`` trades speed for recall.
- ``IVF{n},Flat``: ``n`` k-means cells, a query scans ``nprobe`` of them.
- ``IVF{n},PQ{m}``: as above, vectors compressed to ``m`` bytes (``m`` divides the dimension).
- ``OPQ{m},IVF{n},PQ{m}``: a learned rotation before PQ, for better compressed recall.

A :class:`FactoryPolicy` picks one from the corpus size when none is given: every
kind follows the same rule (exact below :data:`EXACT_LIMIT` vectors, IVF cells from
``sqrt(N)``, PQ codes beyond a size), with its own numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from anygrain.errors import AnygrainError

#: Below this many vectors exact search is fast enough (a few ms per query on CPU).
EXACT_LIMIT = 100_000
#: FAISS warns when k-means has fewer than this many points per centroid.
MIN_POINTS_PER_CENTROID = 39


@dataclass(frozen=True)
class FactoryPolicy:
    """How an index picks its FAISS factory from the number and dimension of its vectors.

    - ``N < exact_limit``: ``codes``, scanned exhaustively.
    - ``N < pq_limit``: ``IVF{cells},{codes}``.
    - beyond: ``IVF{cells},PQ{m}`` with ``m`` from :func:`default_pq_m`; ``codes`` cells
      instead when one PQ byte would code more than ``pq_dims_max`` dimensions.

    ``cells`` is ``cells_per_root·sqrt(N)``, rounded (or rounded down), kept trainable
    (at least :data:`MIN_POINTS_PER_CENTROID` points per cell).
    """

    codes: str  # how vectors are kept: "Flat" (float32), "SQfp16" (float16)
    cells_per_root: int  # IVF cells per sqrt(N)
    pq_limit: int  # from this many vectors on, PQ codes
    round_cells: bool = True  # False: cells rounded down
    pq_dims_max: int | None = 16  # None: PQ whatever the dimensions per byte
    exact_limit: int = EXACT_LIMIT

    def cells(self, n_vectors: int) -> int:
        """IVF cells for ``n_vectors`` (>= 39 points per cell, so k-means trains)."""
        root = self.cells_per_root * math.sqrt(n_vectors)
        cells = int(round(root)) if self.round_cells else int(root)
        return max(1, min(cells, n_vectors // MIN_POINTS_PER_CENTROID))

    def ivf_prefix(self, n_vectors: int) -> str:
        """``IVF{cells},`` from ``exact_limit`` vectors on, else ``""`` (an exhaustive scan)."""
        return f"IVF{self.cells(n_vectors)}," if n_vectors >= self.exact_limit else ""

    def factory(self, n_vectors: int, dim: int) -> str:
        """The factory of an index of ``n_vectors`` ``dim``-d vectors when none is given."""
        prefix = self.ivf_prefix(n_vectors)
        if n_vectors < self.pq_limit:
            return f"{prefix}{self.codes}"
        m = default_pq_m(dim)
        if self.pq_dims_max is not None and dim // m > self.pq_dims_max:
            return f"{prefix}{self.codes}"
        return f"{prefix}PQ{m}"


#: FAISS's usual guidance, for float32 vectors: 4·sqrt(N) cells, uncompressed cells up to
#: 2M vectors (2M 768-d vectors are ~6 GB, memory-mapped), then PQ at 8 dimensions per byte
#: (16x smaller than float32 for 384-/768-d models).  What :func:`plan_training` picks when
#: given no factory.
DEFAULT_POLICY = FactoryPolicy(codes="Flat", cells_per_root=4, pq_limit=2_000_000)


def default_pq_m(dim: int) -> int:
    """PQ sub-quantizers: about 8 dimensions each (dim/8 bytes per vector), dividing ``dim``."""
    return next((m for m in range(max(1, dim // 8), 0, -1) if dim % m == 0), 1)


def default_nprobe(nlist: int) -> int:
    """Cells scanned per query by default: ``sqrt(nlist)`` (FAISS's default of 1 loses recall)."""
    return max(1, min(nlist, int(math.ceil(math.sqrt(nlist)))))


@dataclass(frozen=True)
class FactoryInfo:
    """What a factory string asks for, as far as training and search parameters go."""

    spec: str
    nlist: int | None = None  # IVF cells
    pq_m: int | None = None  # PQ sub-quantizers
    pq_bits: int = 8
    opq_m: int | None = None
    hnsw: bool = False  # an HNSW graph over the vectors (not as IVF quantizer)
    hnsw_quantizer: bool = False  # IVF{n}_HNSW{M}: an HNSW graph over the centroids

    @property
    def clusters(self) -> int:
        """The largest k-means the training runs (0 when it needs no training)."""
        ks = [self.nlist or 0]
        if self.pq_m or self.opq_m:
            ks.append(2**self.pq_bits)
        return max(ks)

    @property
    def min_train(self) -> int:
        """FAISS refuses to train k-means on fewer points than centroids."""
        return self.clusters

    @property
    def recommended_train(self) -> int:
        return MIN_POINTS_PER_CENTROID * self.clusters


def parse_factory(spec: str) -> FactoryInfo:
    """Read the parts of ``spec`` that matter for training and search (the rest is FAISS's)."""
    nlist = pq_m = opq_m = None
    bits = 8
    hnsw = hnsw_q = False
    for part in (p.strip() for p in spec.split(",")):
        if m := re.fullmatch(r"OPQ(\d+)(?:_\d+)?", part):
            opq_m = int(m.group(1))
        elif m := re.fullmatch(r"IVF(\d+)(_HNSW\d+)?", part):
            nlist, hnsw_q = int(m.group(1)), bool(m.group(2))
        elif m := re.fullmatch(r"PQ(\d+)(?:x(\d+))?(?:fs|fsr|np)?", part):
            pq_m, bits = int(m.group(1)), int(m.group(2) or 8)
        elif re.fullmatch(r"HNSW\d+(_.*)?", part):
            hnsw = True
    return FactoryInfo(spec, nlist, pq_m, bits, opq_m, hnsw, hnsw_q)


def check_factory(spec: str, n_train: int, dim: int) -> FactoryInfo:
    """Raise a clear error (instead of a FAISS crash) when ``spec`` cannot be trained here."""
    info = parse_factory(spec)
    for name, m in (("PQ", info.pq_m), ("OPQ", info.opq_m)):
        if m is not None and dim % m:
            divisors = [d for d in range(1, dim + 1) if dim % d == 0 and d <= 128]
            raise AnygrainError(
                f"FAISS factory {spec!r}: {name}{m} needs {m} to divide the vector dimension {dim}; "
                f"choose one of {divisors[-6:]}"
            )
    if info.min_train and n_train < info.min_train:
        what = []
        if info.nlist:
            what.append(f"IVF{info.nlist} needs >= {info.nlist} (one per centroid)")
        if info.pq_m or info.opq_m:
            what.append(f"PQ with {info.pq_bits}-bit codes needs >= {2**info.pq_bits}")
        suggest = ["'Flat' (exact)"]
        if n_train >= MIN_POINTS_PER_CENTROID:
            suggest.append(f"'IVF{max(1, n_train // MIN_POINTS_PER_CENTROID)},Flat'")
        raise AnygrainError(
            f"FAISS factory {spec!r} needs at least {info.min_train} training vectors "
            f"({'; '.join(what)}; FAISS recommends {info.recommended_train}), but only {n_train} "
            f"are available. Use a smaller factory, e.g. {' or '.join(suggest)}."
        )
    return info


def plan_training(
    n_vectors: int, dim: int, factory: str | None, train_size: int | None = None
) -> tuple[str, FactoryInfo, int]:
    """``(factory, info, train_size)`` for ``n_vectors``, checked before any work is done.

    Call it before encoding a corpus, so a factory that cannot be trained fails in
    seconds rather than after hours of encoding.  No ``factory``: :data:`DEFAULT_POLICY`'s.
    The default training sample is ``min(N, max(64·k, 50k), 500k)`` vectors for the
    largest k-means ``k`` in the factory (FAISS itself subsamples to 256 points per centroid).
    """
    spec = factory or DEFAULT_POLICY.factory(n_vectors, dim)
    info = parse_factory(spec)
    if train_size is None:
        train_size = min(max(64 * info.clusters, 50_000), 500_000)
    train_size = min(train_size, n_vectors)
    check_factory(spec, train_size, dim)
    return spec, info, train_size
