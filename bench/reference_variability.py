"""How often an answer that misses its one reference matches another annotator's, from
TRAINING data with several references per question, read by a reader that never trained on it.

SQuAD v1.1 train (and so the held-out articles a reader's confidence is fitted on) gives one
reference answer per question; SQuAD dev, XQuAD and SQuAD-Shifts give three or more, and a
prediction counts as right when it matches any of them. A calibration fitted against one
reference therefore under-states how often the answer is right on multi-reference data. This
script measures, on SQuAD-Shifts (training data; never a test set) read on the gold paragraph
by ``--reader`` (which must not have trained on it: the first ``reader-minilm`` saw SQuAD
train alone), the probability that a prediction with no exact match to the FIRST reference
matches ANY reference, per bin of its token F1 against the first reference. Written to
``--out`` as the soft labels ``bench/calibrate_reader.py --soft-labels`` fits on.  Prints JSON.

    python bench/reference_variability.py --reader /work/runs/reader-minilm-v1 \
        --squad ../shared/data/squadshifts/new_wiki_v1.0.json ... --per-file 1000 --out X.json
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

from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Hit, Unit
from anygrain.reader.answering import ReadSettings, load_reader_for, ranked_answers, span_candidates

FORBIDDEN = ("dev-v1.1", "dev-v2.0", "tatqa", "xquad")
#: upper edges of the F1 bins (F1 against the first reference, exact match excluded)
EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sample(path: Path, n: int, seed: int) -> list[tuple[str, str, str, list[str]]]:
    """A seeded sample of ``n`` (question, title, context, answers) with two or more answers."""
    rows = [
        (qa["question"], a.get("title", ""), p["context"], [x["text"] for x in qa["answers"]])
        for a in json.loads(path.read_text(encoding="utf-8"))["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
        if len(qa["answers"]) >= 2
    ]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reader", required=True, help="a reader that never trained on --squad")
    ap.add_argument("--squad", required=True, nargs="+", type=Path, help="multi-reference data")
    ap.add_argument("--per-file", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    for p in args.squad:
        if any(f in str(p).lower() for f in FORBIDDEN):
            raise SystemExit(f"{p}: a test set; measure on training data only")
    rows = [r for p in args.squad for r in sample(p, args.per_file, args.seed)]
    reader = load_reader_for(None, args.reader)
    settings = ReadSettings(passages=1)
    log(f"{len(rows)} questions, reading their gold paragraphs")
    firsts, anys, f1s = [], [], []
    for b in range(0, len(rows), 32):
        part = rows[b : b + 32]
        hits = [
            [Hit(Unit.PASSAGE, 0.0, i, f"p{i}", f"d{i}", title, ctx)]
            for i, (_, title, ctx, _) in enumerate(part)
        ]
        cands = span_candidates(reader, [r[0] for r in part], hits, settings)
        for (_, _, ctx, answers), c, hs in zip(part, cands, hits, strict=True):
            ranked = ranked_answers(c, hs, settings.retriever_weight)
            pred = ctx[ranked[0][1].start : ranked[0][1].end] if ranked else ""
            firsts.append(exact_match(pred, answers[:1]))
            anys.append(exact_match(pred, answers))
            f1s.append(f1(pred, answers[:1]))
    first, any_, f1_first = (np.asarray(v, dtype=float) for v in (firsts, anys, f1s))
    missed = first == 0
    bins: list[dict[str, Any]] = []
    for i, hi in enumerate(EDGES):
        lo = -1.0 if i == 0 else EDGES[i - 1]
        m = missed & (f1_first > lo) & (f1_first <= hi)
        bins.append(
            {
                "f1_first_upto": hi,
                "questions": int(m.sum()),
                "p_any_reference": round(float(any_[m].mean()), 4) if m.any() else 0.0,
            }
        )
    report = {
        "reader": args.reader,
        "data": [str(p) for p in args.squad],
        "questions": len(rows),
        "em_first_reference": round(float(first.mean()) * 100, 2),
        "em_any_reference": round(float(any_.mean()) * 100, 2),
        "f1_first_reference": round(float(f1_first.mean()) * 100, 2),
        "missed_first_bins": bins,
    }
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        tmp.replace(args.out)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
