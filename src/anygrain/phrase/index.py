"""The phrase index (IndexKind.PHRASE): DensePhrases' token vectors in two MIPS indexes.

Layout::

    index.json             manifest: model fingerprint, corpus checksum, L, tau, counts, sizes
    corpus/                the passage store (unless an existing store was reused)
    phrase/model/          the phrase model (PhraseEncoder.save), so the index carries its encoder
    phrase/start.npy ...   token vectors and metadata (see :mod:`anygrain.phrase.dump`)
    phrase/start.faiss     MIPS over the start vectors of start-capable tokens
    phrase/end.faiss       MIPS over the end vectors of end-capable tokens
    phrase/start_ids.npy   FAISS id -> token index (and end_ids.npy)

With ``compress`` (sq8, sq4, opq-pq; see :mod:`anygrain.phrase.compress`) the FAISS
indexes hold quantized codes and span scoring uses the vectors decoded from them, so
``start.npy``/``end.npy`` (the float16 dump) are optional and dropped by default.

Opening checks that the model's phrase fingerprint is the one the vectors were made
with: a different phrase encoder would put questions and phrases in different spaces.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import faiss
import numpy as np

from anygrain.corpus.source import corpus_ref, open_corpus_of, open_or_build_corpus
from anygrain.corpus.store import CorpusStore
from anygrain.dense.faiss_index import (
    FaissIndex,
    _unwrap,
    plan_training,
)
from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.errors import AnygrainError, IndexMismatchError, parse_enum
from anygrain.hits.hit import Hit, Unit, UnitSearchStats
from anygrain.index.base import (
    PASSAGE_METRICS,
    Index,
    IndexKind,
    check_build_target,
    register_index,
    write_manifest,
)
from anygrain.index.scope import Scope
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.phrase.compress import (
    Compress,
    DecodedVectors,
    compressed_factory,
    default_pq_m,
    ivf_prefix,
)
from anygrain.phrase.dump import END_OK, START_OK, DumpStats, dump_phrases
from anygrain.phrase.lexical import (
    LexicalQuery,
    LexicalScorer,
    SparseFusion,
    copy_sparse,
    dense_stats,
    fuse,
    open_sparse,
    write_sparse,
)
from anygrain.phrase.model import PhraseEncoder
from anygrain.phrase.search import (
    Phrases,
    PhraseTable,
    UnitHit,
    aggregate,
    merge,
    search_candidates,
    search_scope,
    single_thread,
    unit_hits,
)
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.device import place

if TYPE_CHECKING:
    from anygrain.corpus.questions import Questions
    from anygrain.eval.evaluate import EvalReport

SUBDIR = "phrase"
#: The float16 vectors; optional once the FAISS indexes hold codes to decode.
DUMP_FILES = ("start.npy", "end.npy")


@dataclass(frozen=True)
class PhraseSettings(IndexSettings):
    """What ``Index.build(kind="phrase")`` takes besides the shared options."""

    model: str | Path | PhraseEncoder | None = None  # default: the shipped model for ``lang``
    threshold: float | None = None  # filter tau (a logit); default: the model's recorded one
    factory: str | None = None  # FAISS factory string (default: from size and ``compress``)
    lang: str | None = None  # en | zh: picks the default model (detected when None)
    batch_size: int = 32
    bf16: bool = False
    shard_size: int = 2000
    max_phrase_words: int | None = None  # default: the model's
    compress: Compress = Compress.NONE
    pq_m: int | None = None  # opq-pq: bytes per vector (default dim/8)
    keep_dump: bool | None = None  # keep the float16 vectors (default: only uncompressed)
    # the lexical part (BM25 of each phrase's passage, fused into its score): built with
    # the index unless ``sparse`` is off; ``sparse_from`` copies an existing BM25 index
    sparse: bool = True
    sparse_from: str | None = None
    sparse_weight: float | None = None  # default: DEFAULT_SPARSE_WEIGHT

    def __post_init__(self) -> None:
        if self.lang is not None:
            from anygrain.corpus.lang import Lang

            parse_enum(Lang, self.lang)
        # a name from JSON or the command line becomes the enum (frozen: set it directly)
        object.__setattr__(self, "compress", parse_enum(Compress, self.compress))
        for name in ("batch_size", "shard_size", "max_phrase_words", "pq_m"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise AnygrainError(f"phrase index {name} must be at least 1, got {v}")
        if self.sparse_from is not None and not self.sparse:
            raise AnygrainError("sparse_from needs the lexical part on (sparse=True)")
        self.fusion()  # checks the weight

    def fusion(self) -> SparseFusion | None:
        """The lexical fusion these settings ask for (None: a pure dense index)."""
        if not self.sparse:
            return None
        return SparseFusion().with_weight(self.sparse_weight)


def as_phrase_model(
    model: str | Path | PhraseEncoder | None, *, lang: str | None = None
) -> PhraseEncoder:
    """A phrase model from an instance, a shipped model's name (``phrase-minilm``) or a saved
    directory; ``None`` is the shipped default for ``lang``.  An untrained encoder is refused."""
    from anygrain.models.shipped import SHIPPED, default_phrase_model, shipped_model_dir

    if isinstance(model, PhraseEncoder):
        return model
    if model is None:
        model = default_phrase_model(lang)
    if str(model) in SHIPPED:
        return PhraseEncoder.load(shipped_model_dir(str(model)))
    p = Path(str(model)).expanduser()
    if not p.exists():
        raise AnygrainError(
            f"{model}: no such phrase model directory (shipped models: {', '.join(SHIPPED)})"
        )
    if not (p / "anygrain_phrase.json").exists():
        raise AnygrainError(
            f"{model}: not a phrase model; train one with `anygrain train phrase` and pass its "
            "directory as --model"
        )
    return PhraseEncoder.load(p)


#: Above this many vectors fp16 cells get large (~770 bytes per 384-d vector); PQ beyond.
PQ_LIMIT = 20_000_000


def default_phrase_factory(n_vectors: int, dim: int) -> str:
    """The FAISS factory for phrase vectors when none is given.

    Phrase vectors are stored as float16, so FAISS keeps them as float16 too
    (``SQfp16``: half of ``Flat``'s memory, the same scores, and faster to scan).

    - ``N < 100k``: ``SQfp16``, exact.
    - ``N < 20M``: ``IVF{sqrt(N)},SQfp16``: sqrt(N) cells rather than dense's 4·sqrt(N),
      since a phrase index holds ~100x more vectors than passages and k-means on
      4·sqrt(N) cells is slow to train on a CPU; ``nprobe`` defaults to sqrt(cells).
    - beyond: ``IVF{sqrt(N)},PQ{dim/8}`` (8 dimensions per byte).
    """
    if n_vectors < PQ_LIMIT:
        return f"{ivf_prefix(n_vectors)}SQfp16"
    return f"{ivf_prefix(n_vectors)}PQ{default_pq_m(dim)}"


class _Vectors:
    """Stored vectors as a FAISS VectorSource: rows ``ids`` of a float16 memory map."""

    def __init__(self, arr: np.ndarray, ids: np.ndarray) -> None:
        self.arr = arr
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.arr.shape[1])

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray:
        if n >= len(self.ids):
            pick = self.ids
        else:
            rng = np.random.default_rng(seed)
            pick = self.ids[np.sort(rng.choice(len(self.ids), size=n, replace=False))]
        return np.asarray(self.arr[pick], dtype=np.float32)

    def iter_batches(self, batch_size: int = 65536) -> Any:
        for i in range(0, len(self.ids), batch_size):
            yield i, np.asarray(self.arr[self.ids[i : i + batch_size]], dtype=np.float32)


@register_index(IndexKind.PHRASE)
class PhraseIndex(Index):
    """Phrase retrieval; ``search`` returns phrase hits (or sentences, passages, documents)."""

    units = (Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT)
    default_unit = Unit.PHRASE
    takes_query_model = True
    settings_type = PhraseSettings

    @classmethod
    def default_metrics(cls, k: int | None, unit: Unit, scope: Scope = Scope.CORPUS) -> list[str]:
        """Phrases: EM/F1 of the top phrase, top@1 and top@k (k: 10).  Sentences, passages
        and documents: the passage-grain set every kind reports (``PASSAGE_METRICS``), but
        only EM/F1 for a passage or document searched in its one gold passage (any unit
        metric would be 1 or 0 at every cutoff: :func:`refuse_one_candidate_metrics`)."""
        from anygrain.phrase.evaluate import ONE_CANDIDATE_UNITS

        if unit in ONE_CANDIDATE_UNITS and scope is Scope.GOLD_PASSAGE:
            return ["em", "f1"]
        if unit is not Unit.PHRASE:
            return list(PASSAGE_METRICS)
        k = 10 if k is None else k
        return ["em", "f1", "top@1"] + ([f"top@{k}"] if k > 1 else [])

    @classmethod
    def default_model_fingerprint(cls, lang: str) -> str | None:
        """The phrase fingerprint of the shipped default phrase model for ``lang``."""
        from anygrain.corpus.readers._io import load_json
        from anygrain.models.shipped import default_phrase_model, shipped_model_dir
        from anygrain.phrase.model import MODEL_CONFIG, PhraseConfig

        cfg = shipped_model_dir(default_phrase_model(lang)) / MODEL_CONFIG
        return PhraseConfig.from_dict(load_json(cfg), str(cfg)).phrase_fingerprint

    def evaluate_questions(
        self,
        questions: Questions,
        *,
        unit: Unit,
        scope: Scope,
        k: int | None,
        metrics: list[str],
        run_out: str | Path | None,
        drop_empty: bool,
        progress: bool,
        search_options: dict[str, Any] | None,
    ) -> EvalReport:
        """EM/F1 and top@k at ``unit``, over the whole index or (``gold-passage``) each
        question's own passage (D = {p}); see :func:`anygrain.phrase.evaluate.evaluate_phrase`."""
        from anygrain.eval.coverage import check_qrels_coverage
        from anygrain.phrase.evaluate import evaluate_phrase, refuse_one_candidate_metrics

        refuse_one_candidate_metrics(self.path, unit, scope, metrics)
        coverage = check_qrels_coverage(questions, self.unit_ids(unit), where=self._on(questions))
        report = evaluate_phrase(
            self,
            questions,
            k=k,
            unit=unit,
            scope=scope,
            metrics=metrics,
            run_out=run_out,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
        report.n_qrels_ids = coverage.n_ids
        report.n_qrels_ids_missing = coverage.n_missing
        return report

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        model: PhraseEncoder,
        table: PhraseTable,
        start_index: FaissIndex,
        end_index: FaissIndex,
        start_ids: np.ndarray,
        end_ids: np.ndarray,
    ) -> None:
        super().__init__(path, manifest)
        self.store = store
        self.model = model
        self.table = table
        self.start_index = start_index
        self.end_index = end_index
        self.start_ids = start_ids
        self.end_ids = end_ids
        self.max_words = int(manifest["settings"]["max_phrase_words"])
        sp = manifest["settings"].get("sparse")
        self.fusion = SparseFusion.from_dict(sp, f"{path}/index.json") if sp else None
        # the BM25 part opens on first use: a pure-dense search never reads it
        self._lexical: LexicalScorer | None = None

    @property
    def lexical(self) -> LexicalScorer | None:
        """The BM25 part fused into phrase scores (None for an index built without it)."""
        if self.fusion is not None and self._lexical is None:
            self._lexical = open_sparse(self.path, self.store)
        return self._lexical

    def search_fusion(self, sparse_weight: float | None) -> SparseFusion | None:
        """The fusion a search uses: the saved one with ``sparse_weight`` (None: saved
        weight); None, a pure dense search, at weight 0."""
        if self.fusion is None:
            if sparse_weight:
                raise AnygrainError(
                    f"{self.path}: this phrase index has no lexical part to weigh; add one "
                    "with `anygrain phrase attach-sparse` (or build with the default --sparse)"
                )
            return None
        f = self.fusion.with_weight(sparse_weight)
        return f if f.weight > 0 else None

    @property
    def corpus(self) -> CorpusStore:
        return self.store

    # --- building ---------------------------------------------------------------------
    @classmethod
    def build_with(
        cls, source: Any, out: Path, settings: IndexSettings, common: BuildOptions
    ) -> PhraseIndex:
        """Encode ``source`` with a trained phrase model and write a phrase index to ``out``.

        ``threshold`` is the filter's tau (a logit; default: the model's recorded
        one, None keeps every word-boundary token).  The dump is resumable: an
        interrupted build picks up at its last finished shard.  ``compress`` quantizes
        the FAISS indexes (``pq_m``: PQ bytes per vector); ``keep_dump`` keeps the float16
        vectors beside them (default: only when uncompressed).  See :class:`PhraseSettings`.
        """
        assert isinstance(settings, PhraseSettings)
        s, c = settings, common
        check_build_target(source, out, overwrite=c.overwrite)
        out = Path(out)
        # a named model is checked before any work; the default follows the corpus language
        enc = as_phrase_model(s.model) if s.model is not None else None
        partial = out.with_name(f".{out.name}.phrase.partial")
        with atomic_dir(out) as tmp:
            store = open_or_build_corpus(
                source,
                c.corpus_dir or tmp / "corpus",
                split=c.split,
                errors=c.errors,
                progress=c.progress,
            )
            name = str(s.model) if isinstance(s.model, str | Path) else None
            if enc is None:
                from anygrain.corpus.lang import detect_lang
                from anygrain.models.shipped import default_phrase_model

                lang = s.lang or detect_lang(store).value
                enc = as_phrase_model(None, lang=lang)
                name = default_phrase_model(lang)
            cls.write(
                tmp,
                store,
                enc,
                work=partial,
                threshold=s.threshold if s.threshold is not None else enc.config.filter_threshold,
                factory=s.factory,
                batch_size=s.batch_size,
                bf16=s.bf16,
                shard_size=s.shard_size,
                max_phrase_words=s.max_phrase_words,
                progress=c.progress,
                compress=s.compress,
                pq_m=s.pq_m,
                keep_dump=s.keep_dump,
                build=s,
                executor=c.executor,
                lexical=s.fusion(),
                lexical_from=s.sparse_from,
                lexical_lang=s.lang,
                device=c.device,
                model_name=name,
            )
        shutil.rmtree(partial, ignore_errors=True)
        return Index.load(out)  # type: ignore[return-value]

    @classmethod
    def write(
        cls,
        out: Path,
        store: CorpusStore,
        model: PhraseEncoder,
        *,
        work: Path,
        threshold: float | None,
        factory: str | None = None,
        batch_size: int = 32,
        bf16: bool = False,
        shard_size: int = 2000,
        max_phrase_words: int | None = None,
        progress: bool = True,
        on_shard: Any = None,
        compress: Compress | str = Compress.NONE,
        pq_m: int | None = None,
        keep_dump: bool | None = None,
        build: PhraseSettings | None = None,
        executor: Executor | ExecutorKind | str | None = None,
        lexical: SparseFusion | None = None,
        lexical_from: str | Path | None = None,
        lexical_lang: str | None = None,
        device: str | None = None,
        model_name: str | None = None,
    ) -> dict[str, Any]:
        """Dump, build both MIPS indexes and write ``index.json`` under ``out`` (``build``:
        the settings the index was asked for, recorded as ``settings.build``; ``executor``
        runs the dump's shards, default in this process; not recorded: the dump is the same).
        ``lexical``: fuse BM25 into phrase scores, with a BM25 index built here (language
        ``lexical_lang``, default detected) or copied from ``lexical_from``.
        ``model_name``: how the model was named (a shipped name or a directory), recorded
        beside its fingerprint for summaries."""
        out = Path(out)
        if lexical is not None:
            if lexical_from is not None:
                copy_sparse(Path(lexical_from), out, store)
            else:
                write_sparse(out, store, lang=lexical_lang, progress=progress)
        base = out / SUBDIR
        base.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        model.save(base / "model")  # records the fingerprint of the weights as they are now
        fingerprint = model.config.phrase_fingerprint
        stats = dump_phrases(
            store,
            model,
            work,
            base,
            threshold=threshold,
            shard_size=shard_size,
            batch_size=batch_size,
            bf16=bf16,
            progress=progress,
            on_shard=on_shard,
            executor=executor,
            device=device,
        )
        settings: dict[str, Any] = {
            "max_phrase_words": model.config.max_phrase_words
            if max_phrase_words is None
            else int(max_phrase_words),
            "threshold": threshold,
            "dim": model.dim,
            "dtype": "float16",
            "include_title": model.config.include_title,
            "max_passage_length": model.config.max_passage_length,
            "doc_stride": model.config.doc_stride,
            "bf16": bf16,
        }
        if lexical is not None:
            settings["sparse"] = lexical.to_dict()
        if build is not None:
            settings["build"] = build.to_dict()
        model_info = {
            "fingerprint": fingerprint,
            "base_model": model.config.base_model,
            "path": f"{SUBDIR}/model",
        }
        if model_name is not None:
            model_info["name"] = model_name
        return finish_index(
            out,
            store,
            stats,
            settings=settings,
            model_info=model_info,
            factory=factory,
            progress=progress,
            timings={"dump_seconds": round(time.time() - t0, 3)},
            compress=compress,
            pq_m=pq_m,
            keep_dump=keep_dump,
        )

    # --- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path,
        manifest: dict[str, Any],
        *,
        store: CorpusStore | None = None,
        model: str | Path | PhraseEncoder | None = None,
        mmap: bool = True,
        device: str | None = None,
        **options: Any,
    ) -> PhraseIndex:
        """Open the index; ``model`` replaces the saved one (it must make the same phrases);
        ``device`` is where questions are encoded (None: auto)."""
        path = Path(path)
        base = path / SUBDIR
        want = manifest.get("model", {}).get("fingerprint")
        if model is None:
            # re-hashing the weights (a fraction of a second) catches a model swapped or
            # damaged inside the index directory, which the recorded fingerprint alone cannot
            enc = PhraseEncoder.load(path / manifest["model"]["path"])
            got = enc.config.phrase_fingerprint
        else:
            enc = as_phrase_model(model)
            got = enc.phrase_fingerprint()
        if got != want:
            raise IndexMismatchError(
                f"{path}: the model's phrase encoder (fingerprint {got}) is not the one this index "
                f"was built with ({want}); its questions would not match the stored phrase vectors. "
                "Use the index's own model or rebuild the index with this one."
            )
        place(enc, device)
        store = store or open_corpus_of(path, manifest)
        decoded = manifest["settings"].get("span_vectors") == "codes"
        for name in (
            *(() if decoded else DUMP_FILES),
            "tokens.npy",
            "passage_ptr.npy",
            "start.faiss",
            "end.faiss",
            "start_ids.npy",
            "end_ids.npy",
        ):
            if not (base / name).exists():
                raise AnygrainError(f"{path}: incomplete phrase index (missing {SUBDIR}/{name})")
        mode: Literal["r"] | None = "r" if mmap else None
        tokens = _load_array(base / "tokens.npy", None)
        ptr = _load_array(base / "passage_ptr.npy", None)
        n = len(tokens)
        factory = manifest["settings"].get("factory", "")
        fs = FaissIndex.load(base / "start.faiss", factory=factory, mmap=mmap)
        fe = FaissIndex.load(base / "end.faiss", factory=factory, mmap=mmap)
        start_ids = _load_array(base / "start_ids.npy", None)
        end_ids = _load_array(base / "end_ids.npy", None)
        if fs.ntotal != len(start_ids) or fe.ntotal != len(end_ids):
            raise IndexMismatchError(f"{path}: FAISS indexes do not match the stored tokens")
        start: Any
        end: Any
        if decoded:
            if (len(start_ids) and int(start_ids.max()) >= n) or (
                len(end_ids) and int(end_ids.max()) >= n
            ):
                raise IndexMismatchError(f"{path}: FAISS ids point past the stored tokens")
            start, end = DecodedVectors(fs, start_ids, n), DecodedVectors(fe, end_ids, n)
        else:
            start = _load_array(base / "start.npy", mode)
            end = _load_array(base / "end.npy", mode)
        if (
            tokens.ndim != 2
            or tokens.shape[1] < 6
            or len(start) != n
            or len(end) != n
            or len(ptr) == 0
            or int(ptr[-1]) != n
        ):
            raise AnygrainError(
                f"{path}: phrase arrays disagree (tokens {tokens.shape}, start {start.shape}, "
                f"end {end.shape}, passage_ptr ending at {int(ptr[-1]) if len(ptr) else None}); "
                "rebuild the index"
            )
        table = PhraseTable(start, end, tokens, ptr)
        if len(table.passage_ptr) != len(store) + 1:
            raise IndexMismatchError(
                f"{path}: phrase dump covers {len(table.passage_ptr) - 1} passages, "
                f"the corpus has {len(store)}; rebuild the index"
            )
        return cls(path, manifest, store, enc, table, fs, fe, start_ids, end_ids)

    # --- search -----------------------------------------------------------------------
    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int = 64, bf16: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(q_start, q_end)`` float32 vectors."""
        return self.model.encode_questions(list(queries), batch_size=batch_size, bf16=bf16)

    def mips(
        self, q_start: np.ndarray, q_end: np.ndarray, k: int, *, nprobe: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The two raw FAISS calls: top-``k`` start and end token indices (-1 = none)."""
        rs, _ = self.start_index.search(q_start, k, nprobe=nprobe)
        re_, _ = self.end_index.search(q_end, k, nprobe=nprobe)
        ts = np.where(rs >= 0, self.start_ids[np.maximum(rs, 0)], -1)
        te = np.where(re_ >= 0, self.end_ids[np.maximum(re_, 0)], -1)
        return ts, te

    def search_phrases(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        *,
        top_k: int = 100,
        scope_rows: Sequence[Sequence[int]] | None = None,
        max_words: int | None = None,
        nprobe: int | None = None,
        lexical: Sequence[LexicalQuery] | None = None,
        fusion: SparseFusion | None = None,
    ) -> list[Phrases]:
        """Scored phrases per question from ready-made question vectors (best first).
        With ``fusion`` and the questions' ``lexical`` side, scores are fused with BM25
        (:mod:`anygrain.phrase.lexical`) and BM25's top passages add candidates."""
        L = int(max_words or self.max_words)
        n = len(q_start)
        fused = fusion is not None and lexical is not None
        if scope_rows is not None:
            if len(scope_rows) != n:
                raise AnygrainError(f"scope_rows has {len(scope_rows)} entries for {n} queries")
            nrows = len(self.table.passage_ptr) - 1
            for rows in scope_rows:
                bad = [r for r in rows if not 0 <= int(r) < nrows]
                if bad:
                    raise AnygrainError(f"scope row {bad[0]} out of range (0..{nrows - 1})")
            if fused:
                assert fusion is not None and lexical is not None
                mips = self._mips_scored(q_start, q_end, fusion.norm_depth, nprobe)
                with single_thread():
                    return [
                        self._fused_phrases(q_start, q_end, i, mips, lexical[i], fusion, L, rows)
                        for i, rows in enumerate(scope_rows)
                    ]
            with single_thread():
                return [
                    search_scope(self.table, q_start[i], q_end[i], rows, L)
                    for i, rows in enumerate(scope_rows)
                ]
        if fused:
            assert fusion is not None and lexical is not None
            mips = self._mips_scored(q_start, q_end, max(top_k, fusion.norm_depth), nprobe)
            with single_thread():
                return [
                    self._fused_phrases(q_start, q_end, i, mips, lexical[i], fusion, L)
                    for i in range(n)
                ]
        kk = min(top_k, max(len(self.start_ids), 1), max(len(self.end_ids), 1))
        ts, te = self.mips(q_start, q_end, kk, nprobe=nprobe)
        with single_thread():
            return [
                search_candidates(self.table, q_start[i], q_end[i], ts[i], te[i], L)
                for i in range(n)
            ]

    def _mips_scored(
        self, q_start: np.ndarray, q_end: np.ndarray, k: int, nprobe: int | None
    ) -> _Mips:
        """Top-``k`` start and end tokens with their MIPS scores (NaN where none)."""
        ks = min(k, max(len(self.start_ids), 1))
        ke = min(k, max(len(self.end_ids), 1))
        rs, ss = self.start_index.search(q_start, ks, nprobe=nprobe)
        re_, se = self.end_index.search(q_end, ke, nprobe=nprobe)
        return _Mips(
            np.where(rs >= 0, self.start_ids[np.maximum(rs, 0)], -1),
            np.where(re_ >= 0, self.end_ids[np.maximum(re_, 0)], -1),
            np.where(rs >= 0, ss, np.nan).astype(np.float32),
            np.where(re_ >= 0, se, np.nan).astype(np.float32),
        )

    def _fused_phrases(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        i: int,
        mips: _Mips,
        lex: LexicalQuery,
        fusion: SparseFusion,
        max_words: int,
        rows: Sequence[int] | None = None,
    ) -> Phrases:
        """Question ``i``'s phrases with fused scores, best first: from its MIPS candidates
        and BM25's top passages, or (``rows``) every phrase of those passages."""
        qs, qe = q_start[i], q_end[i]
        if rows is not None:
            ph = search_scope(self.table, qs, qe, rows, max_words)
        else:
            ph = search_candidates(self.table, qs, qe, mips.ts[i], mips.te[i], max_words)
            if len(lex.top_rows):
                ph = merge(ph, search_scope(self.table, qs, qe, lex.top_rows, max_words))
        if not len(ph):
            return ph
        stats = dense_stats(mips.ss[i], mips.se[i], fusion.norm_depth)
        score = fuse(ph.score, self.table.row[ph.start], stats, lex, fusion)
        order = np.lexsort((ph.start, -score))
        return Phrases(ph.start[order], ph.end[order], score[order])

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        unit: Unit | str | None = None,
        scope_rows: Sequence[Sequence[int]] | None = None,
        top_k: int | None = None,
        max_words: int | None = None,
        nprobe: int | None = None,
        batch_size: int = 64,
        bf16: bool = False,
        max_depth: int | None = None,
        exact: bool = False,
        stats: list[UnitSearchStats] | None = None,
        sparse_weight: float | None = None,
        **options: Any,
    ) -> list[list[Hit]]:
        """Top-``k`` units per query.  ``unit`` picks the grain (default: phrases); coarser
        units are scored by their best phrase.  ``scope_rows`` restricts each query to given
        passage rows (searched exhaustively).  ``top_k`` is the MIPS depth per side
        (default ``max(100, 10·k)``).

        Sentences, passages and documents are searched in rounds (:meth:`search_units`):
        when the phrases found cover fewer than ``k`` units the depth doubles, up to
        ``max_depth`` (default ``max(64·k, top_k)``, at most the index size).  With
        ``exact`` a round must also prove its top ``k`` exact (or retrieve everything).
        Each query's :class:`UnitSearchStats` is appended to ``stats`` when given.

        Scores fuse BM25 into the dense phrase score when the index has a lexical part
        (:mod:`anygrain.phrase.lexical`); ``sparse_weight`` overrides its saved weight for
        this search, and 0 gives the pure dense score.
        """
        u = Unit(unit) if unit is not None else Unit.PHRASE
        depth = top_k or max(100, 10 * k)
        L = int(max_words or self.max_words)
        fusion = self.search_fusion(sparse_weight)
        out: list[list[Hit]] = []
        for i in range(0, len(queries), batch_size):
            batch = list(queries[i : i + batch_size])
            qs, qe = self.encode_queries(batch, batch_size=batch_size, bf16=bf16)
            lex = None
            if fusion is not None:
                assert self.lexical is not None
                lex = self.lexical.queries(batch, fusion)
            scope = scope_rows[i : i + batch_size] if scope_rows is not None else None
            if u is Unit.PHRASE or scope is not None:
                phrases = self.search_phrases(
                    qs,
                    qe,
                    top_k=depth,
                    scope_rows=scope,
                    max_words=L,
                    nprobe=nprobe,
                    lexical=lex,
                    fusion=fusion,
                )
                found = [aggregate(self.table, self.store, p, k, u) for p in phrases]
                if stats is not None:
                    stats.extend(
                        UnitSearchStats(1, depth, len(f), False, scope is not None) for f in found
                    )
            else:
                found, st = self.search_units(
                    qs,
                    qe,
                    k,
                    u,
                    depth=depth,
                    max_depth=max_depth,
                    exact=exact,
                    max_words=L,
                    nprobe=nprobe,
                    lexical=lex,
                    fusion=fusion,
                )
                if stats is not None:
                    stats.extend(st)
            out.extend(unit_hits(self.table, self.store, found, u))
        return out

    def score_rows(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        rows: np.ndarray,
        *,
        max_words: int | None = None,
    ) -> np.ndarray:
        """Each candidate passage's exact score: its best phrase for the question (the
        paper's passage score), so phrase scores fuse with another system's over the same
        candidates.  ``rows`` is (n, c) with -1 padding, which scores ``-inf``."""
        rows = np.asarray(rows, dtype=np.int64)
        L = int(max_words or self.max_words)
        out = np.full(rows.shape, -np.inf, dtype=np.float32)
        with single_thread():
            for i in range(len(rows)):
                valid = rows[i][rows[i] >= 0]
                if not len(valid):
                    continue
                ph = search_scope(self.table, q_start[i], q_end[i], valid, L)
                if not len(ph):
                    continue
                # phrases come best first: a row's first phrase is its max
                prow = self.table.row[ph.start]
                uniq, first = np.unique(prow, return_index=True)
                best = dict(zip(uniq.tolist(), ph.score[first].tolist(), strict=True))
                for j, r in enumerate(rows[i].tolist()):
                    if r in best:
                        out[i, j] = best[r]
        return out

    @property
    def exact_mips(self) -> bool:
        """Whether both MIPS searches are exhaustive scans scoring the very vectors span
        scoring reads (so a round's lowest MIPS scores bound every phrase not found)."""
        if self.start_index.ivf is not None or self.end_index.ivf is not None:
            return False
        for fx in (self.start_index, self.end_index):
            if not isinstance(_unwrap(fx.index), faiss.IndexFlatCodes):
                return False
        lossless = self.manifest["settings"].get("factory") in ("Flat", "SQfp16")
        return isinstance(self.table.start, DecodedVectors) or lossless

    def search_units(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        k: int,
        unit: Unit,
        *,
        depth: int = 100,
        max_depth: int | None = None,
        exact: bool = False,
        max_words: int | None = None,
        nprobe: int | None = None,
        lexical: Sequence[LexicalQuery] | None = None,
        fusion: SparseFusion | None = None,
    ) -> tuple[list[list[UnitHit]], list[UnitSearchStats]]:
        """Top-``k`` sentences, passages or documents per question, retrying deeper.

        A round retrieves ``depth`` starts and ends per question, scores phrases and keeps
        each unit's best.  A question is done when its phrases cover ``k`` units; with
        ``exact``, when moreover the ``k``-th unit's score is at least the highest score a
        phrase not found could have (below), or every vector was retrieved.  Otherwise the
        depth doubles, up to ``max_depth`` (default ``max(64·k, depth)``; with ``exact`` the
        index size), where the question stops as *exhausted*.

        The bound: a phrase whose start was retrieved is scored with its best end, and one
        whose end was retrieved is beaten by the end's best start (same passage); any other
        phrase scores at most ``s_last + e_last`` (the lowest start and end scores
        retrieved).  A sentence holds a phrase by its start, so for sentences the bound is
        ``s_last + e_first``.  It holds when MIPS is an exhaustive scan of the vectors span
        scoring reads (:attr:`exact_mips`); with IVF it does not, and ``exact`` changes
        nothing (no round can be proven, so the usual ``max_depth`` bound applies).

        With ``fusion`` (and ``lexical``) phrases carry fused scores: BM25's top passages
        are scanned in every round, and the bound becomes the fused score of the dense
        bound in the passage with the highest BM25 score (a passage's BM25 part is the same
        for all its phrases, so pairing each candidate with its best partner still holds).
        """
        if unit is Unit.PHRASE:
            raise AnygrainError("search_units ranks sentences, passages or documents")
        L = int(max_words or self.max_words)
        n = len(q_start)
        n_s, n_e = len(self.start_ids), len(self.end_ids)
        n_max = max(n_s, n_e, 1)
        certify = self.exact_mips
        # no proof is possible past an approximate MIPS: ``exact`` then keeps the usual bound
        bound = n_max if exact and certify else min(max(max_depth or 64 * k, depth), n_max)
        fused = fusion is not None and lexical is not None
        if fused:
            assert fusion is not None
            d = min(max(depth, fusion.norm_depth), max(bound, fusion.norm_depth))
            bound = max(bound, d)
        else:
            d = min(depth, bound)
        found: list[list[UnitHit]] = [[] for _ in range(n)]
        stats: list[UnitSearchStats | None] = [None] * n
        pending = np.arange(n)
        rounds = 0
        while len(pending):
            rounds += 1
            qs_p, qe_p = q_start[pending], q_end[pending]
            mips = self._mips_scored(qs_p, qe_p, d, nprobe)
            all_s, all_e = d >= n_s, d >= n_e
            left = []
            with single_thread():
                for j, qi in enumerate(pending.tolist()):
                    to_fused = None
                    if fused:
                        assert fusion is not None and lexical is not None
                        lex = lexical[qi]
                        ph = self._fused_phrases(qs_p, qe_p, j, mips, lex, fusion, L)
                        to_fused = _bound_map(mips, j, lex, fusion)
                    else:
                        ph = search_candidates(
                            self.table, q_start[qi], q_end[qi], mips.ts[j], mips.te[j], L
                        )
                    hits = aggregate(self.table, self.store, ph, k, unit)
                    proven = certify and (
                        all_s
                        or _certified(
                            hits, k, unit, mips.ss[j], mips.se[j], all_e, to_fused=to_fused
                        )
                    )
                    done = proven if exact and certify else len(hits) >= k
                    if done or d >= bound:
                        found[qi] = hits
                        stats[qi] = UnitSearchStats(rounds, d, len(hits), not done, proven)
                    else:
                        left.append(qi)
            pending = np.asarray(left, dtype=np.int64)
            d = min(2 * d, bound)
        return found, [s for s in stats if s is not None]

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "faiss": {"start": self.start_index.ntotal, "end": self.end_index.ntotal},
        }


