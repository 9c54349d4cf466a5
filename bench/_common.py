"""Helpers the retrieval benchmarks share (bench/any_grain.py, bench/chinese.py, bench/phrase_rescore.py,
bench/phrase_scale.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import Index
from anygrain.api import build_index
from anygrain.composite.fusion import FusionConfig, FusionMethod, fuse_scores
from anygrain.corpus.questions import Questions
from anygrain.corpus.store import CorpusStore
from anygrain.eval import evaluate_run
from anygrain.hits.hit import Unit
from anygrain.hits.results import hits_from_rows
from anygrain.phrase.index import PhraseIndex

PASSAGE_METRICS = ["top@1", "top@5", "top@20", "mrr@20"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def index_bytes(path: Path) -> dict[str, int]:
    """Bytes of the index's phrase part, its BM25 part and the rest (corpus store excluded)."""
    out = {"phrase": 0, "sparse": 0, "other": 0}
    for f in path.rglob("*"):
        if not f.is_file():
            continue
        top = f.relative_to(path).parts[0]
        if top == "corpus":
            continue
        out[top if top in ("phrase", "sparse") else "other"] += f.stat().st_size
    return out


def rounded(d: dict[str, float], digits: int = 4) -> dict[str, float]:
    return {k: round(float(v), digits) for k, v in d.items()}


def passage_metrics(
    store: CorpusStore,
    qs: Questions,
    rows: np.ndarray,
    scores: np.ndarray,
    metrics: list[str] = PASSAGE_METRICS,
) -> dict[str, float]:
    """Passage metrics of a (rows, scores) ranking; hits judged by answer strings (DPR)."""
    hits = hits_from_rows(store, rows[:, :20], scores[:, :20])
    rep = evaluate_run(dict(zip([q.id for q in qs], hits, strict=True)), qs, metrics)
    return rounded(rep.metrics)


def fuse(
    cand: np.ndarray, a: np.ndarray, b: np.ndarray, k: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """z-score fusion (the project's default) of two systems' exact scores on ``cand``."""
    return fuse_scores(cand, a, b, FusionConfig(FusionMethod.ZSCORE), k)


def build_or_open(out: Path, source: Any, kind: str, threads: int, **settings: Any) -> Index:
    """The index at ``out`` when one is there (benchmarks rerun cheaply), else built."""
    if (out / "index.json").exists():
        return Index.load(out)
    log(f"building {kind} index {out}")
    t = time.perf_counter()
    idx = build_index(source, kind=kind, out=out, threads=threads, **settings)
    log(f"built {out} in {time.perf_counter() - t:.1f} s")
    return idx


def phrase_passage_rows(
    phrase: PhraseIndex,
    q_start: np.ndarray,
    q_end: np.ndarray,
    k: int = 20,
    depth: int = 200,
    *,
    lexical: Any = None,
    fusion: Any = None,
    max_words: int | None = None,
) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Passages ranked by their best phrase, as (rows, scores) arrays, and the round stats
    (with ``lexical``/``fusion``: by their best fused phrase score; ``max_words``: the
    longest phrase, default the index's)."""
    found, stats = phrase.search_units(
        q_start,
        q_end,
        k,
        Unit.PASSAGE,
        depth=depth,
        lexical=lexical,
        fusion=fusion,
        max_words=max_words,
    )
    rows = np.full((len(found), k), -1, dtype=np.int64)
    scores = np.zeros((len(found), k), dtype=np.float32)
    for i, hs in enumerate(found):
        for j, h in enumerate(hs):
            rows[i, j], scores[i, j] = int(phrase.table.row[h.start]), h.score
    return rows, scores, stats
