"""Passage retrieval on SQuAD v1.1 dev: BM25, dense (zero-shot and trained), hybrids.

The corpus is the 2,067 dev paragraphs and the questions are all 10,570. Metrics are top@1/5/20,
mrr@20 and p@20 with DPR answer matching. One JSON object is printed.

Hybrids rerank the union of each system's top ``--depth`` passages with the exact scores of both
systems (``anygrain.composite.fusion``). The fusions are z-score (the default, lambda 1.0), the DPR
paper's raw ``BM25 + 1.1 * sim``, and reciprocal-rank fusion.

A query-side model (``anygrain train dpr --mode query-side``) keeps the base passage encoder, so
it is evaluated against the base index's vectors with no re-encoding. A fully trained model gets
its own dense index.

    python bench/passage_retrieval.py --work /tmp/prbench [--trained MODEL_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import Index, load_questions
from anygrain.composite.fusion import FusionConfig, FusionMethod, fuse_scores, rrf, union_candidates
from anygrain.dense.index import DenseIndex
from anygrain.eval import evaluate_run
from anygrain.hits.results import hits_from_rows
from anygrain.models.biencoder import BiEncoder
from anygrain.sparse.bm25 import BM25Index

METRICS = ["top@1", "top@5", "top@20", "mrr@20", "p@20"]
ROOT = Path(__file__).resolve().parents[1]


def _score(store: Any, questions: Any, rows: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    hits = hits_from_rows(store, rows[:, :20], scores[:, :20])
    rep = evaluate_run(dict(zip([q.id for q in questions], hits, strict=True)), questions, METRICS)
    return {m: round(v, 4) for m, v in rep.metrics.items()}


def _hybrids(
    sparse: BM25Index,
    texts: list[str],
    s_rows: np.ndarray,
    dense: DenseIndex,
    qv: np.ndarray,
    d_rows: np.ndarray,
    depth: int,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    cand = union_candidates(s_rows[:, :depth], d_rows[:, :depth])
    bm = sparse.score_rows(texts, cand)
    dn = dense.score_rows(qv, cand)
    return {
        "zscore": fuse_scores(cand, bm, dn, FusionConfig(FusionMethod.ZSCORE), 20),
        "raw_dpr_1.1": fuse_scores(cand, bm, dn, FusionConfig(FusionMethod.RAW), 20),
        "rrf": rrf(s_rows[:, :depth], d_rows[:, :depth], 20),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/squad-v1.1/dev-v1.1.json"))
    ap.add_argument("--work", default="/tmp/anygrain-prbench", help="index cache directory")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--trained", nargs="*", default=[], help="trained bi-encoder directories")
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast when encoding")
    args = ap.parse_args()
    work = Path(args.work)
    qs = load_questions(f"squad:{args.data}")
    texts = qs.texts
    out: dict[str, Any] = {
        "data": args.data,
        "n_questions": len(qs),
        "depth": args.depth,
        "systems": {},
    }

    t0 = time.perf_counter()
    sparse = (
        Index.load(work / "bm25")
        if (work / "bm25" / "index.json").exists()
        else Index.build(args.data, kind="bm25", out=work / "bm25", progress=False)
    )
    assert isinstance(sparse, BM25Index)
    store = sparse.corpus
    s_rows, s_scores = sparse.search_rows(texts, args.depth)
    out["systems"]["bm25"] = _score(store, qs, s_rows, s_scores)
    out["bm25_seconds"] = round(time.perf_counter() - t0, 1)

    base_dir = work / f"dense-{Path(args.model).name}"
    t0 = time.perf_counter()
    if not (base_dir / "index.json").exists():
        Index.build(
            work / "bm25" / "corpus",
            kind="dense",
            out=base_dir,
            model=args.model,
            progress=False,
            bf16=args.bf16,
        )
    out["dense_index_seconds"] = round(time.perf_counter() - t0, 1)

    models: list[tuple[str, Any]] = [(f"{Path(args.model).name}_zero_shot", None)] + [
        (Path(t).name, t) for t in args.trained
    ]
    for name, model_dir in models:
        t0 = time.perf_counter()
        if model_dir is None:
            dense = Index.load(base_dir)
        else:
            trained = BiEncoder.load(model_dir)
            base = Index.load(base_dir)
            assert isinstance(base, DenseIndex)
            if trained.passage_fingerprint() == base.manifest["model"]["fingerprint"]:
                dense = Index.load(base_dir, model=trained)  # query-side: same passage vectors
            else:
                own = work / f"dense-{name}"
                if not (own / "index.json").exists():
                    Index.build(
                        work / "bm25" / "corpus",
                        kind="dense",
                        out=own,
                        model=trained,
                        progress=False,
                        bf16=args.bf16,
                    )
                dense = Index.load(own)
        assert isinstance(dense, DenseIndex)
        qv = dense.encode_queries(texts)
        d_rows, d_scores = dense.search_vectors(qv, args.depth)
        out["systems"][f"dense:{name}"] = _score(store, qs, d_rows, d_scores)
        for fusion, (rows, scores) in _hybrids(
            sparse, texts, s_rows, dense, qv, d_rows, args.depth
        ).items():
            out["systems"][f"hybrid:{name}:{fusion}"] = _score(store, qs, rows, scores)
        out[f"seconds:{name}"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
