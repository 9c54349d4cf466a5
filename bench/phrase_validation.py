"""Score phrase models on a validation index: held-out *training* passages (plus distractors),
never a test set.  For checkpoint and recipe selection (Kim et al. 2022: select by what users
see, open-corpus EM and passage recall, not gold-passage EM) and for choosing the default
BM25 weight of fused phrase scores.

For each model: a phrase index over ``--corpus`` (built once, kept in ``--work``), then
gold-passage EM/F1 and, for each ``--weights`` value, open-corpus EM/F1 and passage
top@1/5/20 with that BM25 weight (0: the dense score alone).  Prints one JSON object.

    python bench/squad_holdout.py ../shared/data/squad-v1.1/train-v1.1.json --out /work/runs/split
    python bench/phrase_validation.py --model C=/work/runs/models/C --corpus squad:valcorpus.json \\
        --questions squad:/work/runs/split/validation.json --work /work/runs/val --limit 2000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def evaluate_model(
    name: str,
    model: str,
    corpus: str,
    questions: Any,
    work: Path,
    weights: list[float],
    threads: int,
    limit: int | None,
) -> dict[str, Any]:
    import anygrain
    from anygrain.index.base import Index

    out = work / name
    t0 = time.time()
    if (out / "index.json").exists():
        idx = Index.load(out)
    else:
        idx = Index.build(corpus, kind="phrase", out=out, model=model, progress=False)
    row: dict[str, Any] = {"model": model, "index_seconds": round(time.time() - t0, 1)}
    gold = anygrain.evaluate_index(
        idx, questions, scope="gold-passage", progress=False, limit=limit
    )
    row["gold"] = {k: round(v, 4) for k, v in gold.metrics.items()}
    for w in weights:
        opts = {"sparse_weight": w}
        ph = anygrain.evaluate_index(
            idx, questions, progress=False, search_options=opts, limit=limit
        )
        ps = anygrain.evaluate_index(
            idx,
            questions,
            unit="passage",
            metrics=["top@1", "top@5", "top@20", "mrr@20"],
            k=20,
            progress=False,
            search_options=opts,
            limit=limit,
        )
        row[f"w={w:g}"] = {
            "em": round(ph.metrics["em"], 4),
            "f1": round(ph.metrics["f1"], 4),
            **{f"passage_{k}": round(v, 4) for k, v in ps.metrics.items()},
            "phrase_q_per_s": ph.queries_per_second,
        }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--weights", default="0,0.5,1,2")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from anygrain.api import load_questions
    from anygrain.utils.threads import set_threads

    set_threads(args.threads)
    qs = load_questions(args.questions)
    weights = [float(w) for w in args.weights.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    rows = {}
    for spec in args.model:
        name, _, model = spec.partition("=")
        rows[name] = evaluate_model(
            name, model, args.corpus, qs, args.work, weights, args.threads, args.limit
        )
        print(json.dumps({name: rows[name]}), flush=True)
    print(
        json.dumps(
            {
                "corpus": args.corpus,
                "questions": args.questions,
                "limit": args.limit,
                "models": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
