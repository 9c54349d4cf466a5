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

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.composite.fusion import (
    DEPTH_RANGE,
    WEIGHT_RANGE,
    FusionConfig,
    FusionMethod,
    fuse_scores,
    rrf,
    union_candidates,
)
from anygrain.corpus.source import corpus_ref, open_corpus_of, path_ref
from anygrain.dense.index import DenseSettings, build_model, find_model, write_dense_index
from anygrain.errors import AnygrainError, IndexMismatchError, UsageError, parse_enum
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.base import Index, UpdateOp
from anygrain.index.encoded import EncodedQueries
from anygrain.index.manifest import check_build_target, read_manifest, write_manifest
from anygrain.index.registry import IndexKind, register_index
from anygrain.index.rows import RowsIndex
from anygrain.index.settings import BuildJob, BuildOptions, IndexSettings
from anygrain.sparse.bm25 import BM25Index, Bm25Settings, write_bm25_index
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.lock import writer_lock


def fusion_config(
    fusion: FusionMethod | str, weight: float | None = None, depth: int = 100
) -> FusionConfig:
    """A checked :class:`FusionConfig`: a known method, a depth of at least 1."""
    if depth < 1:
        raise AnygrainError(f"fusion depth must be at least 1, got {depth}")
    return FusionConfig(parse_enum(FusionMethod, fusion), weight, depth)


def fusion_method(value: Any, where: str = "") -> FusionMethod:
    """A search's ``fusion`` override checked: a known method; an error naming ``where``."""
    try:
        return parse_enum(FusionMethod, value)
    except AnygrainError as e:
        raise AnygrainError(f"{where}: {e}" if where else str(e)) from None


#: the flat options a hybrid build takes (the API's and the command line's) that go to its
#: dense part and to its BM25 part; ``lang`` goes to both, ``fusion``, ``weight`` and
#: ``depth`` make the fusion (:meth:`HybridSettings.from_values`)
DENSE_OPTIONS = ("model", "factory", "dtype", "batch_size", "bf16", "shard_size", "copy_model")
BM25_OPTIONS = ("k1", "b")
FUSION_OPTIONS = ("fusion", "weight", "depth")


