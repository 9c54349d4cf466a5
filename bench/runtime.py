"""Query encoding and reading on ONNX Runtime against torch, in one process on one core
(issue 35).

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

For the reader (the shipped English one, or ``--reader``), reading the top 3 passages of
a question as the answer grain does (``answer_hits``; SQuAD dev questions, each with its own
paragraph and the next two of its article): the median milliseconds of one question per
call (a served answer) and questions per second in batches of 32, on torch float32, torch
bfloat16 and ONNX Runtime float32; whether the answers are the same and the largest
difference of their scores (target: identical answers, scores within 1e-4).

Both runtimes use one intra-op thread.  Prints one JSON object; without an index, the
reader part only.

    taskset -c 1 python3 bench/runtime.py [/work/runs/sq-default] \\
        [--questions ../shared/data/squad-v1.1/dev-v1.1.json] [--n 200] [--reader DIR]
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
from typing import Any

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

SUPER_BOWL = [
    "Super Bowl 50 was an American football game to determine the champion of the National "
    "Football League (NFL) for the 2015 season. The American Football Conference (AFC) "
    "champion Denver Broncos defeated the National Football Conference (NFC) champion "
    "Carolina Panthers 24-10 to earn their third Super Bowl title. The game was played on "
    "February 7, 2016, at Levi's Stadium in the San Francisco Bay Area at Santa Clara.",
    "The Panthers finished the regular season with a 15-1 record, and quarterback Cam Newton "
    "was named the NFL Most Valuable Player (MVP). They defeated the Arizona Cardinals 49-15 "
    "in the NFC Championship Game and advanced to their second Super Bowl appearance.",
    "Denver linebacker Von Miller was named Super Bowl MVP, recording five solo tackles, "
    "2.5 sacks, and two forced fumbles. The league emphasized the golden anniversary with "
    "various gold-themed initiatives.",
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


def reading_questions(path: Path | None, n: int) -> tuple[list[str], list[list[Any]]]:
    """``n`` questions, each with 3 passage hits: its own paragraph and the next two of its
    article (or the bench's Super Bowl passages when no file is given)."""
    from anygrain.hits.hit import Hit, Unit

    def hit(i: int, title: str, text: str) -> Hit:
        return Hit(Unit.PASSAGE, 3.0 - i, i, f"p{i}", title, title, text)

    if path is None:
        hits = [hit(i, "Super Bowl 50", t) for i, t in enumerate(SUPER_BOWL)]
        return load_questions(None, n), [hits] * n
    data = json.loads(path.read_text(encoding="utf-8"))
    questions, passages = [], []
    for art in data["data"]:
        paras = art["paragraphs"]
        for j, para in enumerate(paras):
            read = [paras[(j + d) % len(paras)]["context"] for d in range(3)]
            for qa in para["qas"]:
                questions.append(qa["question"])
                passages.append([hit(i, art["title"], t) for i, t in enumerate(read)])
    return questions[:n], passages[:n]


def reader_bench(reader_name: str | None, path: Path | None, n: int) -> dict[str, object]:
    """Reading the top 3 passages on torch fp32, torch bf16 and ONNX Runtime fp32."""
    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.models.base import saved_model_dir
    from anygrain.models.shipped import default_reader
    from anygrain.reader.answering import ReadSettings, answer_hits
    from anygrain.reader.model import Reader
    from anygrain.reader.onnx import onnx_reader

    name = reader_name or default_reader("en")
    model = Reader.load(saved_model_dir(name))
    onnx = onnx_reader(model, GraphCache.default())
    questions, hits = reading_questions(path, n)
    fp32, bf16 = ReadSettings(bf16=False), ReadSettings(bf16=True)
    runs = {"torch_fp32": (model, fp32), "torch_bf16": (model, bf16), "onnx_fp32": (onnx, fp32)}

    def answers(rt: str, qs: list[str], hs: list[list[Any]]) -> list[list[Any]]:
        reader, settings = runs[rt]
        return answer_hits(reader, qs, hs, k=1, settings=settings)

    one: dict[str, float] = {}
    batch: dict[str, float] = {}
    for rt in runs:
        it = iter(range(len(questions) * 2))

        def single(rt: str = rt, it: Any = it) -> object:
            i = next(it) % len(questions)
            return answers(rt, [questions[i]], [hits[i]])

        one[rt] = round(per_call_ms(single, len(questions)), 3)
        t0 = time.perf_counter()
        for c in range(0, len(questions), 32):
            answers(rt, questions[c : c + 32], hits[c : c + 32])
        batch[rt] = round(len(questions) / (time.perf_counter() - t0), 2)
    want, got = answers("torch_fp32", questions, hits), answers("onnx_fp32", questions, hits)
    same = sum(
        [(h.passage_id, h.span) for h in w] == [(h.passage_id, h.span) for h in g]
        for w, g in zip(want, got, strict=True)
    )
    diff = max(
        (
            abs(a.score - b.score)
            for w, g in zip(want, got, strict=True)
            for a, b in zip(w, g, strict=False)
        ),
        default=0.0,
    )
    return {
        "reader": name,
        "questions": len(questions),
        "passages_read": 3,
        "read_one_question_per_call_median_ms": one,
        "read_batch32_questions_per_s": batch,
        "read_speedup_onnx_vs_torch_fp32": round(one["torch_fp32"] / one["onnx_fp32"], 2),
        "read_speedup_onnx_vs_torch_bf16": round(one["torch_bf16"] / one["onnx_fp32"], 2),
        "answers_identical_onnx_vs_torch_fp32": f"{same}/{len(questions)}",
        "max_abs_score_diff_onnx_vs_torch_fp32": diff,
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=Path, nargs="?", help="a phrase index directory")
    ap.add_argument("--questions", type=Path, default=None, help="a SQuAD-format file")
    ap.add_argument("--n", type=int, default=200, help="questions timed one per call")
    ap.add_argument("--runs", type=int, default=5, help="fresh-process runs per runtime")
    ap.add_argument("--reader", default=None, help="reader (default: the shipped English one)")
    args = ap.parse_args(argv)

    import torch

    from anygrain.utils.precision import native_bf16
    from anygrain.utils.threads import set_threads

    set_threads(1)
    torch.set_num_threads(1)
    out: dict[str, object] = {
        "bench": "runtime",
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "native_bf16": native_bf16(),
        "torch": torch.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
        "threads": 1,
    }
    if args.index is not None:
        out.update(phrase_bench(args))
    out["reader"] = reader_bench(args.reader, args.questions, args.n)
    print(json.dumps(out, indent=2))


def phrase_bench(args: argparse.Namespace) -> dict[str, object]:
    """The phrase model's question side on torch fp32, torch bf16 and ONNX Runtime fp32."""
    import numpy as np

    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.index.base import Index
    from anygrain.phrase.onnx import onnx_questions

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
    return {
        "index": str(args.index),
        "questions": len(questions),
        "question_one_per_call_median_ms": one,
        "question_speedup_onnx_vs_torch_fp32": round(ratio, 2),
        "question_speedup_target": 2.0,
        "question_speedup_onnx_vs_torch_bf16": round(one["torch_bf16"] / one["onnx_fp32"], 2),
        "question_batch64_per_s": batch,
        "max_abs_vector_diff_onnx_vs_torch": max_diff,
        "open_and_search_fresh_process": search,
        "open_and_search_speedup": round(
            float(search["torch"]["process_wall_median_s"])  # type: ignore[arg-type]
            / float(search["onnx"]["process_wall_median_s"]),  # type: ignore[arg-type]
            2,
        ),
    }


if __name__ == "__main__":
    main()
