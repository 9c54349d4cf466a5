"""When to read more than a window: reading policies compared on one reading, as JSON.

Each question's top ``--depth`` passages are retrieved once from a phrase index and read
twice: a ``--window``-token window around each passage's best phrase (its ``focus``), and
whole.  Every policy is then scored on those span candidates without reading again:

- ``whole``: every passage whole (what reading was before windows);
- ``windows``: every passage's window;
- ``first+windows@S``: the first passage's window, the others' windows only when the best
  span there is less likely than S (today's ``sure`` stop);
- ``first+whole@S``: the first window, and every passage whole when it is unsure;
- ``windows+whole@S``: every window, and every passage whole when the most likely span of
  all of them is less likely than S.

A policy's reading time is the pairs it reads, each at its pass's mean time per pair (one
thread; the first window costs a window).  Choose on HELD-OUT TRAINING articles, then run
the chosen policy once on the test set (``bench/read_windows.py``, ``anygrain eval-reader``).

    python bench/read_policy.py --index IDX --questions squad:VAL.json --limit 2000 \
        --sure 0.33,0.5,0.7,0.85 --runtime onnx
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import log  # noqa: E402
from cold_start import cpu_name  # noqa: E402

from anygrain import Index, load_questions  # noqa: E402
from anygrain.eval.squad import exact_match, f1  # noqa: E402
from anygrain.hits.hit import Unit  # noqa: E402
from anygrain.reader.answering import (  # noqa: E402
    ReadSettings,
    SpanCandidate,
    combine,
    load_reader_for,
    span_candidates,
)


def read_all(
    reader: Any, qs: list[Any], hits: list[Any], window: int | None, args: argparse.Namespace
) -> tuple[list[list[SpanCandidate]], float]:
    """Every (question, passage) pair's candidates at ``window`` (None: whole), and the
    seconds that took."""
    s = ReadSettings(passages=args.depth, window=window, sure=None, retriever_weight=args.weight)
    cands: list[list[SpanCandidate]] = []
    t = time.perf_counter()
    for b in range(0, len(qs), args.batch):
        texts = [q.text for q in qs[b : b + args.batch]]
        cands += span_candidates(reader, texts, hits[b : b + args.batch], s)
    return cands, time.perf_counter() - t


def best_log_prob(cands: list[SpanCandidate], passages: set[int]) -> float:
    lps = [c.log_prob for c in cands if c.passage in passages]
    return max(lps) if lps else -math.inf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--reader", default=None)
    ap.add_argument("--runtime", default="onnx", choices=["auto", "onnx", "torch"])
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--sure", default="0.33,0.5,0.7,0.85")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--weight", type=float, default=1.5)
    args = ap.parse_args()

    qs = [q for q in load_questions(args.questions) if q.answers][: args.limit]
    index = Index.load(args.index)
    reader = load_reader_for(index, args.reader, args.runtime)
    t0 = time.perf_counter()
    hits: list[Any] = []
    for b in range(0, len(qs), 256):
        batch = [q.text for q in qs[b : b + 256]]
        hits += index.search(batch, args.depth, **index.unit_options(Unit.PASSAGE))
    retrieve_s = time.perf_counter() - t0
    log(f"retrieved {len(qs)} questions in {retrieve_s:.1f} s")
    win, win_s = read_all(reader, qs, hits, args.window, args)
    log(f"windows read in {win_s:.1f} s")
    whole, whole_s = read_all(reader, qs, hits, None, args)
    log(f"whole passages read in {whole_s:.1f} s")
    n_pairs = sum(len(h) for h in hits)
    per_win, per_whole = win_s / n_pairs, whole_s / n_pairs

    def policy(
        sure: float | None, first_only: bool, fallback_whole: bool
    ) -> tuple[list[Any], float]:
        """Each question's candidates under a policy, and its reading seconds."""
        out, seconds = [], 0.0
        for qi, h in enumerate(hits):
            k = len(h)
            has_focus = bool(h) and h[0].focus is not None
            if not has_focus:  # read whole, as the answer grain does without a focus
                out.append(whole[qi])
                seconds += k * per_whole
                continue
            first = {0} if first_only else set(range(k))
            cands = [c for c in win[qi] if c.passage in first]
            seconds += len(first) * per_win
            if sure is None or best_log_prob(cands, first) >= math.log(sure):
                out.append(cands)
                continue
            if fallback_whole:
                out.append(whole[qi])
                seconds += k * per_whole
            else:
                out.append(win[qi])
                seconds += (k - len(first)) * per_win
        return out, seconds

    sures = [float(s) for s in args.sure.split(",")]
    plans: list[tuple[str, float | None, bool, bool]] = [
        ("windows", None, False, False),
        *((f"first+windows@{s}", s, True, False) for s in sures),
        *((f"first+whole@{s}", s, True, True) for s in sures),
        *((f"windows+whole@{s}", s, False, True) for s in sures),
    ]
    rows = []
    evaluated: list[tuple[str, list[Any], float]] = [("whole", whole, whole_s)]
    evaluated += [(name, *policy(s, fo, fw)) for name, s, fo, fw in plans]
    n = len(qs)
    for name, cands, seconds in evaluated:
        em = f = 0.0
        for q, c, h in zip(qs, cands, hits, strict=True):
            found = combine(c, h, 1, passages=args.depth, retriever_weight=args.weight)
            pred = found[0].answer_text if found else ""
            em += exact_match(pred, q.answers)
            f += f1(pred, q.answers)
        row = {
            "policy": name,
            "em": round(100 * em / n, 2),
            "f1": round(100 * f / n, 2),
            "read_q_per_s": round(n / seconds, 2),
            "q_per_s_end_to_end": round(n / (seconds + retrieve_s), 2),
        }
        log(json.dumps(row))
        rows.append(row)
    print(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "cpu": cpu_name(),
                "runtime": str(getattr(reader, "runtime", "torch")),
                "threads": os.environ.get("OMP_NUM_THREADS"),
                "questions": n,
                "window": args.window,
                "depth": args.depth,
                "seconds_per_pair": {"window": per_win, "whole": per_whole},
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
