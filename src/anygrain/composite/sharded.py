"""Sharded indexes: N indexes of one kind over row ranges of one corpus, searched as one.

Layout::

    index.json            kind=sharded; settings: the shards' own settings, and ``sharding``
                          (their kind, each shard's directory and row range)
    corpus/               the whole corpus (or an existing store's path in index.json):
                          hits, evaluation and serving read global rows here
    shards/00000/         a complete index of the kind over rows [0, n1) ...
    shards/00000.corpus/  ... whose corpus is those rows (row n1 - 1 is its last)
    shards/00001/         ... over rows [n1, n2), and so on

``Index.load`` on a sharded index returns an index *of the shards' kind* (a subclass of
:class:`DenseIndex`, :class:`PhraseIndex` or :class:`BM25Index`) whose search covers every
shard, so whatever takes an index of that kind (search, eval, serve) takes a sharded one.
Each kind's view lives with its kind (:mod:`anygrain.dense.sharded`,
:mod:`anygrain.phrase.sharded`, :mod:`anygrain.sparse.sharded`), on what every view shares
(:mod:`anygrain.index.shard_view`).  This module builds sharded indexes and opens them.

Exactness: with exhaustive MIPS (``Flat``, ``SQfp16``: the defaults below 100k vectors per
shard) a sharded index returns the unsharded index's hits (ids, scores, order up to ties).
IVF, HNSW and PQ shards are trained each on their own rows, so their approximate search
differs from an unsharded approximate index as any two approximate indexes differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anygrain.corpus.lang import Lang, detect_lang, plan_languages
from anygrain.corpus.source import corpus_ref, open_corpus_of
from anygrain.dense.sharded import ShardedDense
from anygrain.errors import AnygrainError, IndexMismatchError, UsageError, parse_enum
from anygrain.hits.hit import Hit
from anygrain.index.base import Index, UpdateOp
from anygrain.index.manifest import read_manifest, write_manifest
from anygrain.index.registry import IndexKind, index_class, register_index
from anygrain.index.settings import BuildJob, IndexSettings
from anygrain.phrase.build import PhraseSettings
from anygrain.phrase.lexical import copy_sparse, write_sparse
from anygrain.phrase.sharded import ShardedPhrase
from anygrain.sparse.bm25 import (
    Bm25Settings,
    collection_stats,
    plan_analyzer,
    write_bm25_index,
)
from anygrain.sparse.sharded import ShardedBM25
from anygrain.utils.checksums import Verify


@dataclass(frozen=True)
class ShardedSettings(IndexSettings):
    """A sharded index: the kind and number of its shards, and the shards' own settings."""

    of: IndexKind | str = IndexKind.DENSE
    shards: int = 2
    lang: str | None = None
    shard: dict[str, Any] = field(default_factory=dict)  # the shards' kind's settings

    def __post_init__(self) -> None:
        object.__setattr__(self, "of", parse_enum(IndexKind, self.of))
        if self.shard is None:  # saved settings from before the field
            object.__setattr__(self, "shard", {})
        if int(self.shards) < 1:
            raise UsageError(f"shards must be at least 1, not {self.shards}")


#: The kinds a sharded index can hold (a hybrid index shards its parts, not itself).
SHARDABLE = (IndexKind.BM25, IndexKind.DENSE, IndexKind.PHRASE)
SHARDS_DIR = "shards"


