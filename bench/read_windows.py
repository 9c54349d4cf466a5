"""Read less: windows around the phrase index's best phrase against whole passages, as JSON.

Each question's top ``--depth`` passages are retrieved once from a phrase index (its passage
hits carry the best phrase as their ``focus``); then, for every window size (``none``:
whole passages, as the answer grain reads today) and every number of passages read K, the
reader reads them (the top ``depth`` once; K of them take K / depth of that time) and
EM/F1 and questions per second are reported.  Reading time counts
the reader only (tokenising, windows, forward passes, span decoding); ``q/s end to end``
adds the retrieval's time per question.  Choose settings on HELD-OUT TRAINING articles
(``bench/squad_holdout.py``), then run once on the test set with the chosen ones.

    python bench/read_windows.py --index IDX --questions squad:VAL.json \
        --windows none,96,128,160 --ks 1,2,3 --runtime onnx [--limit N]

Run it twice for the two paths of a CPU: ``--runtime torch`` (bf16 where native) and
``--runtime onnx`` (float32, what a CPU without bf16 runs); ``ONEDNN_MAX_CPU_ISA=AVX2``
forces torch's float32 kernels to AVX2.
"""

from __future__ import annotations

import argparse
import json
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
    combine,
    load_reader_for,
    span_candidates,
)


def read_rows(
    reader: Any,
    qs: list[Any],
    hits: list[Any],
    ks: list[int],
    w: int | None,
    sure: float | None,
    args: argparse.Namespace,
    retrieve_s: float,
) -> list[dict[str, Any]]:
    """Read every question once at window ``w``; without ``sure`` the top ``depth`` passages
    give every K (each passage is read on its own: K of them take K / depth of the time);
    with it, the passages read depend on the first one's answer, so only K = depth."""
    depth = max(ks)
    s = ReadSettings(passages=depth, window=w, sure=sure, retriever_weight=args.weight)
    cands: list[Any] = []
    t1 = time.perf_counter()
    for b in range(0, len(qs), args.batch):
        part = hits[b : b + args.batch]
        cands += span_candidates(reader, [q.text for q in qs[b : b + args.batch]], part, s)
    read_s = time.perf_counter() - t1
    n = len(qs)
    rows = []
    for k in ks if sure is None else [depth]:
        em = f = 0.0
        for q, c, h in zip(qs, cands, hits, strict=True):
            found = combine(c, h, 1, passages=k, retriever_weight=args.weight)
            pred = found[0].answer_text if found else ""
            em += exact_match(pred, q.answers)
            f += f1(pred, q.answers)
        per_q = read_s * k / depth / n
        row = {
            "window": w,
            "sure": sure,
            "K": k,
            "passages_with_spans": round(
                len({(c.passage, i) for i, cs in enumerate(cands) for c in cs if c.passage < k})
                / n,
                3,
            ),
            "em": round(100 * em / n, 2),
            "f1": round(100 * f / n, 2),
            "read_q_per_s": round(1 / per_q, 2),
            "q_per_s_end_to_end": round(1 / (per_q + retrieve_s / n), 2),
        }
        log(json.dumps(row))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--reader", default=None)
    ap.add_argument("--runtime", default="auto", choices=["auto", "onnx", "torch"])
    ap.add_argument("--windows", default="none,96,128,160")
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument(
        "--sure",
        default="none",
        help="comma list: none (read every passage) or the probability of the first "
        "window's best span below which every passage is read whole (K = the largest --ks)",
    )
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32, help="questions read per call")
    ap.add_argument("--weight", type=float, default=1.5)
    args = ap.parse_args()

    ks = sorted(int(k) for k in args.ks.split(","))
    windows = [None if w == "none" else int(w) for w in args.windows.split(",")]
    sures = [None if p == "none" else float(p) for p in args.sure.split(",")]
    qs = [q for q in load_questions(args.questions) if q.answers][: args.limit]
    index = Index.load(args.index)
    reader = load_reader_for(index, args.reader, args.runtime)
    depth = max(ks)
    t0 = time.perf_counter()
    hits: list[Any] = []
    for b in range(0, len(qs), 256):
        hits += index.search(
            [q.text for q in qs[b : b + 256]], depth, **index.unit_options(Unit.PASSAGE)
        )
    retrieve_s = time.perf_counter() - t0
    log(f"retrieved {len(qs)} questions in {retrieve_s:.1f} s")
    rows = []
    for w in windows:
        for sure in sures:
            if sure is not None and w is None:
                continue
            rows += read_rows(reader, qs, hits, ks, w, sure, args, retrieve_s)
    print(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "cpu": cpu_name(),
                "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
                "runtime": str(getattr(reader, "runtime", "torch")),
                "threads": os.environ.get("OMP_NUM_THREADS"),
                "questions": len(qs),
                "retrieve_q_per_s": round(len(qs) / retrieve_s, 2),
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
