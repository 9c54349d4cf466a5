"""Would more features make the answer confidence abstain more precisely? A held-out ablation.

The shipped confidence (:mod:`anygrain.reader.confidence`) sees the reader's span and
selection scores, the retrieval score relative to the best passage read and the margin to
the next answer. When the answering document is absent, the passages read are another
document's, and the question's own words (its names above all) are often missing from
them; this script measures whether features saying so add anything:

* ``overlap``: the share of the question's terms (the English BM25 analyzer: stemmed, no
  stop words) found in the answer's passage and title;
* ``overlap_near``: the same within 200 characters of the answer span;
* ``names``: the share of the question's capitalised words and numbers (its first word
  aside) found in the answer's passage and title (1 when it has none);
* ``support``: the share of the passages read that contain the answer's text;
* ``overlap_best``: ``overlap`` of the best-covered passage read.

Examples are made as ``bench/calibrate_reader.py`` makes them (the same seed, share and
``other-documents`` unanswerable examples, exact-match labels) from HELD-OUT TRAINING
questions. For each feature set the logistic calibration is fitted on one half of the
questions (threshold of best abstention F1 there) and measured on the other, both ways,
and the two halves averaged. Prints JSON.

    python bench/confidence_features.py --reader reader-minilm --index /work/runs/ho-phrase \
        --questions squad:/work/runs/split/validation.json --limit 2000
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_reader import (  # noqa: E402
    FORBIDDEN,
    auroc,
    ece,
    gold_documents,
    held_out_sample,
    log,
    with_share,
)

from anygrain.eval.squad import exact_match, normalize_answer  # noqa: E402
from anygrain.hits.hit import Unit  # noqa: E402
from anygrain.reader.answering import (  # noqa: E402
    ReadSettings,
    answer_features,
    ranked_answers,
    span_candidates,
)
from anygrain.reader.confidence import FEATURES, best_threshold, fit_logistic  # noqa: E402
from anygrain.sparse.analyzers import EnglishAnalyzer  # noqa: E402

EXTRA = ("overlap", "overlap_near", "names", "support", "overlap_best")
NAMES = re.compile(r"\b([A-Z][\w'-]*|\d[\d,.]*)")
NEAR = 200


def names_of(question: str) -> set[str]:
    words = question.split()
    first = words[0] if words else ""
    return {w.lower() for w in NAMES.findall(question) if w != first}


def share(part: set[str], whole: set[str]) -> float:
    return len(part & whole) / len(part) if part else 1.0


def collect(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(question number, answerable, correct, features)`` rows, features as
    :data:`FEATURES` + :data:`EXTRA`."""
    analyzer = EnglishAnalyzer()
    qs, idx, reader = held_out_sample(args)
    s = ReadSettings()
    texts = [q.text for q in qs]
    log(f"{len(qs)} questions; retrieving {args.depth} passages each")
    found = idx.search(texts, args.depth, **idx.unit_options(Unit.PASSAGE))
    docs = gold_documents(idx, qs)
    kinds = {
        True: [list(h[: s.passages]) for h in found],
        False: [
            [h for h in hs if docs[i] and h.doc_id not in docs[i]][: s.passages]
            for i, hs in enumerate(found)
        ],
    }
    terms = [set(t) for t in analyzer.tokenize(texts)]
    names = [names_of(t) for t in texts]
    rows: list[tuple[int, list[float], bool, bool]] = []
    for answerable, lists in kinds.items():
        log(f"reading {'answerable' if answerable else 'other documents'}")
        for b in range(0, len(qs), 32):
            part = lists[b : b + 32]
            for j, (c, hs) in enumerate(
                zip(span_candidates(reader, texts[b : b + 32], part, s), part, strict=True)
            ):
                ranked = ranked_answers(c, hs, s.retriever_weight) if hs else []
                if not ranked:
                    continue
                i = b + j
                best = ranked[0][1]
                hit = hs[best.passage]
                answer = hit.text[best.start : best.end]
                ok = answerable and exact_match(answer, qs[i].answers) > 0
                whole = [f"{h.title or ''} {h.text}" for h in hs]
                covered = [set(t) for t in analyzer.tokenize(whole)]
                near = hit.text[max(0, best.start - NEAR) : best.end + NEAR]
                said = normalize_answer(answer)
                extra = [
                    share(terms[i], covered[best.passage]),
                    share(terms[i], set(analyzer.tokenize([near])[0])),
                    sum(w in whole[best.passage].lower() for w in names[i]) / len(names[i])
                    if names[i]
                    else 1.0,
                    sum(bool(said) and said in normalize_answer(h.text) for h in hs) / len(hs),
                    max(share(terms[i], c) for c in covered),
                ]
                base = answer_features(ranked, [h.score for h in hs])[0]
                rows.append((i, [*base, *extra], ok, answerable))
    # every answerable example and a seeded share of unanswerable ones, as calibrate_reader
    rows = with_share(rows, args.unanswerable_share, args.seed)
    d = np.asarray([[r[0], r[3], r[2], *r[1]] for r in rows], dtype=np.float64)
    return d[:, 0].astype(int), d[:, 1] > 0, d[:, 2] > 0, d[:, 3:]