def shard_bounds(n_rows: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous row ranges ``[start, stop)`` covering ``n_rows``, sizes within one."""
    if shards < 1:
        raise AnygrainError(f"a sharded index needs at least 1 shard, got {shards}")
    if shards > n_rows:
        raise AnygrainError(f"{shards} shards for {n_rows} passages: give at most {n_rows}")
    cuts = [n_rows * i // shards for i in range(shards + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


_VIEWS: dict[IndexKind, Any] = {
    IndexKind.BM25: ShardedBM25,
    IndexKind.DENSE: ShardedDense,
    IndexKind.PHRASE: ShardedPhrase,
}


@register_index(IndexKind.SHARDED)
class ShardedIndex(Index):
    """Builds and opens sharded indexes; :meth:`open` returns a view of the shards' kind."""

    settings_type = ShardedSettings
    load_options = frozenset({"model", "device"})  # each shard's kind checks them again

    @classmethod
    def check_update(cls, index: Index, op: UpdateOp) -> None:
        """Refused: a sharded index opens as a view of its shards' kind, which would update
        one index where there are several."""
        of = ((index.manifest.get("settings") or {}).get("build") or {}).get("of")
        raise UsageError(
            f"{index.path}: {op.value} is not supported for a sharded index yet"
            + (f" (of {of} shards)" if of else "")
            + "; rebuild it from the grown source with --shards, or build an unsharded index"
        )

    @classmethod
    def settings_from(
        cls,
        *,
        of: IndexKind | str | None = None,
        shards: int = 2,
        lang: str | None = None,
        **options: Any,
    ) -> ShardedSettings:
        """``shards`` indexes of kind ``of`` over contiguous row ranges of one corpus;
        ``options`` are the shards' kind's settings (model, factory, threshold, ...), checked
        against that kind's ``settings_type`` before anything is read or written."""
        if of is None:
            raise AnygrainError("a sharded index needs the kind of its shards (of=dense, ...)")
        kind = parse_enum(IndexKind, of)
        if kind not in SHARDABLE:
            raise AnygrainError(
                f"a sharded index holds {', '.join(k.value for k in SHARDABLE)} shards, "
                f"not {kind.value}"
            )
        if shards < 1:
            raise AnygrainError(f"shards must be at least 1, not {shards}")
        settings = ShardedSettings(of=kind, shards=shards, lang=lang, shard=dict(options))
        index_class(kind).settings_type.from_options(kind.value, {**options, "lang": lang})
        return settings

    @classmethod
    def write(cls, job: BuildJob) -> None:
        """The shards under ``out/shards/``, each an index of the shards' kind over its rows
        of the corpus (written beside it), and ``index.json`` naming them."""
        s, out, corpus, options = job.settings, job.out, job.corpus, job.options
        assert isinstance(s, ShardedSettings)
        kind = IndexKind(s.of)
        bounds = shard_bounds(len(corpus), s.shards)
        collection = None
        if kind is IndexKind.BM25:
            # one analyzer for all shards, from the whole corpus's documents' languages:
            # each shard planning its own could pick others, and scores would not merge
            bm = Bm25Settings.from_options(kind.value, {**s.shard, "lang": s.lang})
            plan = plan_languages(corpus, bm.lang)
            collection = collection_stats(
                corpus,
                plan_analyzer(plan, bm.stemming),
                include_title=bm.include_title,
                plan=plan,
            )
            lang_v = Lang.EN  # unread: BM25 shards take their analyzers from the plan
        else:
            # one language for all shards: each shard detecting its own could pick another
            # default model
            lang_v = Lang(s.lang) if s.lang else detect_lang(corpus)
        shard_opts = dict(s.shard)
        lexical = None
        if kind is IndexKind.PHRASE:
            # one BM25 part over the whole corpus (its statistics corpus-wide), not one
            # per shard: fused scores must compare across shards
            ps = PhraseSettings.from_options(kind.value, {**s.shard, "lang": lang_v.value})
            lexical, lexical_from = ps.fusion(), ps.sparse_from
            shard_opts = {**shard_opts, "sparse": False, "sparse_from": None}
        parts: list[dict[str, Any]] = []
        for i, (a, b) in enumerate(bounds):
            rel = f"{SHARDS_DIR}/{i:05d}"
            # beside the shard, not inside it: a build refuses a source inside its output
            sub = corpus.write_rows(a, b, out / f"{rel}.corpus")
            if collection is not None:
                # BM25 shards score with the whole corpus's statistics, so that merged
                # scores equal the unsharded index's
                write_bm25_index(
                    out / rel,
                    sub,
                    bm,
                    progress=options.progress,
                    report=i == 0,  # the analyzers said once, not once a shard
                    build=bm,
                    collection=collection,
                    plan=plan.sliced(a, b),
                )
            else:
                Index.build(
                    sub,
                    kind=kind,
                    out=out / rel,
                    lang=lang_v.value,
                    progress=options.progress,
                    executor=options.executor,
                    device=options.device,
                    runtime=options.runtime,
                    **shard_opts,
                )
            parts.append({"path": rel, "rows": [a, b]})
        first = read_manifest(out / parts[0]["path"])
        if lexical is not None:
            if lexical_from is not None:
                copy_sparse(Path(lexical_from), out, corpus)
            else:
                # the lexical part's analyzers from each document's language, as unsharded
                write_sparse(out, corpus, lang=s.lang, progress=options.progress)
            first["settings"]["sparse"] = lexical.to_dict()
        extra: dict[str, Any] = {}
        if "model" in first:
            extra["model"] = dict(first["model"])
            if first["model"].get("path"):  # a copy in the first shard (not a name: "ref")
                extra["model"]["path"] = f"{parts[0]['path']}/{first['model']['path']}"
        write_manifest(
            out,
            IndexKind.SHARDED,
            cls.format_version,
            corpus={
                "path": corpus_ref(out, corpus),  # "corpus", or an existing store reused
                "checksum": corpus.checksum,
                "n_passages": len(corpus),
            },
            settings={
                **first.get("settings", {}),
                "sharding": {"kind": kind.value, "shards": parts},
                "build": s.to_dict(),
            },
            **extra,
        )

    @classmethod
    def part_dirs(cls, path: Path, manifest: dict[str, Any]) -> list[Path]:
        """Its shards' directories (``shards/NNNNN``, or wherever index.json names)."""
        return [path / part["path"] for part in manifest["settings"]["sharding"]["shards"]]

    @classmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> Index:
        """The shards opened (files checked by size: the sharded index's own check covered
        their checksums, and those of shards outside it) and viewed as one index of their
        kind."""
        sharding = manifest["settings"]["sharding"]
        kind = IndexKind(sharding["kind"])
        store = open_corpus_of(path, manifest)
        shards: list[Any] = []
        bounds: list[tuple[int, int]] = []
        expect = 0
        for part in sharding["shards"]:
            a, b = (int(x) for x in part["rows"])
            sub = Index.load(path / part["path"], verify=Verify.SIZES, **options)
            rows_of = sub.corpus.manifest.get("rows_of") or {}
            if (
                sub.kind is not kind
                or a != expect
                or len(sub.corpus) != b - a
                or rows_of.get("checksum") != store.checksum
            ):
                raise IndexMismatchError(
                    f"{path}: shard {part['path']} is not the {kind.value} index of rows "
                    f"[{a}, {b}) of this corpus; rebuild the sharded index"
                )
            shards.append(sub)
            bounds.append((a, b))
            expect = b
        if expect != len(store):
            raise IndexMismatchError(
                f"{path}: the shards cover {expect} of the corpus's {len(store)} passages"
            )
        return _VIEWS[kind](path, manifest, store, shards, bounds)  # type: ignore[no-any-return]

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        raise AnygrainError("open a sharded index with Index.load: it searches as its shards' kind")
