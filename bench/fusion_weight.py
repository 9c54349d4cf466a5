"""Choose a phrase index's BM25 fusion weight on held-out TRAINING data, never on a test set.

Builds a phrase index (the defaults: fused, compressed, filtered) over the paragraphs of a
SQuAD-format training file, then searches its questions at each ``--weights`` value
(``sparse_weight``, a search option: one index serves every weight) and prints one JSON object:
passage top@1/top@5 and open-corpus phrase EM per weight, and the best weight for each.

    python bench/fusion_weight.py ../shared/data/drcd/DRCD_dev.json --work runs/fw-zh \
        [--model phrase-me5-zh] [--weights 0,0.5,1,1.5,2,3] [--limit 2000]

Caveat, printed with the result: when the phrase model was trained on these very questions
its dense scores are better on them than on unseen ones, so the weight chosen here leans
towards the dense side (a lower bound on the weight unseen questions want).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "source", type=Path, help="SQuAD-format TRAINING file (its paragraphs and questions)"
    )
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument(
        "--model", default=None, help="phrase model (default: the language's shipped one)"
    )
    ap.add_argument("--weights", default="0,0.5,1,1.5,2,3")
    ap.add_argument("--limit", type=int, default=None, help="first N questions")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--trained-on", action="store_true", help="the model was trained on these questions"
    )
    args = ap.parse_args()
    out = args.work / "index"
    t0 = time.perf_counter()
    if not (out / "index.json").exists():
        opts = {} if args.model is None else {"model": args.model}
        PhraseIndex.build_from(f"squad:{args.source}", out, progress=False, **opts)
    idx = Index.load(out)
    build_s = round(time.perf_counter() - t0, 1)
    qs = load_questions(f"squad:{args.source}", limit=args.limit)
    rows = []
    for w in [float(x) for x in args.weights.split(",") if x]:
        row: dict[str, float] = {"weight": w}
        for unit, keys in (("passage", ("top@1", "top@5")), ("phrase", ("em", "f1"))):
            rep = evaluate_index(
                idx,
                qs,
                k=10,
                unit=unit,
                progress=False,
                threads=args.threads,
                search_options={"sparse_weight": w},
            )
            for key in keys:
                row[f"{unit}_{key}"] = round(float(rep.metrics[key]), 4)
        rows.append(row)
    best = {
        m: max(rows, key=lambda r: (r[m], -abs(r["weight"] - 1.0)))["weight"]
        for m in ("passage_top@1", "passage_top@5", "phrase_em")
    }
    print(
        json.dumps(
            {
                "source": str(args.source),
                "model": idx.manifest["model"].get("name") or idx.manifest["model"].get("ref"),
                "passages": len(idx.corpus),
                "questions": len(qs),
                "build_seconds": build_s,
                "rows": rows,
                "best": best,
                "caveat": (
                    "the model was trained on these questions: the chosen weight leans to dense"
                    if args.trained_on
                    else None
                ),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
