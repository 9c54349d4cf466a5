"""Choose a phrase index's search settings on TRAINING data, never on a test set: the BM25
fusion weight and the longest phrase (in words; a Chinese character is a word).

Builds a phrase index (the defaults: fused, compressed, filtered) over the paragraphs of a
SQuAD-format training file, then searches its questions

* at each ``--weights`` value (``sparse_weight``): passage top@1/top@5 and open-corpus EM;
* at each ``--max-words`` value (``max_words``, the fusion weight as saved): EM/F1 with the
  gold passage and over the open corpus; also the share of the training answers that fit;

and prints one JSON object with the best value of each for each metric.  Both are search
options, so one index serves every value.

    python bench/search_settings.py ../shared/data/cmrc2018/cmrc2018_trial.json \
        --work runs/tune-cmrc-trial \
        [--model phrase-me5-zh] [--weights 0,0.5,1,1.5,2,3] [--max-words 20,30,40,60]

Caveat, printed with the result (``--trained-on``): when the phrase model was trained on
these very questions its dense scores are better on them than on unseen ones, so a weight
chosen here leans towards the dense side.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.corpus.questions import Questions
from anygrain.errors import ErrorLog, ErrorPolicy
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.tokens import WORD_RE


def _eval(idx: Index, qs: Questions, threads: int, **opts: Any) -> dict[str, float]:
    scope = opts.pop("scope", None)
    unit = opts.pop("unit", "phrase")
    metrics = ["top@1", "top@5"] if unit == "passage" else ["em", "f1"]
    rep = evaluate_index(
        idx,
        qs,
        k=10,
        metrics=metrics,
        unit=unit,
        scope=scope,
        progress=False,
        threads=threads,
        search_options=opts,
    )
    return {m: round(float(v), 4) for m, v in rep.metrics.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="SQuAD-format TRAINING file")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--model", default=None, help="phrase model (default: the language's)")
    ap.add_argument("--weights", default="0,0.5,1,1.5,2,3")
    ap.add_argument("--max-words", default="", help="comma-separated longest phrases")
    ap.add_argument("--limit", type=int, default=None, help="first N questions of each file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trained-on", action="store_true", help="the model saw these questions")
    args = ap.parse_args()
    out = args.work / "index"
    t0 = time.perf_counter()
    if not (out / "index.json").exists():
        opts = {} if args.model is None else {"model": args.model}
        PhraseIndex.build_from(f"squad:{args.source}", out, progress=False, **opts)
    idx = Index.load(out)
    assert isinstance(idx, PhraseIndex)
    build_s = round(time.perf_counter() - t0, 1)
    skipped = ErrorLog(ErrorPolicy.SKIP)  # CMRC trial has an empty question: counted
    qs = load_questions(f"squad:{args.source}", limit=args.limit, errors=skipped)
    result: dict[str, Any] = {
        "source": str(args.source),
        "model": idx.manifest["model"].get("name") or idx.manifest["model"].get("ref"),
        "passages": len(idx.corpus),
        "questions": len(qs),
        "questions_skipped": len(skipped.skipped),
        "build_seconds": build_s,
        "saved": {
            "max_words": idx.max_words,
            "sparse_weight": idx.search_fusion(None).weight if idx.search_fusion(None) else None,
        },
    }
    weights = [float(x) for x in args.weights.split(",") if x]
    if weights:
        rows = []
        for w in weights:
            p = _eval(idx, qs, args.threads, unit="passage", sparse_weight=w)
            e = _eval(idx, qs, args.threads, sparse_weight=w)
            rows.append(
                {
                    "weight": w,
                    "passage_top@1": p["top@1"],
                    "passage_top@5": p["top@5"],
                    "phrase_em": e["em"],
                    "phrase_f1": e["f1"],
                }
            )
        result["weights"] = rows
        result["best_weight"] = {
            m: max(rows, key=lambda r: (r[m], -abs(r["weight"] - 1.0)))["weight"]
            for m in ("passage_top@1", "passage_top@5", "phrase_em")
        }
    lengths = np.array([len(WORD_RE.findall(q.answers[0])) for q in qs if q.answers])
    rows = []
    for L in [int(x) for x in args.max_words.split(",") if x]:
        gold = _eval(idx, qs, args.threads, scope="gold-passage", max_words=L)
        open_ = _eval(idx, qs, args.threads, max_words=L)
        rows.append(
            {
                "max_words": L,
                "answers_that_fit": round(float((lengths <= L).mean()), 4),
                "gold_em": gold["em"],
                "gold_f1": gold["f1"],
                "open_em": open_["em"],
                "open_f1": open_["f1"],
            }
        )
    if rows:
        result["max_words"] = rows
        result["best_max_words"] = {
            m: max(rows, key=lambda r: (r[m], -r["max_words"]))["max_words"]
            for m in ("gold_em", "open_em")
        }
    if args.trained_on:
        result["caveat"] = "the model was trained on these questions: choices lean to dense"
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
