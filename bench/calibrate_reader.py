"""Fit a reader's answer confidence (``confidence.json``) on HELD-OUT TRAINING questions.

Each question of ``--questions`` (``bench/squad_holdout.py``'s validation.json, never a
test set: not SQuAD dev, SQuAD v2 dev or TAT-QA) is asked against ``--index`` (an index of
those paragraphs; a phrase index, so that answers are read the way the answer grain reads
them by default):

* answerable: its top passages are read as the answer grain reads them (``ReadSettings()``:
  the default passages, window and weight), and its best answer is labelled by SQuAD exact
  match;
* unanswerable: only retrieved passages (of the top ``--depth``) that cannot answer it are
  read, so its best answer is wrong by design (the "not in these documents" case).
  ``--unanswerable`` says which: ``other-documents`` (the default) reads the top passages of
  OTHER documents than its gold passage's, as when the document that answers is not in the
  index at all; ``retrieved`` the top passages that hold none of its answers and are not its
  gold passage (mostly its own document's other passages: the topic is there, the answer
  is not); ``both`` samples from the two alike.  A seeded ``--unanswerable-share`` of the
  examples are unanswerable (most questions asked of a user's documents are answerable,
  and the share sets the calibration's base rate).

The logistic calibration (:mod:`anygrain.reader.confidence`) is fitted on the first half
of the questions and measured on the second (AUROC, ECE over 10 bins on all examples and on
the answerable ones alone, abstention precision and recall for the unanswerable ones at the
threshold chosen on the first half), then refitted on all of them with the threshold of
best F1 at abstaining on the unanswerable examples, and written to ``--out`` (a reader
directory gets ``confidence.json``; default: the reader's own directory).  Prints JSON.

``--soft-labels FILE`` (``bench/reference_variability.py``'s output) fits against the
probability that an answer is right under SEVERAL references, as SQuAD dev, XQuAD and most
evaluations count it, where the held-out training questions give one: an answer that misses
its one reference is labelled with the measured chance that another annotator's answer
matches it, by its token F1 against the one reference (an exact match stays 1, an
unanswerable example 0). The measures are then reported against both labels.

    python bench/calibrate_reader.py --reader reader-minilm --index /work/runs/ho-phrase \
        --questions squad:/work/runs/split/validation.json --limit 1000 --out /tmp/conf.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import Index, load_questions
from anygrain.eval.squad import exact_match, f1, normalize_answer
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
UNANSWERABLE = ("other-documents", "retrieved", "both")


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


def abstention(conf: np.ndarray, target: np.ndarray, t: float) -> dict[str, float]:
    """Abstaining below ``t``: precision and recall against ``target`` (what should be
    abstained on)."""
    abstain = conf < t
    tp = float((abstain & target).sum())
    return {
        "abstention_precision": round(tp / max(abstain.sum(), 1), 4),
        "abstention_recall": round(tp / max(target.sum(), 1), 4),
        "answered": int((~abstain).sum()),
    }


def holds_answer(hit: Hit, answers: list[str]) -> bool:
    text = normalize_answer(hit.text)
    return any(normalize_answer(a) and normalize_answer(a) in text for a in answers)


def gold_documents(index: Index, questions: list[Any]) -> list[set[str]]:
    """The documents of each question's gold passages in ``index`` (empty when none is in it)."""
    store = index.corpus
    return [
        set(store.column("doc_id", [store.row_of(pid) for pid in q.gold if pid in store]))
        for q in questions
    ]


def with_share(rows: list[Any], share: float, seed: int) -> list[Any]:
    """Every answerable row and a seeded sample of unanswerable ones, ``share`` of the whole."""
    if not 0 <= share < 1:
        raise SystemExit(f"--unanswerable-share must be in [0, 1), not {share}")
    ans = [r for r in rows if r[3]]
    un = [r for r in rows if not r[3]]
    random.Random(seed).shuffle(un)
    keep = min(len(un), round(share / (1 - share) * len(ans)))
    return sorted(ans + un[:keep], key=lambda r: r[0])


def soft_labeller(path: Path | None) -> Callable[[bool, float], float]:
    """``label(correct, f1)``: 1 or 0, or with a reference-variability file the chance that a
    miss of the one reference is right under several."""
    if path is None:
        return lambda ok, _f1: float(ok)
    bins = json.loads(path.read_text(encoding="utf-8"))["missed_first_bins"]

    def label(ok: bool, score: float) -> float:
        if ok:
            return 1.0
        return float(next(b for b in bins if score <= b["f1_first_upto"])["p_any_reference"])

    return label


def measures(
    conf: np.ndarray, y: np.ndarray, unans: np.ndarray, t: float, soft: np.ndarray | None = None
) -> dict[str, Any]:
    extra = {}
    if soft is not None:
        extra = {
            "ece_10_soft": round(ece(conf, soft), 4),
            "ece_10_answerable_soft": round(ece(conf[~unans], soft[~unans]), 4),
            "soft_label_mean_answerable": round(float(soft[~unans].mean()), 4),
        }
    return {
        **extra,
        "examples": len(y),
        "auroc": round(auroc(conf, y), 4),
        "ece_10": round(ece(conf, y), 4),
        "ece_10_answerable": round(ece(conf[~unans], y[~unans]), 4),
        "em_answerable": round(float(y[~unans].mean()), 4),
        "mean_confidence_answerable": round(float(conf[~unans].mean()), 4),
        "threshold": round(t, 4),
        **abstention(conf, unans, t),
        "answerable_right_abstained": int(((conf < t) & y).sum()),
    }


