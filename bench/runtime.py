"""Query encoding on ONNX Runtime against torch, in one process on one core (issue 35).

For the phrase model of a phrase index (the SQuAD dev default index's ``phrase-minilm``),
in the same run:

- question encoding, one question per call as a served search encodes it: the median
  latency on torch float32, torch bfloat16 (the server's default where the CPU has native
  bf16) and ONNX Runtime float32 (target: ONNX >= 2x faster than torch float32), and a
  batch of 64 questions per call (throughput);
- the largest difference between the runtimes' vectors (the index's tolerance: 1e-4);
- ``Index.load`` + one search in a fresh process with ``--runtime onnx`` (the graph already
  cached) and with ``--runtime torch``: wall and CPU seconds, and whether torch or
  transformers were imported.

Both runtimes use one intra-op thread.  Prints one JSON object.

    taskset -c 1 python3 bench/runtime.py /work/runs/sq-default \\
        [--questions ../shared/data/squad-v1.1/dev-v1.1.json] [--n 200]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

DEFAULT_QUESTIONS = [
    "Which NFL team represented the AFC at Super Bowl 50?",
    "Where did Super Bowl 50 take place?",
    "What color was used to emphasize the 50th anniversary of the Super Bowl?",
    "Who was the Super Bowl 50 MVP?",
    "How many appearances have the Denver Broncos made in the Super Bowl?",
    "What is the name of the stadium where Super Bowl 50 was played?",
    "Which Carolina Panthers player was named Most Valuable Player?",
    "What year did the Carolina Panthers form?",
]

OPEN_AND_SEARCH = """
import json, resource, sys, time
t0 = time.perf_counter()
from anygrain.index.base import Index
idx = Index.load(sys.argv[1], runtime=sys.argv[2])
hits = idx.search([sys.argv[3]], 10)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
heavy = sorted({m.partition(".")[0] for m in sys.modules} & {"torch", "transformers"})
print(json.dumps({"wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                  "runtime": idx.runtime.value, "heavy_imported": heavy,
                  "top": hits[0][0].text[hits[0][0].span[0]:hits[0][0].span[1]]
                  if hits[0] and hits[0][0].span else None,
                  "top_score": hits[0][0].score if hits[0] else None}))
"""


def load_questions(path: Path | None, n: int) -> list[str]:
    if path is None:
        return (DEFAULT_QUESTIONS * (n // len(DEFAULT_QUESTIONS) + 1))[:n]
    data = json.loads(path.read_text(encoding="utf-8"))
    out = [
        qa["question"] for art in data["data"] for para in art["paragraphs"] for qa in para["qas"]
    ]
    return out[:n]


def per_call_ms(fn: Callable[[], object], calls: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def fresh_process(index: Path, runtime: str, question: str, runs: int) -> dict[str, object]:
    """Median wall and CPU of ``Index.load`` + one search in a new interpreter."""
    rows = []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-c", OPEN_AND_SEARCH, str(index), runtime, question],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        if i == 0:
            continue  # warm-up: page cache, and the graph exported when missing
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["process_wall_s"] = round(wall, 3)
        row["process_cpu_s"] = round(
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 3
        )
        rows.append(row)
    last = rows[-1]
    return {
        "runtime": last["runtime"],
        "heavy_imported": last["heavy_imported"],
        "top": last["top"],
        "top_score": last["top_score"],
        "process_wall_median_s": round(statistics.median(r["process_wall_s"] for r in rows), 3),
        "process_cpu_median_s": round(statistics.median(r["process_cpu_s"] for r in rows), 3),
        "in_process_wall_median_s": round(statistics.median(r["wall_s"] for r in rows), 3),
        "runs": len(rows),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=Path, help="a phrase index directory")
    ap.add_argument("--questions", type=Path, default=None, help="a SQuAD-format file")
    ap.add_argument("--n", type=int, default=200, help="questions timed one per call")
    ap.add_argument("--runs", type=int, default=5, help="fresh-process runs per runtime")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.index.base import Index
    from anygrain.phrase.onnx import onnx_questions
    from anygrain.utils.precision import native_bf16
    from anygrain.utils.threads import set_threads

    set_threads(1)
    torch.set_num_threads(1)
    questions = load_questions(args.questions, args.n)
    idx = Index.load(args.index, runtime="torch")
    model = idx.model  # type: ignore[attr-defined]
    onnx = onnx_questions(model, GraphCache.default())

    ts, te = model.encode_questions(questions)
    os_, oe = onnx.encode_questions(questions)
    max_diff = float(max(np.abs(ts - os_).max(), np.abs(te - oe).max()))

    one: dict[str, float] = {}
    for name, fn in (
        ("torch_fp32", lambda q: model.encode_questions([q])),
        ("torch_bf16", lambda q: model.encode_questions([q], bf16=True)),
        ("onnx_fp32", lambda q: onnx.encode_questions([q])),
    ):
        it = iter(questions * 2)
        one[name] = round(per_call_ms(lambda fn=fn, it=it: fn(next(it)), len(questions)), 3)
    batch: dict[str, float] = {}
    chunk = questions[:64]
    for name, fn2 in (
        ("torch_fp32", lambda: model.encode_questions(chunk)),
        ("torch_bf16", lambda: model.encode_questions(chunk, bf16=True)),
        ("onnx_fp32", lambda: onnx.encode_questions(chunk)),
    ):
        ms = per_call_ms(fn2, 5)
        batch[name] = round(len(chunk) / (ms / 1000), 1)

    question = DEFAULT_QUESTIONS[0]
    search = {rt: fresh_process(args.index, rt, question, args.runs) for rt in ("onnx", "torch")}
    ratio = one["torch_fp32"] / one["onnx_fp32"]
    print(
        json.dumps(
            {
                "bench": "runtime",
                "index": str(args.index),
                "python": platform.python_version(),
                "cpu": platform.processor() or platform.machine(),
                "native_bf16": native_bf16(),
                "torch": torch.__version__,
                "onnxruntime": __import__("onnxruntime").__version__,
                "threads": 1,
                "questions": len(questions),
                "question_one_per_call_median_ms": one,
                "question_speedup_onnx_vs_torch_fp32": round(ratio, 2),
                "question_speedup_target": 2.0,
                "question_speedup_onnx_vs_torch_bf16": round(
                    one["torch_bf16"] / one["onnx_fp32"], 2
                ),
                "question_batch64_per_s": batch,
                "max_abs_vector_diff_onnx_vs_torch": max_diff,
                "open_and_search_fresh_process": search,
                "open_and_search_speedup": round(
                    float(search["torch"]["process_wall_median_s"])  # type: ignore[arg-type]
                    / float(search["onnx"]["process_wall_median_s"]),  # type: ignore[arg-type]
                    2,
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
