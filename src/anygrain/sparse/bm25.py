"""BM25 index backed by bm25s (sparse matrix scoring), memory-mapped from its directory.

Defaults follow DPR's Lucene setting (k1=0.9, b=0.4).  The title is indexed
with the passage (as DPR and Pyserini do for Wikipedia), underscores read as spaces.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from anygrain.corpus.lang import Lang, is_cjk
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.search.hit import Hit
from anygrain.search.index import (
    Index,
    IndexKind,
    check_build_target,
    register_index,
    write_manifest,
)
from anygrain.search.results import hits_from_rows
from anygrain.sparse.analyzers import Analyzer, analyzer_from_config, make_analyzer
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.corpus_source import corpus_ref, open_corpus_of, open_or_build_corpus

# bm25s's scoring variants; "lucene" is Lucene's (and Pyserini's) BM25.
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


@dataclass
class BM25Config:
    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    include_title: bool = True
    lang: str = "en"
    stemming: bool = True
    stopwords: bool = True


def passage_field(title: str, text: str, include_title: bool) -> str:
    return f"{title.replace('_', ' ')}\n{text}" if include_title and title else text


def detect_lang(store: CorpusStore, sample: int = 200) -> Lang:
    n = len(store)
    rows = np.linspace(0, n - 1, num=min(sample, n), dtype=np.int64)
    text = "".join(store.texts(rows))
    return Lang.ZH if is_cjk(text) else Lang.EN


@register_index(IndexKind.BM25)
class BM25Index(Index):
    """Lexical index; ``search`` returns passage hits."""

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
    def build_from(
        cls,
        source: Any,
        out: Path,
        *,
        split: str | None = None,
        lang: str | None = None,
        k1: float = 0.9,
        b: float = 0.4,
        include_title: bool = True,
        stemming: bool = True,
        method: str = "lucene",
        errors: ErrorLog | None = None,
        progress: bool = True,
        corpus_dir: Path | None = None,
        overwrite: bool = False,
        **unused: Any,
    ) -> BM25Index:
        check_build_target(source, out, overwrite=overwrite)
        with atomic_dir(out) as tmp:
            store = open_or_build_corpus(
                source, corpus_dir or tmp / "corpus", split=split, errors=errors, progress=progress
            )
            cls.write(
                tmp,
                store,
                lang=lang,
                k1=k1,
                b=b,
                include_title=include_title,
                stemming=stemming,
                method=method,
                progress=progress,
            )
        return Index.load(out)  # type: ignore[return-value]

    @classmethod
    def write(
        cls,
        out: Path,
        store: CorpusStore,
        *,
        lang: str | None = None,
        k1: float = 0.9,
        b: float = 0.4,
        include_title: bool = True,
        stemming: bool = True,
        method: str = "lucene",
        progress: bool = True,
        subdir: str = "bm25",
    ) -> dict[str, Any]:
        """Write the BM25 arrays for ``store`` under ``out/subdir``; returns the settings."""
        t0 = time.time()
        detected = lang is None
        lang_v = Lang(lang) if lang else detect_lang(store)
        if method not in BM25_METHODS:
            raise AnygrainError(
                f"unknown BM25 method {method!r}: use one of {', '.join(BM25_METHODS)}"
            )
        cfg = BM25Config(
            k1=k1,
            b=b,
            method=method,
            include_title=include_title,
            lang=lang_v.value,
            stemming=stemming,
        )
        analyzer = (
            make_analyzer(lang_v) if lang_v is Lang.ZH else make_analyzer(lang_v, stemming=stemming)
        )
        texts = [
            passage_field(t, x, include_title)
            for t, x in zip(store.titles(), store.texts(), strict=True)
        ]
        tokens = analyzer.tokenize(texts, progress=progress)
        retriever = bm25s.BM25(k1=k1, b=b, method=cfg.method)
        retriever.index(tokens, show_progress=progress)
        retriever.save(str(out / subdir), show_progress=False)
        settings = {
            "bm25": asdict(cfg),
            "analyzer": analyzer.config(),
            "lang_detected": detected,
            "index_seconds": round(time.time() - t0, 3),
        }
        write_manifest(
            out,
            IndexKind.BM25,
            cls.format_version,
            corpus={
                "path": corpus_ref(out, store),
                "checksum": store.checksum,
                "n_passages": len(store),
            },
            settings=settings,
        )
        return settings

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

    def score_rows(self, queries: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Exact BM25 scores of given passage rows (n_queries, n_rows), e.g. for fusion."""
        tokens = self.analyzer.tokenize(queries)
        vocab = self.retriever.vocab_dict
        out = np.zeros(rows.shape, dtype=np.float32)
        for i, toks in enumerate(tokens):
            known = [w for w in toks if w in vocab]
            if not known:
                continue
            ids = self.retriever.get_tokens_ids(known)
            full = self.retriever.get_scores_from_ids(ids)
            valid = rows[i] >= 0
            out[i, valid] = full[rows[i][valid]]
        return out

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        rows, scores = self.search_rows(queries, k)
        return hits_from_rows(self.store, rows, scores)

    def search_rows(self, queries: Sequence[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Raw ``(rows, scores)`` of shape (n_queries, k); rows are -1 where nothing matched."""
        k_eff = min(k, len(self.store))
        n = len(queries)
        rows = np.full((n, k), -1, dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float32)
        if n == 0:
            return rows, scores
        tokens = self.analyzer.tokenize(queries)
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
