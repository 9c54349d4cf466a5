"""BM25 index backed by bm25s (sparse matrix scoring), memory-mapped from its directory.

Defaults follow DPR's Lucene setting (k1=0.9, b=0.4).  The title is indexed
with the passage (as DPR and Pyserini do for Wikipedia), underscores read as spaces.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from anygrain.corpus.lang import Lang, LanguagePlan, check_lang, plan_languages
from anygrain.corpus.source import corpus_ref, open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.encoded import EncodedQueries
from anygrain.index.manifest import write_manifest
from anygrain.index.registry import IndexKind, register_index
from anygrain.index.rows import RowsIndex
from anygrain.index.settings import BuildJob, IndexSettings
from anygrain.sparse.analyzers import (
    Analyzer,
    MultiAnalyzer,
    SnowballAnalyzer,
    analyzer_from_config,
    make_analyzer,
)
from anygrain.utils.progress import progress_bar
from anygrain.utils.ranges import Range

# bm25s's scoring variants; "lucene" is Lucene's (and Pyserini's) BM25.
#: term-frequency saturation: 0 ignores term counts; far above the usual 0.5-3, scores in
#: float32 overflow (1e308 made every score NaN, so no hits)
K1_RANGE = Range("BM25 k1", 0.0, 1000.0)
#: length normalisation: 0 none, 1 full
B_RANGE = Range("BM25 b", 0.0, 1.0)
#: held while a query is analysed: the stemmers and segmenters an analyzer holds are not
#: documented as thread-safe, and a server may search from two threads (scoring needs none)
ANALYZING = threading.Lock()
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
log = logging.getLogger(__name__)


@dataclass
class BM25Config:
    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    include_title: bool = True
    lang: str = "en"
    stemming: bool = True
    stopwords: bool = True


@dataclass(frozen=True)
class Bm25Settings(IndexSettings):
    """What ``Index.build(kind="bm25")`` takes besides the shared options."""

    # the analyzer's language (en, zh, fr, ...): each document's own, detected, when None
    lang: str | None = None
    k1: float = 0.9
    b: float = 0.4
    include_title: bool = True
    stemming: bool = True
    method: str = "lucene"

    def __post_init__(self) -> None:
        if self.lang is not None:
            object.__setattr__(self, "lang", check_lang(self.lang))
        if self.method not in BM25_METHODS:
            raise AnygrainError(
                f"unknown BM25 method {self.method!r}: use one of {', '.join(BM25_METHODS)}"
            )
        K1_RANGE.check(self.k1)
        B_RANGE.check(self.b)


def passage_field(title: str, text: str, include_title: bool) -> str:
    return f"{title.replace('_', ' ')}\n{text}" if include_title and title else text


def bm25_analyzer(lang: Lang | str, stemming: bool = True) -> Analyzer:
    """The analyzer a BM25 index of ``lang`` uses (Chinese segments words, never stems)."""
    code = lang.value if isinstance(lang, Lang) else lang
    return make_analyzer(code) if code == Lang.ZH.value else make_analyzer(code, stemming=stemming)


def plan_analyzer(plan: LanguagePlan, stemming: bool = True) -> Analyzer:
    """The analyzer of a corpus whose passages' languages are ``plan``: its one language's,
    or one per language (:class:`~anygrain.sparse.analyzers.MultiAnalyzer`)."""
    if len(plan.codes) == 1:
        return bm25_analyzer(plan.main, stemming)
    return MultiAnalyzer(plan.main, {c: bm25_analyzer(c, stemming) for c in plan.codes})


def report_analyzers(
    plan: LanguagePlan, stemming: bool, progress: bool, say: bool = True
) -> dict[str, Any]:
    """Say in one line which analyzer each language got (a warning when a language has no
    stemmer, so is indexed without one; nothing unless ``say``); what is said, by
    language, for the manifest."""
    langs: dict[str, Any] = {}
    unstemmed = []
    for code in plan.codes:
        words = bm25_analyzer(code, stemming).describe()
        langs[code] = {"passages": plan.passages.get(code, 0), "analyzer": words}
        if stemming and code != Lang.ZH.value and not SnowballAnalyzer.can_stem(code):
            unstemmed.append(code)
    how = "given" if plan.given else "detected per document"
    line = f"BM25 analyzers ({how}): " + "; ".join(
        f"{c} ({v['passages']:,} passage{'' if v['passages'] == 1 else 's'}): {v['analyzer']}"
        for c, v in langs.items()
    )
    if not say:
        pass
    elif unstemmed:
        log.warning(
            "%s; no stemmer for %s: indexed with BM25 without stemming",
            line,
            ", ".join(unstemmed),
        )
    elif progress:
        print(line, file=sys.stderr, flush=True)
    return langs


@dataclass(frozen=True)
class CollectionStats:
    """The statistics BM25 scores with: document frequency per term, passages, mean length.

    A shard of a sharded index is scored with its whole corpus's statistics, so that its
    scores are those of the unsharded index and the shards' top-k merge exactly.
    """

    df: dict[str, int]
    n_docs: int
    avg_len: float


def _batch_texts(table: Any, include_title: bool) -> list[str]:
    """The indexed text of each passage of a corpus batch (a pyarrow table)."""
    return [
        passage_field(t or "", x, include_title)
        for t, x in zip(
            table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True
        )
    ]


def collection_stats(
    store: CorpusStore,
    analyzer: Analyzer,
    *,
    include_title: bool = True,
    batch_size: int = 8192,
    plan: LanguagePlan | None = None,
) -> CollectionStats:
    """Document frequencies and lengths of ``store`` as :func:`index_streaming` counts them
    (``plan``: the passages' languages, for a multilingual analyzer)."""
    df: dict[str, int] = {}
    total = 0
    for start, table in store.iter_batches(batch_size):
        langs = plan.row_langs(start, start + table.num_rows) if plan is not None else None
        for toks in analyzer.tokenize_passages(_batch_texts(table, include_title), langs):
            total += len(toks)
            for w in set(toks):
                df[w] = df.get(w, 0) + 1
    n = len(store)
    return CollectionStats(df, n, total / n if n else 0.0)


def index_streaming(
    store: CorpusStore,
    analyzer: Analyzer,
    *,
    k1: float = 0.9,
    b: float = 0.4,
    method: str = "lucene",
    include_title: bool = True,
    batch_size: int = 8192,
    progress: bool = False,
    collection: CollectionStats | None = None,
    plan: LanguagePlan | None = None,
) -> bm25s.BM25:
    """A bm25s index of ``store``, read and tokenised a batch at a time.

    ``bm25s.BM25.index`` wants every document's token list at once (a 1M-passage
    corpus as tens of millions of Python strings); here each batch is turned into
    ``(passage, term, tf)`` triples in numpy arrays and dropped, and the score matrix
    is built from those with bm25s's own idf and tf formulas, so the saved index is the
    one ``bm25s`` would write (same scores; term ids may be numbered differently).
    ``collection``: score with these statistics instead of ``store``'s (a shard's);
    ``plan``: the passages' languages, for a multilingual analyzer.
    """
    retriever = bm25s.BM25(k1=k1, b=b, method=method)
    n = len(store)
    vocab, doc, term, tf_all, lengths = _postings(
        store, analyzer, include_title, batch_size, progress, plan
    )
    n_vocab = len(vocab)
    avg_len = float(lengths.mean()) if n else 0.0
    df = np.bincount(term, minlength=n_vocab)
    idf_df, idf_n = df, n
    if collection is not None:  # a shard: idf and length norm of the whole corpus
        idf_df = np.asarray([collection.df.get(w, 0) for w in vocab], dtype=np.int64)
        idf_n, avg_len = collection.n_docs, collection.avg_len
    idf, nonoccurrence = _term_arrays(retriever, dict(enumerate(idf_df.tolist())), idf_n, avg_len)
    scores = _scores(retriever, doc, term, tf_all, lengths, idf, nonoccurrence, avg_len)
    del tf_all
    # Column-major (CSC) by a stable sort on the term: passages stay in order in a column,
    # as scipy's conversion leaves them for bm25s.
    idx_dtype = np.int32 if len(term) < 2**31 else np.int64
    order = np.argsort(term, kind="stable")
    indices = doc[order].astype(idx_dtype, copy=False)
    del doc
    data = scores[order]
    del scores, order
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    del term
    retriever.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": n}
    retriever.nonoccurrence_array = nonoccurrence
    vocab[""] = n_vocab  # bm25s's empty token, outside the matrix
    retriever.vocab_dict = vocab
    retriever.unique_token_ids_set = set(vocab.values())
    return retriever


def _postings(
    store: CorpusStore,
    analyzer: Analyzer,
    include_title: bool,
    batch_size: int,
    progress: bool,
    plan: LanguagePlan | None = None,
) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(vocab, passage, term, tf, lengths)``: the corpus's ``(passage, term, tf)`` triples
    (term ids numbered by the vocabulary, in order of first occurrence) and each passage's
    length in tokens, one batch tokenised at a time."""
    vocab: dict[str, int] = {}
    docs: list[np.ndarray] = []
    terms: list[np.ndarray] = []
    tfs: list[np.ndarray] = []
    n = len(store)
    lengths = np.zeros(n, dtype=np.int64)
    batches = progress_bar(
        store.iter_batches(batch_size),
        desc="BM25 indexing",
        unit="batch",
        total=(n + batch_size - 1) // batch_size,
        disable=not progress,
    )
    for start, table in batches:
        texts = _batch_texts(table, include_title)
        ids: list[int] = []
        counts = np.zeros(len(texts), dtype=np.int64)
        langs = plan.row_langs(start, start + len(texts)) if plan is not None else None
        for j, toks in enumerate(analyzer.tokenize_passages(texts, langs)):
            ids.extend(vocab.setdefault(w, len(vocab)) for w in toks)
            counts[j] = len(toks)
        lengths[start : start + len(texts)] = counts
        if not ids:
            continue
        local = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
        width = max(len(vocab), 1)
        keys, tf = np.unique(local * width + np.asarray(ids, dtype=np.int64), return_counts=True)
        docs.append((keys // width + start).astype(np.int32))
        terms.append((keys % width).astype(np.int32))
        tfs.append(tf.astype(np.float32))
    doc = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int32)
    term = np.concatenate(terms) if terms else np.zeros(0, dtype=np.int32)
    tf_all = np.concatenate(tfs) if tfs else np.zeros(0, dtype=np.float32)
    return vocab, doc, term, tf_all, lengths


def _term_arrays(
    retriever: bm25s.BM25, doc_freqs: dict[int, int], n_docs: int, avg_len: float
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(idf, nonoccurrence)`` per term id by bm25s's own formulas (``nonoccurrence``:
    None unless the retriever's method scores terms a passage lacks)."""
    from bm25s.scoring import (
        _build_idf_array,
        _build_nonoccurrence_array,
        _select_idf_scorer,
        _select_tfc_scorer,
    )

    idf_fn = _select_idf_scorer(retriever.idf_method)
    idf = _build_idf_array(
        doc_frequencies=doc_freqs,
        n_docs=n_docs,
        compute_idf_fn=idf_fn,
        dtype=retriever.dtype,
    )
    if retriever.method not in retriever.methods_requiring_nonoccurrence:
        return idf, None
    nonoccurrence = _build_nonoccurrence_array(
        doc_frequencies=doc_freqs,
        n_docs=n_docs,
        compute_idf_fn=idf_fn,
        calculate_tfc_fn=_select_tfc_scorer(retriever.method),
        l_d=avg_len,
        l_avg=avg_len,
        k1=retriever.k1,
        b=retriever.b,
        delta=retriever.delta,
        dtype=retriever.dtype,
    )
    return idf, nonoccurrence


def _scores(
    retriever: bm25s.BM25,
    doc: np.ndarray,
    term: np.ndarray,
    tf: np.ndarray,
    lengths: np.ndarray,
    idf: np.ndarray,
    nonoccurrence: np.ndarray | None,
    avg_len: float,
) -> np.ndarray:
    """The BM25 score of every ``(passage, term, tf)`` triple, a slice at a time (bm25s
    computes in float64 and stores float32; so do we)."""
    from bm25s.scoring import _select_tfc_scorer

    tfc_fn = _select_tfc_scorer(retriever.method)
    scores = np.empty(len(term), dtype=retriever.dtype)
    step = 1 << 20
    for s in range(0, len(term), step):
        t = term[s : s + step]
        part = idf[t] * tfc_fn(
            tf_array=tf[s : s + step],
            l_d=lengths[doc[s : s + step]],
            l_avg=avg_len,
            k1=retriever.k1,
            b=retriever.b,
            delta=retriever.delta,
        )
        if nonoccurrence is not None:
            part -= nonoccurrence[t]
        scores[s : s + step] = part
    return scores


def write_bm25_index(
    out: Path,
    store: CorpusStore,
    settings: Bm25Settings,
    *,
    progress: bool = True,
    subdir: str = "bm25",
    build: Bm25Settings | None = None,
    collection: CollectionStats | None = None,
    plan: LanguagePlan | None = None,
    report: bool = True,
) -> dict[str, Any]:
    """Write the BM25 arrays for ``store`` under ``out/subdir`` and ``out/index.json``;
    returns the settings recorded there (``build``: the settings the index was asked for,
    recorded as ``settings.build``; ``collection``: score with a larger corpus's statistics,
    for a shard of it; ``plan``: the passages' languages, when known already; ``report``:
    say which analyzer each language got)."""
    t0 = time.time()
    s = settings
    detected = s.lang is None
    plan = plan if plan is not None else plan_languages(store, s.lang)
    analyzer = plan_analyzer(plan, s.stemming)
    main = bm25_analyzer(plan.main, s.stemming)
    cfg = BM25Config(
        k1=s.k1,
        b=s.b,
        method=s.method,
        include_title=s.include_title,
        lang=plan.main,
        # the main language's analyzer (Chinese segments words and neither stems nor drops
        # stopwords): record what is applied, not the English defaults
        stemming=bool(getattr(main, "stemming", False)),
        stopwords=bool(getattr(main, "stopwords", False)),
    )
    languages = report_analyzers(plan, s.stemming, progress, report)
    retriever = index_streaming(
        store,
        analyzer,
        k1=s.k1,
        b=s.b,
        method=cfg.method,
        include_title=s.include_title,
        progress=progress,
        collection=collection,
        plan=plan,
    )
    retriever.save(str(out / subdir), show_progress=False)
    recorded: dict[str, Any] = {
        "bm25": asdict(cfg),
        "analyzer": analyzer.config(),
        "lang_detected": detected,
        "languages": languages,
        "index_seconds": round(time.time() - t0, 3),
    }
    if build is not None:
        recorded["build"] = build.to_dict()
    if collection is not None:
        recorded["collection"] = {"n_docs": collection.n_docs, "avg_len": collection.avg_len}
    write_manifest(
        out,
        IndexKind.BM25,
        BM25Index.format_version,
        corpus={
            "path": corpus_ref(out, store),
            "checksum": store.checksum,
            "n_passages": len(store),
        },
        settings=recorded,
    )
    return recorded


@register_index(IndexKind.BM25)
class BM25Index(RowsIndex):
    """Lexical index; ``search`` returns passage hits."""

    settings_type = Bm25Settings
    load_options = frozenset({"store"})  # opened over a corpus store already open
    update_module = "anygrain.sparse.update"

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        retriever: bm25s.BM25,
        analyzer: Analyzer,
        config: BM25Config,
    ) -> None:
        super().__init__(path, manifest)
        self.store = store
        self.retriever = retriever
        self.analyzer = analyzer
        self.config = config

    @property
    def corpus(self) -> CorpusStore:
        return self.store

    @classmethod
    def write(cls, job: BuildJob) -> None:
        s = job.settings
        assert isinstance(s, Bm25Settings)
        write_bm25_index(job.out, job.corpus, s, progress=job.options.progress, build=s)

    @classmethod
    def open(
        cls,
        path: Path,
        manifest: dict[str, Any],
        *,
        store: CorpusStore | None = None,
        subdir: str = "bm25",
        **options: Any,
    ) -> BM25Index:
        if not (path / subdir).is_dir():
            raise AnygrainError(f"{path}: incomplete BM25 index (missing {subdir}/); rebuild it")
        store = store or open_corpus_of(path, manifest)
        settings = manifest["settings"]
        cfg = BM25Config(**settings["bm25"])
        retriever = bm25s.BM25.load(str(path / subdir), mmap=True, show_progress=False)
        return cls(
            path, manifest, store, retriever, analyzer_from_config(settings["analyzer"]), cfg
        )

    def passage_scores(self, queries: Sequence[str]) -> Iterator[np.ndarray]:
        """Every passage's BM25 score for each query in turn (one array in memory at a time
        unless the caller keeps them): float32 of shape (n_passages,), all zeros for a
        query with no term in the index's vocabulary."""
        vocab = self.retriever.vocab_dict
        with ANALYZING:
            analysed = list(self.analyzer.tokenize(queries))
        for toks in analysed:
            known = [w for w in toks if w in vocab]
            if known:
                ids = self.retriever.get_tokens_ids(known)
                yield np.asarray(self.retriever.get_scores_from_ids(ids), np.float32)
            else:
                yield np.zeros(len(self.store), dtype=np.float32)

    @staticmethod
    def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` best rows of one query's :meth:`passage_scores`, best first (every row,
        sorted, when ``k`` is at least their number)."""
        n = len(scores)
        depth = min(k, n)
        top = np.argpartition(-scores, depth - 1)[:depth] if depth < n else np.arange(n)
        return top[np.argsort(-scores[top], kind="stable")]

    def score_rows(self, queries: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Exact BM25 scores of given passage rows (n_queries, n_rows), e.g. for fusion."""
        out = np.zeros(rows.shape, dtype=np.float32)
        for i, full in enumerate(self.passage_scores(queries)):
            valid = rows[i] >= 0
            out[i, valid] = full[rows[i][valid]]
        return out

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        rows, scores = self.search_rows(queries, k)
        return hits_from_rows(self.store, rows, scores)

    def search_rows_encoded(
        self, encoded: EncodedQueries, k: int = 10, **options: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_rows` of queries :meth:`encode` passed through."""
        return self.search_rows(encoded.texts, k)

    def search_rows(self, queries: Sequence[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Raw ``(rows, scores)`` of shape (n_queries, k); rows are -1 where nothing matched."""
        k_eff = min(k, len(self.store))
        n = len(queries)
        rows = np.full((n, k), -1, dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float32)
        if n == 0:
            return rows, scores
        with ANALYZING:
            tokens = list(self.analyzer.tokenize(queries))
        vocab = self.retriever.vocab_dict
        known = [i for i, t in enumerate(tokens) if any(w in vocab for w in t)]
        if known:
            res_rows, res_scores = self.retriever.retrieve(
                [[w for w in tokens[i] if w in vocab] for i in known], k=k_eff, show_progress=False
            )
            # A zero score means no query term occurs: report no hit rather than a random row.
            res_rows = np.where(res_scores > 0, res_rows, -1)
            rows[known, :k_eff] = res_rows
            scores[known, :k_eff] = np.where(res_scores > 0, res_scores, 0)
        return rows, scores
