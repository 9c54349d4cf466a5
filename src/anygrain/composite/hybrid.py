"""Hybrid BM25 + dense index (DPR section 5): one corpus, two sub-indexes, fused per query.

Layout::

    index.json   kind=hybrid, fusion settings
    corpus/      the passage store both sub-indexes share
    sparse/      a complete BM25 index (its corpus path is ../corpus)
    dense/       a complete dense index (its corpus path is ../corpus)

:meth:`HybridIndex.combine` instead makes a hybrid index of an existing BM25 index
and an existing dense index over the same corpus (same checksum): its ``index.json``
points at them (``components``) and at the BM25 index's corpus, so nothing is
re-encoded or copied, and the two must stay where they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.composite.fusion import FusionConfig, FusionMethod, fuse_scores, rrf, union_candidates
from anygrain.corpus.source import corpus_ref, open_corpus_of, open_or_build_corpus, path_ref
from anygrain.errors import AnygrainError, IndexMismatchError, UsageError, parse_enum
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.base import (
    Index,
    IndexKind,
    _check_on_open,
    check_build_target,
    read_manifest,
    register_index,
    write_manifest,
)
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.sparse.bm25 import BM25Index, Bm25Settings
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.checksums import SMALL_LIMIT, Verify


def fusion_config(
    fusion: FusionMethod | str, weight: float | None = None, depth: int = 100
) -> FusionConfig:
    """A checked :class:`FusionConfig`: a known method, a depth of at least 1."""
    if depth < 1:
        raise AnygrainError(f"fusion depth must be at least 1, got {depth}")
    return FusionConfig(parse_enum(FusionMethod, fusion), weight, depth)


@dataclass(frozen=True)
class HybridSettings(IndexSettings):
    """What ``Index.build(kind="hybrid")`` takes besides the shared options: the fusion,
    and the dense part's settings (the BM25 part takes ``lang``, ``k1`` and ``b``)."""

    fusion: FusionMethod = FusionMethod.ZSCORE
    weight: float | None = None  # of the dense side (default: the method's)
    depth: int = 100  # candidates taken from each system
    model: Any = None  # the dense encoder (default: the corpus language's)
    lang: str | None = None  # en | zh: BM25's analyzer and the default encoder
    factory: str | None = None
    dtype: str = "float32"
    batch_size: int = 64
    bf16: bool = False
    shard_size: int = 50_000
    k1: float = Bm25Settings.k1  # the BM25 part's term-frequency saturation
    b: float = Bm25Settings.b  # the BM25 part's length normalisation

    def __post_init__(self) -> None:
        from anygrain.dense.index import check_dense_options

        Bm25Settings(k1=self.k1, b=self.b)  # checked as a BM25 index checks them

        # a name from JSON or the command line becomes the enum (frozen: set it directly)
        object.__setattr__(
            self, "fusion", fusion_config(self.fusion, self.weight, self.depth).method
        )
        check_dense_options(self.lang, self.dtype, self.batch_size, self.shard_size)


