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
shard, so whatever takes an index of that kind (search, eval, serve) takes a sharded one:

- dense, phrase: the shards' FAISS indexes sit under one threaded ``faiss.IndexShards``
  (successive ids), which searches the shards in parallel and merges their top-k by score;
  search parameters (``nprobe``, ``ef_search``) pass through to every shard.  Phrase span
  scoring reads one token table concatenated from the shards' (the vectors stay
  memory-mapped in each shard), so rounds, units, scopes and ``score_rows`` are unchanged.
- bm25: every shard is scored with the *whole corpus's* document frequencies and mean
  length (:class:`~anygrain.sparse.bm25.CollectionStats`), so a passage scores in its shard
  what it scores unsharded; the shards are searched in a thread pool and their top-k
  merged by score, ties by global row (:func:`merge_top_k`).

Exactness: with exhaustive MIPS (``Flat``, ``SQfp16``: the defaults below 100k vectors per
shard) a sharded index returns the unsharded index's hits (ids, scores, order up to ties).
IVF, HNSW and PQ shards are trained each on their own rows, so their approximate search
differs from an unsharded approximate index as any two approximate indexes differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from anygrain.corpus.lang import Lang, detect_lang
from anygrain.corpus.source import corpus_ref, open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.dense.faiss_index import FaissIndex
from anygrain.dense.index import DenseIndex
from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.errors import AnygrainError, ErrorLog, IndexMismatchError, UsageError, parse_enum
from anygrain.hits.hit import Hit
from anygrain.index.base import (
    Index,
    IndexKind,
    UpdateOp,
    index_class,
    read_manifest,
    register_index,
    write_manifest,
)
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.phrase.build import SUBDIR as PHRASE_SUBDIR
from anygrain.phrase.build import PhraseSettings
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.lexical import copy_sparse, write_sparse
from anygrain.phrase.search import PhraseTable
from anygrain.sparse.bm25 import (
    BM25Index,
    Bm25Settings,
    bm25_analyzer,
    collection_stats,
    write_bm25_index,
)
from anygrain.utils.checksums import Verify
from anygrain.utils.device import resolve_device


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


def merge_top_k(
    rows: Sequence[np.ndarray], scores: Sequence[np.ndarray], offsets: Sequence[int], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The global top-``k`` of per-shard results (local rows, -1 = none; shape (n, k_i)).

    Best score first; equal scores by global row, so the merge does not depend on the order
    the shards answered in.  Rows are -1 (score 0) past the last hit.
    """
    n = len(rows[0]) if rows else 0
    if not rows or k <= 0:
        return np.full((n, max(k, 0)), -1, np.int64), np.zeros((n, max(k, 0)), np.float32)
    r = np.concatenate(
        [
            np.where(x >= 0, x.astype(np.int64) + off, -1)
            for x, off in zip(rows, offsets, strict=True)
        ],
        axis=1,
    )
    s = np.concatenate([np.asarray(x, dtype=np.float32) for x in scores], axis=1)
    valid = r >= 0
    # lexsort's last key is the primary one: score descending, then row ascending
    order = np.lexsort((np.where(valid, r, np.iinfo(np.int64).max), np.where(valid, -s, np.inf)))
    order = order[:, :k]
    out_r = np.take_along_axis(r, order, axis=1)
    out_s = np.where(out_r >= 0, np.take_along_axis(s, order, axis=1), 0).astype(np.float32)
    if out_r.shape[1] < k:  # fewer candidates than k in all shards together
        pad = k - out_r.shape[1]
        out_r = np.pad(out_r, ((0, 0), (0, pad)), constant_values=-1)
        out_s = np.pad(out_s, ((0, 0), (0, pad)))
    return out_r, out_s


def shard_faiss(parts: Sequence[FaissIndex]) -> FaissIndex:
    """The shards' FAISS indexes as one: ``IndexShards`` searches them in threads and merges
    their top-k, the ids of shard i offset by the vectors of the shards before it."""
    # threaded, successive ids (faiss's stubs know only the one-argument constructor)
    combined = faiss.IndexShards(parts[0].dim, True, True)  # type: ignore[call-arg]
    for p in parts:
        combined.add_shard(p.index)  # the Python wrapper keeps a reference to each shard
    fx = FaissIndex(combined, parts[0].factory)
    # nprobe/efSearch parameters pass through IndexShards to each shard, which share a
    # factory: let FaissIndex build them as for the first shard
    fx.ivf, fx.hnsw, fx.hnsw_quantizer = parts[0].ivf, parts[0].hnsw, parts[0].hnsw_quantizer
    return fx


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


_POOL: dict[int, ThreadPoolExecutor] = {}


def _pool_map(fn: Any, items: Sequence[Any]) -> list[Any]:
    """``fn`` over the shards in parallel threads (their numpy/FAISS work releases the GIL).
    The pool lives as long as the process: starting threads on every query cost more than
    a one-question search."""
    if len(items) == 1:
        return [fn(items[0])]
    n = len(items)
    if n not in _POOL:
        _POOL[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="anygrain-shard")
    return list(_POOL[n].map(fn, items))


def _local_rows(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Global ``rows`` as rows of the shard ``[start, stop)``; -1 for rows outside it."""
    r = np.asarray(rows, dtype=np.int64)
    return np.where((r >= start) & (r < stop), r - start, -1)


class _Shards:
    """What every sharded view keeps: the shard indexes and their row ranges."""

    shards: list[Any]
    bounds: list[tuple[int, int]]

    def shard_info(self) -> list[dict[str, Any]]:
        return [
            {"path": str(s.path), "rows": [a, b]}
            for s, (a, b) in zip(self.shards, self.bounds, strict=True)
        ]

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "shards": len(self.shards)}  # type: ignore[misc]