def finish_index(
    out: Path,
    store: CorpusStore,
    stats: DumpStats,
    *,
    settings: dict[str, Any],
    model_info: dict[str, Any],
    factory: str | None,
    progress: bool,
    timings: dict[str, Any],
    compress: Compress | str = Compress.NONE,
    pq_m: int | None = None,
    keep_dump: bool | None = None,
) -> dict[str, Any]:
    """Build both MIPS indexes over the token arrays in ``out/phrase`` and write ``index.json``.

    Shared by a fresh build (after the dump) and :func:`anygrain.phrase.refilter.refilter`
    (after subsetting an existing dump), so both write the same layout and manifest.
    ``compress`` picks the factory when ``factory`` is not given; span scoring reads the
    float16 dump only when the index is uncompressed and the dump is kept (``keep_dump``,
    default: kept for ``none``), otherwise the vectors decoded from the FAISS codes.
    """
    comp = Compress(compress)
    keep = (comp is Compress.NONE) if keep_dump is None else bool(keep_dump)
    base = out / SUBDIR
    t0 = time.time()
    start = np.load(base / "start.npy", mmap_mode="r")
    end = np.load(base / "end.npy", mmap_mode="r")
    flags = np.load(base / "tokens.npy", mmap_mode="r")[:, 3]
    start_ids = np.flatnonzero(flags & START_OK).astype(np.int64)
    end_ids = np.flatnonzero(flags & END_OK).astype(np.int64)
    if not len(start_ids) or not len(end_ids):
        raise AnygrainError(
            f"no phrase vectors passed the filter (threshold {settings['threshold']}); "
            "lower --threshold"
        )
    np.save(base / "start_ids.npy", start_ids)
    np.save(base / "end_ids.npy", end_ids)
    dim = int(settings["dim"])
    # Both sides use one factory, checked for each before building: chosen for the larger
    # side, or, compressed, for the smaller (its training points bound the PQ bits).
    spec = (
        factory
        or compressed_factory(comp, min(len(start_ids), len(end_ids)), dim, pq_m=pq_m)
        or default_phrase_factory(max(len(start_ids), len(end_ids)), dim)
    )
    for n_side in (len(start_ids), len(end_ids)):
        plan_training(n_side, dim, spec)
    fx_s = FaissIndex.build(_Vectors(start, start_ids), spec, progress=progress)
    fx_s.save(base / "start.faiss")
    fx_e = FaissIndex.build(_Vectors(end, end_ids), spec, progress=progress)
    fx_e.save(base / "end.faiss")
    del start, end
    if not keep:
        for name in DUMP_FILES:
            (base / name).unlink(missing_ok=True)
    sizes = {f.name: f.stat().st_size for f in base.iterdir() if f.is_file()}
    n_bytes = sum(sizes.values())
    settings = {
        **settings,
        "factory": fx_s.factory,
        "nprobe": fx_s.nprobe,
        "compress": comp.value,
        "pq_m": pq_m,
        "dump": keep,
        # where span scoring reads vectors: the float16 dump, or the FAISS codes decoded
        "span_vectors": "dump" if keep and comp is Compress.NONE else "codes",
    }
    counts = {
        "passages": stats.n_passages,
        "tokens_seen": stats.n_tokens_seen,
        "tokens_kept": stats.n_kept,
        "start_vectors": stats.n_start,
        "end_vectors": stats.n_end,
        "vectors_per_passage": round((stats.n_start + stats.n_end) / max(stats.n_passages, 1), 3),
        "tokens_kept_per_passage": round(stats.n_kept / max(stats.n_passages, 1), 3),
        "kept_fraction": round(stats.n_kept / max(stats.n_tokens_seen, 1), 4),
        "bytes": n_bytes,
        "bytes_per_passage": round(n_bytes / max(stats.n_passages, 1), 1),
        "faiss_bytes": sizes.get("start.faiss", 0) + sizes.get("end.faiss", 0),
        "dump_bytes": sum(sizes.get(name, 0) for name in DUMP_FILES),
    }
    write_manifest(
        out,
        IndexKind.PHRASE,
        PhraseIndex.format_version,
        corpus={
            "path": corpus_ref(out, store),
            "checksum": store.checksum,
            "n_passages": len(store),
        },
        model=model_info,
        settings=settings,
        counts=counts,
        timings={
            **timings,
            "faiss_seconds": round(time.time() - t0, 3),
            "shards_resumed": stats.shards_done_before,
        },
    )
    return {"settings": settings, "counts": counts}


