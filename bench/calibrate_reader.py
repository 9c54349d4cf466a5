"""Fit a reader's answer confidence (``confidence.json``) on HELD-OUT TRAINING questions.

Each question of ``--questions`` (``bench/squad_holdout.py``'s validation.json, never a
test set: not SQuAD dev, SQuAD v2 dev or TAT-QA) is asked twice against ``--index`` (an
index of those paragraphs):

* answerable: its top ``--read`` passages are read as the answer grain reads them, and its
  best answer is labelled by SQuAD exact match;
* unanswerable: only retrieved passages (of the top ``--depth``) that hold none of its
  answers and are not its gold passage are read, so its best answer is wrong by design
  (the "not in these documents" case).

The logistic calibration (:mod:`anygrain.reader.confidence`) is fitted on the first half
of the questions and measured on the second (AUROC, ECE over 10 bins, abstention precision
and recall at the threshold chosen on the first half), then refitted on all of them with
the threshold of best abstention F1, and written to ``--out`` (a reader directory gets
``confidence.json``; default: the reader's own directory).  Prints JSON.

    python bench/calibrate_reader.py --reader reader-minilm --index /work/runs/ho-bm25 \
        --questions squad:/work/runs/split/validation.json --limit 400 --out /tmp/conf.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import Index, load_questions
from anygrain.eval.squad import exact_match, normalize_answer
from anygrain.hits.hit import Hit, Unit
from anygrain.models.shipped import saved_model_dir
from anygrain.reader.answering import (
    ReadSettings,
    answer_features,
    load_reader_for,
    ranked_answers,
    span_candidates,
)
from anygrain.reader.confidence import best_threshold, fit_calibration, reader_fingerprint

FORBIDDEN = ("dev-v1.1", "dev-v2.0", "tatqa")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def auroc(score: np.ndarray, label: np.ndarray) -> float:
    """Probability that a correct answer outranks a wrong one (ties count half)."""
    pos, neg = score[label], score[~label]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def ece(conf: np.ndarray, label: np.ndarray, bins: int = 10) -> float:
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            total += m.mean() * abs(conf[m].mean() - label[m].mean())
    return float(total)


def abstention(conf: np.ndarray, label: np.ndarray, t: float) -> dict[str, float]:
    abstain = conf < t
    wrong = ~label
    tp = float((abstain & wrong).sum())
    return {
        "abstention_precision": round(tp / max(abstain.sum(), 1), 4),
        "abstention_recall": round(tp / max(wrong.sum(), 1), 4),
        "answered": int((~abstain).sum()),
        "answered_accuracy": round(float(label[~abstain].mean()) if (~abstain).any() else 0.0, 4),
    }


def holds_answer(hit: Hit, answers: list[str]) -> bool:
    text = normalize_answer(hit.text)
    return any(normalize_answer(a) and normalize_answer(a) in text for a in answers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reader", required=True, help="reader directory or shipped name")
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, help="held-out training questions")
    ap.add_argument("--out", type=Path, help="file or directory (default: the reader's)")
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--depth", type=int, default=20, help="passages retrieved per question")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    if any(f in args.questions.lower() for f in FORBIDDEN):
        raise SystemExit(f"{args.questions}: a test set; fit on held-out training data only")

    qs = [q for q in load_questions(args.questions) if q.answers]
    random.Random(args.seed).shuffle(qs)
    qs = qs[: args.limit]
    idx = Index.load(args.index)
    reader = load_reader_for(idx, args.reader)
    s = ReadSettings()
    log(f"{len(qs)} questions; retrieving {args.depth} passages each")
    texts = [q.text for q in qs]
    found = idx.search(texts, args.depth, **idx.unit_options(Unit.PASSAGE))
    answerable = [list(h[: s.passages]) for h in found]
    unanswerable = [
        [h for h in hs if not holds_answer(h, q.answers) and h.passage_id not in q.gold][
            : s.passages
        ]
        for q, hs in zip(qs, found, strict=True)
    ]
    rows: list[tuple[int, np.ndarray, bool, bool]] = []  # question, features, correct, answerable
    for kind, lists in (("answerable", answerable), ("unanswerable", unanswerable)):
        log(f"reading {kind}")
        for b in range(0, len(qs), 32):
            part = lists[b : b + 32]
            cands = span_candidates(reader, texts[b : b + 32], part, s)
            for j, (c, hs) in enumerate(zip(cands, part, strict=True)):
                ranked = ranked_answers(c, hs, s.retriever_weight)
                if not ranked:
                    continue
                q = qs[b + j]
                _, best = ranked[0]
                answer = hs[best.passage].text[best.start : best.end]
                ok = kind == "answerable" and exact_match(answer, q.answers) > 0
                feats = answer_features(ranked, [h.score for h in hs])[0]
                rows.append((b + j, feats, bool(ok), kind == "answerable"))
    x = np.stack([r[1] for r in rows])
    y = np.asarray([r[2] for r in rows])
    first = np.asarray([r[0] < len(qs) // 2 for r in rows])
    fp = reader_fingerprint(saved_model_dir(args.reader))
    half = fit_calibration(x[first], y[first], fp)
    t_half, _ = best_threshold(half.probability(x[first]), y[first])
    conf = half.probability(x[~first])
    report: dict[str, Any] = {
        "reader": str(args.reader),
        "questions": args.questions,
        "index": str(args.index),
        "limit": len(qs),
        "examples": len(rows),
        "fit_on_first_half_measured_on_second": {
            "examples": int((~first).sum()),
            "auroc": round(auroc(conf, y[~first]), 4),
            "ece_10": round(ece(conf, y[~first]), 4),
            "threshold": round(t_half, 4),
            **abstention(conf, y[~first], t_half),
        },
    }
    cal = fit_calibration(x, y, fp)
    threshold, f1 = best_threshold(cal.probability(x), y)
    cal = type(cal)(
        weights=cal.weights,
        bias=cal.bias,
        mean=cal.mean,
        scale=cal.scale,
        reader_fingerprint=fp,
        threshold=threshold,
        info={
            "questions": args.questions,
            "index": str(args.index),
            "examples": len(rows),
            "seed": args.seed,
            "abstention_f1": round(f1, 4),
        },
    )
    conf_all = cal.probability(x)
    report["all"] = {
        "auroc": round(auroc(conf_all, y), 4),
        "ece_10": round(ece(conf_all, y), 4),
        "threshold": round(threshold, 4),
        "abstention_f1": round(f1, 4),
        **abstention(conf_all, y, threshold),
        "em_answerable": round(float(y[np.asarray([r[3] for r in rows])].mean()), 4),
    }
    report["weights"] = dict(zip(cal.features, cal.weights, strict=True))
    out = args.out or saved_model_dir(args.reader)
    report["written"] = str(cal.save(out))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