@dataclass(frozen=True)
class HybridSettings(IndexSettings):
    """What ``Index.build(kind="hybrid")`` takes besides the shared options: the settings of
    its dense part and of its BM25 part, and the fusion.

    A build takes them as flat options (``fusion``, ``weight``, ``depth``, ``model``,
    ``lang``, ``factory``, ..., ``k1``, ``b``: :meth:`option_names`), nested in one place,
    :meth:`from_values`; ``index.json`` records them nested, and the flat form hybrid
    indexes were recorded with before is read too (:meth:`from_dict`)."""

    dense: DenseSettings = field(default_factory=DenseSettings)
    bm25: Bm25Settings = field(default_factory=Bm25Settings)
    fusion: FusionConfig = field(default_factory=FusionConfig)

    def __post_init__(self) -> None:
        f = self.fusion
        # checked, a method's name becoming the enum (frozen: set it directly)
        object.__setattr__(self, "fusion", fusion_config(f.method, f.weight, f.depth))

    @classmethod
    def option_names(cls) -> list[str]:
        return [*FUSION_OPTIONS, "model", "lang", *DENSE_OPTIONS[1:], *BM25_OPTIONS]

    @classmethod
    def from_values(cls, options: Mapping[str, Any]) -> HybridSettings:
        """The nested settings of flat options (:meth:`option_names`): ``lang`` for both
        parts, the dense and BM25 options for their part, the rest for the fusion."""
        o = dict(options)
        lang = o.get("lang")
        default = FusionConfig()
        return cls(
            # BM25 first: a wrong k1 or b is named as a BM25 index names it
            bm25=Bm25Settings(lang=lang, **{k: o[k] for k in BM25_OPTIONS if k in o}),
            fusion=fusion_config(
                o.get("fusion", default.method), o.get("weight"), o.get("depth", default.depth)
            ),
            dense=DenseSettings(lang=lang, **{k: o[k] for k in DENSE_OPTIONS if k in o}),
        )

    def to_dict(self) -> dict[str, Any]:
        f = self.fusion
        return {
            "dense": self.dense.to_dict(),
            "bm25": self.bm25.to_dict(),
            "fusion": {"method": f.method.value, "weight": f.weight, "depth": f.depth},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HybridSettings:
        """Settings saved by :meth:`to_dict` (nested), or the flat form of a hybrid index
        recorded before the settings nested (the build options as given)."""
        if not any(isinstance(d.get(k), Mapping) for k in ("dense", "bm25", "fusion")):
            names = set(cls.option_names())
            return cls.from_values({k: v for k, v in d.items() if k in names})
        f = d.get("fusion") or {}
        default = FusionConfig()
        return cls(
            dense=DenseSettings.from_dict(d.get("dense") or {}),
            bm25=Bm25Settings.from_dict(d.get("bm25") or {}),
            fusion=fusion_config(
                f.get("method", default.method), f.get("weight"), f.get("depth", default.depth)
            ),
        )


@register_index(IndexKind.HYBRID)
class HybridIndex(RowsIndex):
    settings_type = HybridSettings
    load_options = frozenset({"model", "device", "runtime"})  # handed to its dense part
    #: a search's fusion overrides: what a server's client may set
    search_option_checks = {
        "fusion": fusion_method,
        "weight": WEIGHT_RANGE.check,
        "depth": DEPTH_RANGE.check,
    }
    update_module = "anygrain.composite.hybrid_update"

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

    def summary(self) -> dict[str, Any]:
        return {
            **super().summary(),
            "model": self.dense.summary()["model"],  # the encoder of its dense part
            "fusion": self.manifest["settings"]["fusion"],
            "components": self.manifest.get("components", {}),
        }

    # --- updates: each part as its kind's, over the shared corpus (hybrid_update) ----------
    @classmethod
    def check_update(cls, index: Index, op: UpdateOp) -> None:
        """A built hybrid index is updated; one combined from existing indexes is not (its
        parts live elsewhere and are updated on their own)."""
        super().check_update(index, op)
        if (index.manifest.get("components") or {}).get("sparse", {}).get("reused"):
            raise UsageError(
                f"{index.path}: {op.value} is not supported for a {cls.kind.value} index "
                "combined from existing indexes; update its parts"
            )

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        assert isinstance(settings, HybridSettings)
        if options.corpus_dir is not None:
            raise UsageError("a hybrid index keeps its passage store inside it: no corpus_dir")
        find_model(settings.dense.model)  # a wrong name fails before the corpus is read

    @classmethod
    def write(cls, job: BuildJob) -> None:
        """Its BM25 part in ``sparse/`` and its dense part in ``dense/``, both over the
        corpus (the store inside the index), and ``index.json`` with the fusion."""
        s, out, corpus, options = job.settings, job.out, job.corpus, job.options
        assert isinstance(s, HybridSettings)
        write_bm25_index(out / "sparse", corpus, s.bm25, progress=options.progress)
        model, name = build_model(s.dense, corpus)  # without one: the language's
        write_dense_index(
            out / "dense",
            corpus,
            model,
            s.dense,
            options,
            subdir="",
            model_name=name,
        )
        sub = {name: read_manifest(out / name) for name in ("sparse", "dense")}
        write_manifest(
            out,
            IndexKind.HYBRID,
            cls.format_version,
            corpus={"path": "corpus", "checksum": corpus.checksum, "n_passages": len(corpus)},
            settings={
                "fusion": {**asdict(s.fusion), "method": s.fusion.method.value},
                "build": s.to_dict(),
            },
            components={name: {"kind": m["kind"], "path": name} for name, m in sub.items()},
        )

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
        with writer_lock(out, "building an index"):  # one writer per --out
            return cls._combine(dirs, out, fusion, weight, depth, overwrite)

    @classmethod
    def _combine(
        cls,
        dirs: list[Path],
        out: Path,
        fusion: FusionMethod | str,
        weight: float | None,
        depth: int,
        overwrite: bool,
    ) -> HybridIndex:
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
    def part_dirs(cls, path: Path, manifest: dict[str, Any]) -> list[Path]:
        """Its BM25 part and its dense part: nested in a built hybrid index, named in a
        combined one's ``components`` (where they are)."""
        parts = manifest.get("components") or {}
        return [path / (parts.get(name) or {}).get("path", name) for name in ("sparse", "dense")]

    @classmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> HybridIndex:
        from anygrain.dense.index import DenseIndex

        store = open_corpus_of(path, manifest)
        # Index.load checked the parts' files (those of a combined index's parts, which live
        # elsewhere, beside its own) at the depth asked for
        sparse_dir, dense_dir = cls.part_dirs(path, manifest)
        sm, dm = read_manifest(sparse_dir), read_manifest(dense_dir)
        for d, m in ((sparse_dir, sm), (dense_dir, dm)):
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
            **{k: v for k, v in options.items() if k in ("model", "device", "runtime")},
        )
        f = manifest["settings"]["fusion"]
        try:
            cfg = FusionConfig(FusionMethod(f["method"]), f["weight"], int(f["depth"]))
        except AnygrainError as e:  # a weight out of its range: checked on open too
            raise AnygrainError(f"{path}/index.json: settings.fusion: {e}") from None
        return cls(path, manifest, sparse, dense, cfg)

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

    def encode(self, queries: Sequence[str]) -> EncodedQueries:
        """The dense part's question encoder (BM25 needs nothing encoded)."""
        return self.dense.encode(queries)

    def search_rows_encoded(
        self,
        encoded: EncodedQueries,
        k: int = 10,
        *,
        fusion: str | None = None,
        weight: float | None = None,
        depth: int | None = None,
        **options: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        (qvecs,) = encoded.vectors
        return self.fused_rows(encoded.texts, qvecs, k, self.search_fusion(fusion, weight, depth))

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
        texts = list(queries)
        qvecs = (
            self.dense.encode_queries(texts)
            if batch_size is None
            else self.dense.encode_queries(texts, batch_size=batch_size)
        )
        return self.fused_rows(queries, qvecs, k, self.search_fusion(fusion, weight, depth))

    def search_fusion(
        self, fusion: str | None, weight: float | None, depth: int | None
    ) -> FusionConfig:
        """The index's fusion with a search's overrides (a method given without a weight
        takes that method's default weight, not the index's)."""
        return FusionConfig(
            FusionMethod(fusion) if fusion else self.fusion.method,
            weight if weight is not None else (self.fusion.weight if fusion is None else None),
            depth or self.fusion.depth,
        )

    def fused_rows(
        self, queries: Sequence[str], qvecs: np.ndarray, k: int, cfg: FusionConfig
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` ``(rows, scores)`` of ``queries`` (their dense vectors ``qvecs``)
        fused by ``cfg`` from both parts' top ``cfg.depth``."""
        n_depth = max(cfg.depth, k)
        s_rows, _ = self.sparse.search_rows(queries, n_depth)
        d_rows, _ = self.dense.search_vectors(qvecs, n_depth)
        if cfg.method is FusionMethod.RRF:
            return rrf(s_rows, d_rows, k, cfg.dense_weight)
        cand = union_candidates(s_rows, d_rows)
        sparse_scores = self.sparse.score_rows(queries, cand)
        dense_scores = self.dense.score_rows(qvecs, cand)
        return fuse_scores(cand, sparse_scores, dense_scores, cfg, k)
