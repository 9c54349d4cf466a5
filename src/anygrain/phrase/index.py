"""The phrase index (IndexKind.PHRASE): DensePhrases' token vectors in two MIPS indexes.

Layout (written by :mod:`anygrain.phrase.build`)::

    index.json             manifest: model fingerprint, corpus checksum, settings, counts
    corpus/                the passage store (unless an existing store was reused)
    phrase/model/          the phrase model, when the index carries a copy (else ``model.ref``)
    phrase/start.npy ...   token vectors and metadata (:mod:`anygrain.phrase.dump`)
    phrase/start.faiss     MIPS over start vectors (end.faiss: end vectors)
    phrase/start_ids.npy   FAISS id -> token index (and end_ids.npy)
    sparse/                the lexical part (a BM25 index), unless built without it

Opening is :mod:`anygrain.phrase.opening` (the model is checked against the fingerprint
the vectors were made with), what the index wrote :mod:`anygrain.phrase.record`, the
search's rounds and first stage :mod:`anygrain.phrase.units`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from anygrain.corpus.source import open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.encode.onnx_runtime import Runtime, parse_runtime
from anygrain.encode.runtime import runs_on_onnx
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit, UnitSearchStats
from anygrain.index.base import PASSAGE_METRICS, Index
from anygrain.index.encoded import EncodedQueries
from anygrain.index.lazy_model import LazyModel
from anygrain.index.registry import IndexKind, register_index
from anygrain.index.scope import Scope
from anygrain.index.settings import BuildJob, BuildOptions, IndexSettings
from anygrain.phrase.build import (
    FORMAT_VERSION,
    PhraseSettings,
    build_model,
    is_phrase_encoder,
    phrase_model_dir,
    write_index,
)
from anygrain.phrase.compress import DecodedVectors
from anygrain.phrase.lexical import (
    WEIGHT_RANGE,
    LexicalQuery,
    LexicalScorer,
    SparseFusion,
    open_sparse,
)
from anygrain.phrase.opening import open_arrays, open_questions
from anygrain.phrase.record import PhraseIndexRecord
from anygrain.phrase.rescore import search_rescored
from anygrain.phrase.rescore_settings import (
    RESCORE_CONTEXT_RANGE,
    RESCORE_MARGIN_RANGE,
    RescoreTokens,
    Rescoring,
)
from anygrain.phrase.search import Phrases, PhraseTable, aggregate, search_scope, unit_hits
from anygrain.phrase.units import FirstStage, phrase_round
from anygrain.phrase.units import first_stage as own_first_stage
from anygrain.phrase.units import search_units as search_unit_rounds
from anygrain.utils.threads import single_thread
from anygrain.vectors.faiss_index import FaissIndex, unwrap_index

if TYPE_CHECKING:
    from anygrain.corpus.questions import Questions
    from anygrain.eval.evaluate import EvalReport
    from anygrain.phrase.model import PhraseEncoder


@register_index(IndexKind.PHRASE)
class PhraseIndex(Index, LazyModel["PhraseEncoder"]):
    """Phrase retrieval; ``search`` returns phrase hits (or sentences, passages, documents)."""

    units = (Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT)
    default_unit = Unit.PHRASE
    takes_query_model = True
    load_options = frozenset({"model", "device", "store", "mmap", "runtime"})
    #: a search's BM25 weight override: what a server's client may set
    search_option_checks = {
        "sparse_weight": WEIGHT_RANGE.check,
        "rescore_tokens": RescoreTokens.parse,
        "rescore_margin": RESCORE_MARGIN_RANGE.check,
        "rescore_context": RESCORE_CONTEXT_RANGE.check,
    }
    settings_type = PhraseSettings
    format_version = FORMAT_VERSION
    update_module = "anygrain.phrase.update"

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
        from anygrain.phrase.config import MODEL_CONFIG, PhraseConfig

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
        question's own passage: :func:`anygrain.phrase.evaluate.evaluate_phrase`."""
        from anygrain.phrase.evaluate import evaluate_phrase

        return evaluate_phrase(
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
            where=self._on(questions),
        )

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        model: PhraseEncoder | Callable[[], PhraseEncoder],
        table: PhraseTable,
        start_index: FaissIndex,
        end_index: FaissIndex,
        start_ids: np.ndarray,
        end_ids: np.ndarray,
        *,
        questions: Any = None,
    ) -> None:
        super().__init__(path, manifest)
        self.store = store
        # the torch model, or what loads it on first use (a search on ONNX Runtime never
        # does; adding documents, re-scoring and training do)
        self.hold_model(model, loaded=not callable(model) or is_phrase_encoder(model))
        # what encodes questions: the model itself, or its graph on ONNX Runtime
        self.questions: Any = questions if questions is not None else self._model
        self.table = table
        self.start_index = start_index
        self.end_index = end_index
        self.start_ids = start_ids
        self.end_ids = end_ids
        #: what the index wrote (its settings in index.json)
        self.record = PhraseIndexRecord.from_manifest(manifest["settings"])
        self.max_words = int(self.record.max_phrase_words)
        sp = self.record.sparse
        self.fusion = SparseFusion.from_dict(sp, f"{path}/index.json") if sp else None
        # the BM25 part opens on first use: a pure-dense search never reads it
        self._lexical: LexicalScorer | None = None
        # re-scoring's passage side on ONNX Runtime (a shipped model's graph), opened on
        # first use; ``runtime`` as asked at open (``onnx``: never torch for passages either)
        self._graph_passages: Any = None
        self.requested_runtime = Runtime.AUTO

    def prepare_serving(self) -> None:
        """Re-scoring's torch model loaded now where torch is installed: a server's small
        batches then re-encode in bfloat16 (faster than the ONNX graph in float32) and its
        first request does not pay for the import (a one-shot search keeps the graph)."""
        from anygrain.encode.onnx_runtime import torch_installed

        if self.rescore and self.requested_runtime is not Runtime.ONNX and torch_installed():
            _ = self.model

    @property
    def model_loaded(self) -> bool:
        """Whether the phrase model itself is in memory (not only a loader of it)."""
        return self._model is not None

    def graph_passages(self) -> Any:
        """The phrase model's passage side on its shipped ONNX graph, without torch (a
        :class:`~anygrain.phrase.graph_model.GraphPhraseModel`); None for a model that ships
        no graph (a trained or copied one: its graph is exported from the torch model)."""
        if self._graph_passages is None:
            from anygrain.phrase.opening import graph_model_of

            try:
                self._graph_passages = graph_model_of(self.path, self.manifest, None, onnx=False)[0]
            except AnygrainError:
                self._graph_passages = False
        return self._graph_passages or None

    @property
    def runtime(self) -> Runtime:
        """What encodes this index's questions now."""
        return Runtime.ONNX if runs_on_onnx(self.questions) else Runtime.TORCH

    @property
    def rescoring(self) -> Rescoring:
        """How a search re-scores passages exactly by default (the build's; none: 0)."""
        return self.record.rescoring

    @property
    def rescore(self) -> int:
        """Passages a search re-scores exactly by default (0: none)."""
        return self.rescoring.n

    def search_threads(self) -> int:
        """Two when searches re-score passages (re-encoding them dominates a search, and a
        second thread overlaps it with the rest), else one (a second thread then costs
        throughput).  The search path shares no mutable state: the tokenizer and the BM25
        analysers take locks."""
        return 2 if self.rescore else 1

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

    # --- building (anygrain.phrase.build) ----------------------------------------------
    #: an interrupted build's dump shards wait in ``.OUT.phrase.partial`` to be resumed
    scratch_name = "phrase"

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        assert isinstance(settings, PhraseSettings)
        if isinstance(settings.model, str | Path):  # a wrong name fails before any work
            phrase_model_dir(settings.model)

    @classmethod
    def write(cls, job: BuildJob) -> Mapping[str, Any]:
        """Encode ``job.corpus`` with a trained phrase model and write the phrase index.

        The model is the named one, or the shipped default for the corpus language;
        ``threshold`` is the filter's tau (a logit; default: the model's recorded one).
        The dump is resumable: an interrupted build picks up at its last finished shard
        (kept in ``job.work``).  ``compress`` quantizes the FAISS indexes (``pq_m``: PQ bytes
        per vector); ``keep_dump`` keeps the float16 vectors beside them (default: only
        when uncompressed).  See :class:`PhraseSettings` and
        :func:`anygrain.phrase.build.write_index`.
        """
        s = job.settings
        assert isinstance(s, PhraseSettings)
        model, name = build_model(s, job.corpus, job.options)
        write_index(
            job.out,
            job.corpus,
            model,
            s,
            job.options,
            work=job.work,
            model_name=name,
            build=s,
        )
        # reopened with the model in memory: a second copy would be the build's peak (an
        # ONNX Runtime session holds its own copy of the question side's weights; the next
        # open of the index uses the graph)
        if runs_on_onnx(model):
            return {}  # a shipped model on its graphs (no torch): opened as any index is
        return {"model": model, "runtime": "torch"}

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
        runtime: Runtime | str | None = None,
        **options: Any,
    ) -> PhraseIndex:
        """Open the index; ``model`` replaces the saved one, or the one the index refers to
        by name (it must make the same phrases); ``device`` is where questions are encoded
        (None: auto); ``runtime`` what encodes them (:mod:`anygrain.encode.onnx_runtime`:
        ``auto``, ``onnx`` or ``torch``).  On ONNX Runtime, a model whose files are unchanged
        since its graph was exported is not loaded at all (no torch)."""
        path = Path(path)
        # the runtime decided once, the question graph found or exported (phrase/opening.py)
        enc, questions = open_questions(path, manifest, model, device, runtime)

        store = store or open_corpus_of(path, manifest)
        record = PhraseIndexRecord.from_manifest(manifest["settings"])
        a = open_arrays(path, record, store, mmap=mmap)
        index = cls(
            path,
            manifest,
            store,
            enc,
            a.table,
            a.start_index,
            a.end_index,
            a.start_ids,
            a.end_ids,
            questions=questions,
        )
        index.requested_runtime = parse_runtime(runtime)
        return index

    # --- search -----------------------------------------------------------------------
    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int = 64, bf16: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(q_start, q_end)`` float32 vectors (from the model, or its ONNX graph)."""
        return self.questions.encode_questions(list(queries), batch_size=batch_size, bf16=bf16)

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
        return phrase_round(
            self,
            q_start,
            q_end,
            top_k=top_k,
            scope_rows=scope_rows,
            max_words=int(max_words or self.max_words),
            nprobe=nprobe,
            lexical=lexical,
            fusion=fusion,
        )[0]

    def encode(
        self, queries: Sequence[str], *, batch_size: int = 64, bf16: bool = False
    ) -> EncodedQueries:
        """The question encoder's stage of :meth:`search`: ``(q_start, q_end)`` per query."""
        qs, qe = self.encode_queries(queries, batch_size=batch_size, bf16=bf16)
        return EncodedQueries(list(queries), (qs, qe))

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        batch_size: int = 64,
        bf16: bool = False,
        **options: Any,
    ) -> list[list[Hit]]:
        """Top-``k`` units per query (:meth:`search_encoded` has the options), encoded and
        searched ``batch_size`` questions at a time."""
        out: list[list[Hit]] = []
        scope_rows = options.pop("scope_rows", None)
        for i in range(0, len(queries), batch_size):
            batch = list(queries[i : i + batch_size])
            scope = scope_rows[i : i + batch_size] if scope_rows is not None else None
            enc = self.encode(batch, batch_size=batch_size, bf16=bf16)
            out.extend(self.search_encoded(enc, k, scope_rows=scope, **options))
        return out

    def search_encoded(
        self,
        encoded: EncodedQueries,
        k: int = 10,
        *,
        unit: Unit | str | None = None,
        scope_rows: Sequence[Sequence[int]] | None = None,
        top_k: int | None = None,
        max_words: int | None = None,
        nprobe: int | None = None,
        max_depth: int | None = None,
        exact: bool = False,
        stats: list[UnitSearchStats] | None = None,
        sparse_weight: float | None = None,
        rescore: int | None = None,
        rescore_tokens: str | None = None,
        rescore_bf16: bool | None = None,
        rescore_margin: float | None = None,
        rescore_context: int | None = None,
        **options: Any,
    ) -> list[list[Hit]]:
        """Top-``k`` units per encoded query.  ``unit`` picks the grain (default: phrases);
        coarser units are scored by their best phrase.  ``scope_rows`` restricts each query
        to given passage rows (searched exhaustively).  ``top_k`` is the MIPS depth per side
        (default ``max(100, 10·k)``).

        Sentences, passages and documents are searched in rounds (:meth:`search_units`):
        when the phrases found cover fewer than ``k`` units the depth doubles, up to
        ``max_depth`` (default ``max(64·k, top_k)``, at most the index size).  With
        ``exact`` a round must also prove its top ``k`` exact (or retrieve everything).
        Each query's :class:`UnitSearchStats` is appended to ``stats`` when given.

        Scores fuse BM25 into the dense phrase score when the index has a lexical part
        (:mod:`anygrain.phrase.lexical`); ``sparse_weight`` overrides its saved weight for
        this search, and 0 gives the pure dense score.

        ``rescore`` re-encodes each query's first that many passages and ranks their spans
        exactly (:mod:`anygrain.phrase.rescore`); None: the index's recorded setting, 0: off.
        ``rescore_tokens`` says over which tokens of those passages (stored|model|all),
        ``rescore_bf16`` whether they are encoded in bfloat16 (None: as the index was
        built), ``rescore_margin`` how close to the first passage's first-stage score
        another must be to be re-scored (1000: all) and ``rescore_context`` how many
        characters each side of a passage's best first-stage phrase are re-encoded (0: the
        whole passage); None: the index's recorded ones (:class:`Rescoring`).
        """
        u = Unit(unit) if unit is not None else Unit.PHRASE
        depth = top_k or max(100, 10 * k)
        fusion = self.search_fusion(sparse_weight)
        lex = None
        if fusion is not None:
            assert self.lexical is not None
            lex = self.lexical.queries(encoded.texts, fusion)
        # every override is checked, even where re-scoring is off
        asked = Rescoring.given(
            rescore, rescore_margin, rescore_tokens, rescore_context, rescore_bf16
        )
        L = int(max_words or self.max_words)
        stage = FirstStage(scope_rows, depth, max_depth, exact, L, nprobe, fusion, lex, stats)
        rescoring = asked.or_else(self.rescoring)
        if rescoring.n:
            return search_rescored(self, encoded, k, u, stage, rescoring)
        qs, qe = encoded.vectors
        found = self.first_stage(qs, qe, k, u, stage)
        units = found.units
        if found.phrases is not None:
            units = [aggregate(self.table, self.store, p, k, u) for p in found.phrases]
            if stats is not None:
                scoped = scope_rows is not None
                stats.extend(UnitSearchStats(1, depth, len(f), False, scoped) for f in units)
        return unit_hits(self.table, self.store, units, u)

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
            if not isinstance(unwrap_index(fx.index), faiss.IndexFlatCodes):
                return False
        lossless = self.record.factory in ("Flat", "SQfp16")
        return isinstance(self.table.start, DecodedVectors) or lossless

    # passages, sentences and documents ranked by their best phrase, in rounds, and the
    # search a re-scoring's first stage runs (anygrain.phrase.units: each function takes
    # the index first, so it is the method)
    search_units = search_unit_rounds
    first_stage = own_first_stage

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "faiss": {"start": self.start_index.ntotal, "end": self.end_index.ntotal},
        }