class ShardedDense(_Shards, DenseIndex):
    """A dense index over shards: one ``IndexShards`` search, exact scores from the shards."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        shards: list[DenseIndex],
        bounds: list[tuple[int, int]],
    ) -> None:
        first = shards[0]
        fx = shard_faiss([s.faiss for s in shards])
        super().__init__(path, manifest, store, first.model, fx, first.settings, first.subdir)
        self.shards, self.bounds = shards, bounds

    def score_rows(self, qvecs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # each row lives in one shard; the others score it 0 (their -1)
        parts = _pool_map(
            lambda sb: sb[0].score_rows(qvecs, _local_rows(rows, *sb[1])),
            list(zip(self.shards, self.bounds, strict=True)),
        )
        return np.asarray(np.sum(parts, axis=0), dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {
            **Index.describe(self),
            "faiss": {"ntotal": self.faiss.ntotal, "nprobe": self.faiss.nprobe},
            "shards": self.shard_info(),
        }


class ShardedPhrase(_Shards, PhraseIndex):
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
            t = np.load(s.path / PHRASE_SUBDIR / "tokens.npy").astype(np.int64)
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


class ShardedBM25(_Shards, BM25Index):
    """A BM25 index over shards scored with the whole corpus's statistics, merged by score."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        shards: list[BM25Index],
        bounds: list[tuple[int, int]],
    ) -> None:
        Index.__init__(self, path, manifest)  # no retriever of its own: the shards have them
        self.store = store
        self.analyzer = shards[0].analyzer
        self.config = shards[0].config
        self.shards, self.bounds = shards, bounds

    def search_rows(self, queries: Sequence[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        found = _pool_map(lambda s: s.search_rows(queries, k), self.shards)
        return merge_top_k(
            [r for r, _ in found], [s for _, s in found], [a for a, _ in self.bounds], k
        )

    def score_rows(self, queries: Sequence[str], rows: np.ndarray) -> np.ndarray:
        parts = _pool_map(
            lambda sb: sb[0].score_rows(queries, _local_rows(rows, *sb[1])),
            list(zip(self.shards, self.bounds, strict=True)),
        )
        return np.asarray(np.sum(parts, axis=0), dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shards": self.shard_info()}


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
    def build_from(
        cls,
        source: Any,
        out: Path,
        *,
        of: IndexKind | str | None = None,
        shards: int = 2,
        lang: str | None = None,
        split: str | None = None,
        errors: ErrorLog | None = None,
        progress: bool = True,
        corpus_dir: Path | None = None,
        overwrite: bool = False,
        executor: Executor | ExecutorKind | str | None = None,
        device: str | None = None,
        **options: Any,
    ) -> Index:
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
        resolve_device(device)  # a missing GPU is refused before anything is read
        common = BuildOptions(split, errors, progress, corpus_dir, overwrite, executor, device)
        return cls.build_with(source, Path(out), settings, common)

    @classmethod
    def write(
        cls,
        out: Path,
        corpus: CorpusStore,
        settings: IndexSettings,
        options: BuildOptions,
        work: Path,
    ) -> None:
        """The shards under ``out/shards/``, each an index of the shards' kind over its rows
        of ``corpus`` (written beside it), and ``index.json`` naming them."""
        assert isinstance(settings, ShardedSettings)
        s = settings
        kind = IndexKind(s.of)
        bounds = shard_bounds(len(corpus), s.shards)
        # one language for all shards: each shard detecting its own could pick another
        # analyzer or default model
        lang_v = Lang(s.lang) if s.lang else detect_lang(corpus)
        collection = None
        if kind is IndexKind.BM25:
            bm = Bm25Settings.from_options(kind.value, {**s.shard, "lang": lang_v.value})
            collection = collection_stats(
                corpus, bm25_analyzer(lang_v, bm.stemming), include_title=bm.include_title
            )
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
                    out / rel, sub, bm, progress=options.progress, build=bm, collection=collection
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
                    **shard_opts,
                )
            parts.append({"path": rel, "rows": [a, b]})
        first = read_manifest(out / parts[0]["path"])
        if lexical is not None:
            if lexical_from is not None:
                copy_sparse(Path(lexical_from), out, corpus)
            else:
                write_sparse(out, corpus, lang=lang_v.value, progress=options.progress)
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
