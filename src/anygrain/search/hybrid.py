"""Hybrid BM25 + dense index (DPR section 5): one corpus, two sub-indexes, fused per query.

Layout::

    index.json   kind=hybrid, fusion settings
    corpus/      the passage store both sub-indexes share
    sparse/      a complete BM25 index (its corpus path is ../corpus)
    dense/       a complete dense index (its corpus path is ../corpus)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.search.fusion import FusionConfig, FusionMethod, fuse_scores, rrf, union_candidates
from anygrain.search.hit import Hit
from anygrain.search.index import (
    Index,
    IndexKind,
    check_build_target,
    read_manifest,
    register_index,
    write_manifest,
)
from anygrain.search.results import hits_from_rows
from anygrain.sparse.bm25 import BM25Index
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.corpus_source import open_corpus_of, open_or_build_corpus


@register_index(IndexKind.HYBRID)
class HybridIndex(Index):
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
    def build_from(
        cls,
        source: Any,
        out: Path,
        *,
        model: Any = "minilm",
        split: str | None = None,
        lang: str | None = None,
        fusion: str = "zscore",
        weight: float | None = None,
        depth: int = 100,
        errors: Any = None,
        progress: bool = True,
        overwrite: bool = False,
        **dense_settings: Any,
    ) -> HybridIndex:
        from anygrain.dense.index import DenseIndex

        check_build_target(source, out, overwrite=overwrite)
        cfg = FusionConfig(FusionMethod(fusion), weight, depth)
        with atomic_dir(out) as tmp:
            store = open_or_build_corpus(
                source, tmp / "corpus", split=split, errors=errors, progress=progress
            )
            BM25Index.write(tmp / "sparse", store, lang=lang, progress=progress)
            DenseIndex.write(
                tmp / "dense", store, model=model, progress=progress, subdir="", **dense_settings
            )
            sub = {name: read_manifest(tmp / name) for name in ("sparse", "dense")}
            write_manifest(
                tmp,
                IndexKind.HYBRID,
                cls.format_version,
                corpus={"path": "corpus", "checksum": store.checksum, "n_passages": len(store)},
                settings={"fusion": {**asdict(cfg), "method": cfg.method.value}},
                components={name: {"kind": m["kind"], "path": name} for name, m in sub.items()},
            )
        return Index.load(out)  # type: ignore[return-value]

    @classmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> HybridIndex:
        from anygrain.dense.index import DenseIndex

        store = open_corpus_of(path, manifest)
        sparse_dir, dense_dir = path / "sparse", path / "dense"
        sparse = BM25Index.open(sparse_dir, read_manifest(sparse_dir), store=store)
        dense = DenseIndex.open(
            dense_dir,
            read_manifest(dense_dir),
            store=store,
            subdir="",
            **{k: v for k, v in options.items() if k == "model"},
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
        **options: Any,
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows(queries, k, fusion=fusion, weight=weight, depth=depth)
        return hits_from_rows(self.corpus, rows, scores)

    def search_rows(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        fusion: str | None = None,
        weight: float | None = None,
        depth: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        cfg = FusionConfig(
            FusionMethod(fusion) if fusion else self.fusion.method,
            weight if weight is not None else (self.fusion.weight if fusion is None else None),
            depth or self.fusion.depth,
        )
        n_depth = max(cfg.depth, k)
        s_rows, _ = self.sparse.search_rows(queries, n_depth)
        qvecs = self.dense.encode_queries(list(queries))
        d_rows, _ = self.dense.search_vectors(qvecs, n_depth)
        if cfg.method is FusionMethod.RRF:
            return rrf(s_rows, d_rows, k, cfg.dense_weight)
        cand = union_candidates(s_rows, d_rows)
        sparse_scores = self.sparse.score_rows(queries, cand)
        dense_scores = self.dense.score_rows(qvecs, cand)
        return fuse_scores(cand, sparse_scores, dense_scores, cfg, k)