@register_index(IndexKind.HYBRID)
class HybridIndex(Index):
    settings_type = HybridSettings

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        sparse: BM25Index,
        dense: Any,
        fusion: FusionConfig,
    ) -> None:
        super().__init__(path, manifest)
        self.sparse = sparse
        self.dense = dense
        self.fusion = fusion

    @property
    def corpus(self):  # type: ignore[no-untyped-def]
        return self.sparse.store

    @classmethod
    def build_with(
        cls, source: Any, out: Path, settings: IndexSettings, common: BuildOptions
    ) -> HybridIndex:
        from anygrain.dense.index import DenseIndex, as_biencoder, encoder_name

        assert isinstance(settings, HybridSettings)
        s, c = settings, common
        if c.corpus_dir is not None:
            raise UsageError("a hybrid index keeps its passage store inside it: no corpus_dir")
        check_build_target(source, out, overwrite=c.overwrite)
        cfg = fusion_config(s.fusion, s.weight, s.depth)
        # a named model is loaded first, so a wrong name fails before the corpus is read
        enc = as_biencoder(s.model) if s.model is not None else None
        with atomic_dir(out) as tmp:
            store = open_or_build_corpus(
                source, tmp / "corpus", split=c.split, errors=c.errors, progress=c.progress
            )
            BM25Index.write(tmp / "sparse", store, lang=s.lang, k1=s.k1, b=s.b, progress=c.progress)
            name = encoder_name(s.model, store, s.lang)  # without a model: the language's
            DenseIndex.write(
                tmp / "dense",
                store,
                model=enc or as_biencoder(name),
                model_name=name,
                progress=c.progress,
                subdir="",
                factory=s.factory,
                dtype=s.dtype,
                batch_size=s.batch_size,
                bf16=s.bf16,
                shard_size=s.shard_size,
                executor=c.executor,
                device=c.device,
            )
            sub = {name: read_manifest(tmp / name) for name in ("sparse", "dense")}
            write_manifest(
                tmp,
                IndexKind.HYBRID,
                cls.format_version,
                corpus={"path": "corpus", "checksum": store.checksum, "n_passages": len(store)},
                settings={
                    "fusion": {**asdict(cfg), "method": cfg.method.value},
                    "build": s.to_dict(),
                },
                components={name: {"kind": m["kind"], "path": name} for name, m in sub.items()},
            )
        return Index.load(out)  # type: ignore[return-value]

    @classmethod
    def combine(
        cls,
        first: str | Path,
        second: str | Path,
        out: str | Path,
        *,
        fusion: FusionMethod | str = FusionMethod.ZSCORE,
        weight: float | None = None,
        depth: int = 100,
        overwrite: bool = False,
    ) -> HybridIndex:
        """A hybrid index over an existing BM25 index and dense index (either order),
        reused in place.

        Both must be built over the same corpus (the checksum they recorded): fused
        scores add up per passage row, so rows must mean the same passages in both.
        """
        dirs, out = [Path(first), Path(second)], Path(out)
        for part in dirs:
            check_build_target(part, out, overwrite=overwrite)
        cfg = fusion_config(fusion, weight, depth)
        kinds = [str(read_manifest(d).get("kind")) for d in dirs]
        by_kind = dict(zip(kinds, dirs, strict=True))
        wanted = (IndexKind.BM25.value, IndexKind.DENSE.value)
        if set(by_kind) != set(wanted):
            lacking = next(k for k in wanted if k not in by_kind)
            raise AnygrainError(
                "a hybrid index combines one bm25 and one dense index, not "
                f"{kinds[0]} ({dirs[0]}) and {kinds[1]} ({dirs[1]}): one must be a {lacking} index"
            )
        sparse_dir, dense_dir = by_kind[IndexKind.BM25.value], by_kind[IndexKind.DENSE.value]
        sub = {"sparse": read_manifest(sparse_dir), "dense": read_manifest(dense_dir)}
        sums = {name: (m.get("corpus") or {}).get("checksum") for name, m in sub.items()}
        if not sums["sparse"] or sums["sparse"] != sums["dense"]:
            raise IndexMismatchError(
                f"{sparse_dir} and {dense_dir} were built over different corpora (checksums "
                f"{sums['sparse']} and {sums['dense']}); build both from the same corpus, "
                "e.g. index the dense one from the BM25 index's corpus/ directory"
            )
        store = open_corpus_of(sparse_dir, sub["sparse"])  # checks it is still that corpus
        with atomic_dir(out) as tmp:
            write_manifest(
                tmp,
                IndexKind.HYBRID,
                cls.format_version,
                corpus={
                    "path": corpus_ref(out, store),
                    "checksum": store.checksum,
                    "n_passages": len(store),
                },
                settings={"fusion": {**asdict(cfg), "method": cfg.method.value}},
                components={
                    name: {"kind": m["kind"], "path": path_ref(out, d), "reused": True}
                    for (name, m), d in zip(sub.items(), (sparse_dir, dense_dir), strict=True)
                },
            )
        return Index.load(out)  # type: ignore[return-value]

    @classmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> HybridIndex:
        from anygrain.dense.index import DenseIndex

        store = open_corpus_of(path, manifest)
        parts = manifest.get("components") or {}
        # a built hybrid index nests its parts; a combined one names where they are
        sparse_dir, dense_dir = (
            path / (parts.get(name) or {}).get("path", name) for name in ("sparse", "dense")
        )
        sm, dm = read_manifest(sparse_dir), read_manifest(dense_dir)
        for d, m in ((sparse_dir, sm), (dense_dir, dm)):
            if not d.resolve().is_relative_to(path.resolve()):
                # a combined index's parts live elsewhere: Index.load checked only its own files
                _check_on_open(d, m, Verify.SMALL, SMALL_LIMIT)
            if (m.get("corpus") or {}).get("checksum") != store.checksum:
                raise IndexMismatchError(
                    f"{path}: its part {d} is now built over another corpus than the hybrid "
                    "index was; combine or build the hybrid index again"
                )
        sparse = BM25Index.open(sparse_dir, sm, store=store)
        dense = DenseIndex.open(
            dense_dir,
            dm,
            store=store,
            # "" when nested in a built hybrid index, "dense" for a standalone dense index
            subdir=dm["settings"]["dense"].get("subdir", ""),
            **{k: v for k, v in options.items() if k in ("model", "device")},
        )
        f = manifest["settings"]["fusion"]
        return cls(
            path,
            manifest,
            sparse,
            dense,
            FusionConfig(FusionMethod(f["method"]), f["weight"], int(f["depth"])),
        )

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        fusion: str | None = None,
        weight: float | None = None,
        depth: int | None = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows(
            queries, k, fusion=fusion, weight=weight, depth=depth, batch_size=batch_size
        )
        return hits_from_rows(self.corpus, rows, scores)

    def search_rows(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        fusion: str | None = None,
        weight: float | None = None,
        depth: int | None = None,
        batch_size: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size``: questions the dense part encodes at once (default: its own)."""
        cfg = FusionConfig(
            FusionMethod(fusion) if fusion else self.fusion.method,
            weight if weight is not None else (self.fusion.weight if fusion is None else None),
            depth or self.fusion.depth,
        )
        n_depth = max(cfg.depth, k)
        s_rows, _ = self.sparse.search_rows(queries, n_depth)
        qvecs = (
            self.dense.encode_queries(list(queries))
            if batch_size is None
            else self.dense.encode_queries(list(queries), batch_size=batch_size)
        )
        d_rows, _ = self.dense.search_vectors(qvecs, n_depth)
        if cfg.method is FusionMethod.RRF:
            return rrf(s_rows, d_rows, k, cfg.dense_weight)
        cand = union_candidates(s_rows, d_rows)
        sparse_scores = self.sparse.score_rows(queries, cand)
        dense_scores = self.dense.score_rows(qvecs, cand)
        return fuse_scores(cand, sparse_scores, dense_scores, cfg, k)