def fit(x: np.ndarray, y: np.ndarray) -> Any:
    """The probability function of the calibration's model fitted on ``x`` (any number of
    features: ``fit_calibration`` fixes them to the shipped five)."""
    w, bias, mean, scale = fit_logistic(x, y)
    return lambda xx: 1 / (1 + np.exp(-np.clip(bias + ((xx - mean) / scale) @ w, -50, 50)))


def cross(
    qid: np.ndarray, answerable: np.ndarray, ok: np.ndarray, x: np.ndarray
) -> dict[str, float]:
    x = np.nan_to_num(x, nan=-10.0)
    halves = qid < (qid.max() + 1) // 2
    got = []
    for first in (halves, ~halves):
        p = fit(x[first], ok[first].astype(float))
        t, _ = best_threshold(p(x[first]), ~answerable[first])
        conf, un, right = p(x[~first]), ~answerable[~first], ok[~first]
        abstain = conf < t
        tp = float((abstain & un).sum())
        got.append(
            [
                auroc(conf, right),
                ece(conf, right.astype(float)),
                tp / max(float(abstain.sum()), 1.0),
                tp / max(float(un.sum()), 1.0),
                auroc(-conf, un),
            ]
        )
    m = np.mean(got, axis=0)
    keys = ("auroc", "ece_10", "abstention_precision", "abstention_recall", "unanswerable_auroc")
    return {k: round(float(v), 4) for k, v in zip(keys, m, strict=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reader", required=True)
    ap.add_argument("--index", required=True, type=Path)
    ap.add_argument("--questions", required=True, help="held-out training questions")
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--unanswerable-share", type=float, default=0.2)
    args = ap.parse_args()
    if any(f in args.questions.lower() for f in FORBIDDEN):
        raise SystemExit(f"{args.questions}: a test set; measure on held-out training data only")
    t0 = time.perf_counter()
    qid, answerable, ok, x = collect(args)
    names = (*FEATURES, *EXTRA)
    base = list(range(len(FEATURES)))
    sets = [base] + [base + [len(FEATURES) + k] for k in range(len(EXTRA))]
    sets.append(base + [len(FEATURES) + k for k in range(len(EXTRA))])
    # what the shipped five abstain on, fitted on all examples at their best-F1 threshold
    conf = fit(np.nan_to_num(x[:, base], nan=-10.0), ok.astype(float))(
        np.nan_to_num(x[:, base], nan=-10.0)
    )
    abstain = conf < best_threshold(conf, ~answerable)[0]
    report = {
        "reader": args.reader,
        "questions": args.questions,
        "examples": len(qid),
        "unanswerable": int((~answerable).sum()),
        "seconds": round(time.perf_counter() - t0, 1),
        "shipped_five_in_sample": {
            "abstained": int(abstain.sum()),
            "unanswerable": int((abstain & ~answerable).sum()),
            "answerable": int((abstain & answerable).sum()),
            "answerable_answered_wrongly": int((abstain & answerable & ~ok).sum()),
        },
        "feature_sets": {
            "+".join(names[c] for c in cols): cross(qid, answerable, ok, x[:, cols])
            for cols in sets
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