def held_out_sample(args: argparse.Namespace) -> tuple[list[Any], Index, Any]:
    """A seeded sample of ``args.limit`` answerable questions of ``args.questions``, the index
    they are asked of and the reader (``args.reader``) for it."""
    qs = [q for q in load_questions(args.questions) if q.answers]
    random.Random(args.seed).shuffle(qs)
    idx = Index.load(args.index)
    return qs[: args.limit], idx, load_reader_for(idx, args.reader)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reader", required=True, help="reader directory or shipped name")
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, help="held-out training questions")
    ap.add_argument("--out", type=Path, help="file or directory (default: the reader's)")
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--depth", type=int, default=100, help="passages retrieved per question")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--unanswerable-share", type=float, default=0.2)
    ap.add_argument("--unanswerable", choices=UNANSWERABLE, default="other-documents")
    ap.add_argument(
        "--soft-labels", type=Path, help="bench/reference_variability.py's JSON (see above)"
    )
    args = ap.parse_args()
    labeller = soft_labeller(args.soft_labels)
    if any(f in args.questions.lower() for f in FORBIDDEN):
        raise SystemExit(f"{args.questions}: a test set; fit on held-out training data only")

    qs, idx, reader = held_out_sample(args)
    s = ReadSettings()
    log(f"{len(qs)} questions; retrieving {args.depth} passages each")
    texts = [q.text for q in qs]
    found = idx.search(texts, args.depth, **idx.unit_options(Unit.PASSAGE))
    kinds = {"answerable": [list(h[: s.passages]) for h in found]}
    if args.unanswerable in ("retrieved", "both"):
        kinds["retrieved"] = [
            [h for h in hs if not holds_answer(h, q.answers) and h.passage_id not in q.gold][
                : s.passages
            ]
            for q, hs in zip(qs, found, strict=True)
        ]
    if args.unanswerable in ("other-documents", "both"):
        docs = gold_documents(idx, qs)
        kinds["other-documents"] = [
            [h for h in hs if docs[i] and h.doc_id not in docs[i]][: s.passages]
            for i, hs in enumerate(found)
        ]
    # question, features, correct, answerable, label fitted on
    rows: list[tuple[int, np.ndarray, bool, bool, float]] = []
    for kind, lists in kinds.items():
        log(f"reading {kind}")
        for b in range(0, len(qs), 32):
            part = lists[b : b + 32]
            cands = span_candidates(reader, texts[b : b + 32], part, s)
            for j, (c, hs) in enumerate(zip(cands, part, strict=True)):
                if not hs:
                    continue
                ranked = ranked_answers(c, hs, s.retriever_weight)
                if not ranked:
                    continue
                q = qs[b + j]
                _, best = ranked[0]
                answer = hs[best.passage].text[best.start : best.end]
                ok = kind == "answerable" and exact_match(answer, q.answers) > 0
                feats = answer_features(ranked, [h.score for h in hs])[0]
                target = labeller(ok, f1(answer, q.answers)) if kind == "answerable" else 0.0
                rows.append((b + j, feats, bool(ok), kind == "answerable", target))
    rows = with_share(rows, args.unanswerable_share, args.seed)
    x = np.stack([r[1] for r in rows])
    y = np.asarray([r[2] for r in rows])
    label = np.asarray([r[4] for r in rows])
    soft = label if args.soft_labels else None
    unans = ~np.asarray([r[3] for r in rows])
    first = np.asarray([r[0] < len(qs) // 2 for r in rows])
    fp = reader_fingerprint(saved_model_dir(args.reader))
    half = fit_calibration(x[first], label[first], fp)
    t_half, _ = best_threshold(half.probability(x[first]), unans[first])
    report: dict[str, Any] = {
        "reader": str(args.reader),
        "questions": args.questions,
        "index": str(args.index),
        "read": {"passages": s.passages, "window": s.window, "weight": s.retriever_weight},
        "limit": len(qs),
        "examples": len(rows),
        "unanswerable": int(unans.sum()),
        "unanswerable_from": args.unanswerable,
        "soft_labels": str(args.soft_labels) if args.soft_labels else None,
        "fit_on_first_half_measured_on_second": measures(
            half.probability(x[~first]),
            y[~first],
            unans[~first],
            t_half,
            None if soft is None else soft[~first],
        ),
    }
    cal = fit_calibration(x, label, fp)
    threshold, abstain_f1 = best_threshold(cal.probability(x), unans)
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
            "unanswerable_share": args.unanswerable_share,
            "unanswerable": args.unanswerable,
            "read": report["read"],
            "seed": args.seed,
            "abstention_f1": round(abstain_f1, 4),
            **({"soft_labels": str(args.soft_labels)} if args.soft_labels else {}),
        },
    )
    report["all"] = measures(cal.probability(x), y, unans, threshold, soft)
    report["weights"] = dict(zip(cal.features, cal.weights, strict=True))
    out = args.out or saved_model_dir(args.reader)
    report["written"] = str(cal.save(out))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