def _load_array(path: Path, mode: Literal["r"] | None) -> np.ndarray:
    """``np.load`` with an error naming the file when it is truncated or not an array."""
    try:
        return np.load(path, mmap_mode=mode)  # type: ignore[no-any-return]
    except (ValueError, OSError, EOFError) as e:
        raise AnygrainError(f"{path}: unreadable ({e}); rebuild the index") from None


@dataclass
class _Mips:
    """One MIPS round: start and end token indices (-1: none) and scores (NaN: none)."""

    ts: np.ndarray
    te: np.ndarray
    ss: np.ndarray
    se: np.ndarray


def _bound_map(mips: _Mips, j: int, lex: LexicalQuery, fusion: SparseFusion) -> Any:
    """The fused score a phrase with dense score ``b`` could at most have (its passage at
    BM25's best: the first of the question's top rows, or any row when none scored), for
    certifying a fused unit search."""
    stats = dense_stats(mips.ss[j], mips.se[j], fusion.norm_depth)
    best = lex.top_rows[:1] if len(lex.top_rows) else np.zeros(1, np.int64)

    def to_fused(b: float) -> float:
        return float(fuse(np.array([b], np.float32), best, stats, lex, fusion)[0])

    return to_fused


def _certified(
    hits: list[UnitHit],
    k: int,
    unit: Unit,
    s_scores: np.ndarray,
    e_scores: np.ndarray,
    all_e: bool,
    *,
    to_fused: Any = None,
) -> bool:
    """Whether the ``k``-th unit's score beats every phrase the round did not find
    (see :meth:`PhraseIndex.search_units`); ``s_scores``/``e_scores`` are one question's MIPS
    scores, best first, with every start not retrieved scoring at most the last
    (``to_fused`` maps that dense bound to fused scores)."""
    if len(hits) < k:
        return False
    s_scores = s_scores[np.isfinite(s_scores)]
    e_scores = e_scores[np.isfinite(e_scores)]
    if not len(s_scores) or not len(e_scores):
        return False
    s_last = float(s_scores[-1])
    if unit is Unit.SENTENCE:
        e_part = float(e_scores[0])
    elif all_e:
        return True  # every end was retrieved: each phrase is beaten by its end's best start
    else:
        e_part = float(e_scores[-1])
    bound = s_last + e_part
    if to_fused is not None:
        bound = to_fused(bound)
    return hits[k - 1].score >= bound + 1e-5 * max(1.0, abs(bound))
