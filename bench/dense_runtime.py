"""The dense bi-encoder on each runtime, one thread, in one run (issue 35, dense part).

With the default English dense model (``minilm``, unless ``--model``):

- **questions**: the first ``--questions`` SQuAD v1.1 dev questions encoded one per call
  (as a search encodes them), torch float32 vs ONNX Runtime: ms per question (best of
  ``--rounds`` interleaved rounds, CPU time of this process; wall time beside) and the
  largest absolute difference of the vectors;
- **passages**: the first ``--passages`` SQuAD dev paragraphs (title and text, as a build
  encodes them, ``--batch-size`` as the build's default) on ``torch_fp32``, ``torch_bf16``
  (autocast; native on this CPU or not, said in ``native_bf16``), ``onnx_fp32`` (the
  exported graph, ``ORT_ENABLE_ALL``: what a build runs) and ``onnx_int8``
  (``quantize_dynamic``, per channel): passages per CPU second, ratio to torch fp32 in the
  same run, largest absolute difference from torch fp32;
- **quality** (``--quality``): passage top@1/5/20 over every SQuAD dev question against the
  index's vectors (``onnx_fp32``) and against the whole corpus encoded in ``torch_fp32``,
  ``torch_bf16`` and ``onnx_int8`` (questions in float32 on ONNX Runtime), exact inner
  products: what adopting each would change;
- **open and search**: ``anygrain search INDEX QUESTION --runtime R`` in a fresh process
  (``taskset`` to ``--core``, one thread), torch vs onnx: median wall and CPU seconds of
  ``--runs`` runs after a warm-up (which exports the graph once into the cache), and
  whether torch or transformers were imported.

``--index``: a dense index over SQuAD dev paragraphs (built, e.g., with ``anygrain index
../shared/data/squad-v1.1/dev-v1.1.json --kind dense --out DIR --threads 1``).  Prints one
JSON object.  The graph cache is ``$XDG_CACHE_HOME/anygrain/onnx``, here and in the
children.

    XDG_CACHE_HOME=/work/runs/h1b/cache OMP_NUM_THREADS=1 taskset -c 1 \\
        python3 bench/dense_runtime.py --index /work/runs/h1b/sq-dense [--quality]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passage_runtime import int8, paragraphs, variant  # noqa: E402
from startup import anygrain_command, imported_heavy, run_once  # noqa: E402

DEFAULT_SQUAD = Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json"
QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def squad_questions(path: Path) -> list[tuple[str, list[str]]]:
    """Every question of the file with its answer strings, in file order."""
    out = []
    for art in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for p in art["paragraphs"]:
            for qa in p["qas"]:
                out.append((qa["question"], [a["text"] for a in qa["answers"]]))
    return out


def best_of(
    rounds: int, runs: dict[str, Callable[[], Any]]
) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """``(best CPU seconds, best wall seconds, first output)`` of each run, rounds interleaved
    (CPU time: other jobs on a shared core stretch the wall clock, not this process's CPU)."""
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    first: dict[str, Any] = {}
    for r in range(rounds):
        for name, run in runs.items():
            t, c = time.perf_counter(), time.process_time()
            out = run()
            dt, dc = time.perf_counter() - t, time.process_time() - c
            cpu[name] = min(cpu.get(name, float("inf")), dc)
            wall[name] = min(wall.get(name, float("inf")), dt)
            first.setdefault(name, out)
            log(f"round {r + 1} {name}: {dc:.3f} s CPU, {dt:.3f} s wall")
    return cpu, wall, first


def with_session(enc: Any, directory: Path) -> Any:
    """``enc`` (an OnnxTextEncoder) running the graph in ``directory`` (same token table,
    tokenizer and meta), one thread, ``ORT_ENABLE_ALL``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    enc.graph._session = ort.InferenceSession(
        str(directory / "graph.onnx"), so, providers=["CPUExecutionProvider"]
    )
    return enc


def top_k(
    q: np.ndarray, p: np.ndarray, texts: Sequence[str], answers: Sequence[list[str]]
) -> dict[str, float]:
    """Passage top@1/5/20 (a hit: a passage holding an answer string, as DPR judges)."""
    order = np.argsort(-(q @ p.T), axis=1, kind="stable")[:, :20]
    hit_at = np.full(len(q), 99)
    for i, (rows, ans) in enumerate(zip(order, answers, strict=True)):
        for rank, row in enumerate(rows):
            if any(a in texts[row] for a in ans):
                hit_at[i] = rank
                break
    return {f"top@{k}": round(float(np.mean(hit_at < k)), 4) for k in (1, 5, 20)}


def fresh_search(index: Path, runtime: str, runs: int, core: int) -> dict[str, Any]:
    cmd = [*anygrain_command(), "search", str(index), QUESTION, "-k", "5", "--threads", "1"]
    cmd += ["--runtime", runtime]
    run_once(cmd, core)  # warm-up: exports and caches the graph on the first onnx run
    walls, cpus = zip(*(run_once(cmd, core) for _ in range(runs)), strict=True)
    return {
        "command": " ".join(cmd),
        "median_wall_s": round(statistics.median(walls), 3),
        "median_cpu_s": round(statistics.median(cpus), 3),
        "runs_wall_s": [round(w, 3) for w in walls],
        **imported_heavy(cmd, core),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True, help="a dense index over SQuAD dev")
    ap.add_argument("--squad", type=Path, default=DEFAULT_SQUAD)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--passages", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64, help="the build's default")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5, help="fresh-process searches per runtime")
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--quality", action="store_true", help="top@k over all SQuAD dev questions")
    args = ap.parse_args(argv)

    import torch

    from anygrain.dense.index import DenseIndex
    from anygrain.dense.onnx import OnnxBiEncoder
    from anygrain.index.base import Index
    from anygrain.utils.precision import native_bf16

    torch.set_num_threads(1)
    t = time.perf_counter()
    idx = Index.load(args.index, runtime="onnx")
    open_s = time.perf_counter() - t
    assert isinstance(idx, DenseIndex) and isinstance(idx.questions, OnnxBiEncoder)
    runner = idx.questions
    model = idx.model  # torch, loaded here for the baseline
    name = str(idx.settings["model"].get("name", ""))
    qa = squad_questions(args.squad)
    questions = [q for q, _ in qa[: args.questions]]
    texts, titles = paragraphs(args.squad, args.passages)
    bs = args.batch_size

    # --- questions, one per call --------------------------------------------------------
    for q in questions[:5]:  # warm-up
        model.encode_questions([q]), runner.encode_questions([q])
    qcpu, qwall, qout = best_of(
        args.rounds,
        {
            "torch_fp32": lambda: np.concatenate([model.encode_questions([q]) for q in questions]),
            "onnx_fp32": lambda: np.concatenate([runner.encode_questions([q]) for q in questions]),
        },
    )
    n_q = len(questions)
    question_part = {
        name: {
            "ms_per_question_cpu": round(1000 * qcpu[name] / n_q, 3),
            "ms_per_question_wall": round(1000 * qwall[name] / n_q, 3),
            "speedup_vs_torch_fp32": round(qcpu["torch_fp32"] / qcpu[name], 3),
        }
        for name in qcpu
    }
    q_diff = float(np.abs(qout["torch_fp32"] - qout["onnx_fp32"]).max())

    # --- passage batches --------------------------------------------------------------
    tmp = Path(tempfile.mkdtemp(prefix="dense-runtime-"))
    base = runner.passage.graph.directory
    from anygrain.dense.onnx import OnnxTextEncoder
    from anygrain.encode.onnx_runtime import OnnxGraph

    quant = with_session(
        OnnxTextEncoder(OnnxGraph(base, tokenize=False), runner.passage.config, side="passage"),
        variant(base, tmp, "int8", int8),
    )
    pruns: dict[str, Callable[[list[str], list[str]], np.ndarray]] = {
        "torch_fp32": lambda x, y: model.encode_passages(x, y, batch_size=bs),
        "torch_bf16": lambda x, y: model.encode_passages(x, y, batch_size=bs, bf16=True),
        "onnx_fp32": lambda x, y: runner.encode_passages(x, y, batch_size=bs),
        "onnx_int8": lambda x, y: quant.encode(x, y, batch_size=bs),
    }
    for run in pruns.values():
        run(texts[:8], titles[:8])  # warm-up
    pcpu, pwall, pout = best_of(
        args.rounds, {k: (lambda r=r: r(texts, titles)) for k, r in pruns.items()}
    )
    ref = pout["torch_fp32"]
    passage_part = {
        k: {
            "passages_per_s_cpu": round(len(texts) / pcpu[k], 2),
            "wall_s": round(pwall[k], 3),
            "speedup_vs_torch_fp32": round(pcpu["torch_fp32"] / pcpu[k], 3),
            "max_abs_diff_vs_torch_fp32": float(np.abs(pout[k] - ref).max()),
        }
        for k in pruns
    }

    # --- quality: what each passage runtime would change ----------------------------------
    quality: dict[str, Any] | None = None
    if args.quality:
        store = idx.corpus
        all_texts, all_titles = store.texts(), store.titles()
        log(f"quality: {len(qa)} questions, {len(all_texts)} passages")
        qv = runner.encode_questions([q for q, _ in qa], batch_size=32)
        answers = [a for _, a in qa]
        stored = idx.vectors.concatenate()
        quality = {"index_onnx_fp32": top_k(qv, stored, all_texts, answers)}
        for k in ("torch_fp32", "torch_bf16", "onnx_int8"):
            t0 = time.process_time()
            pv = pruns[k](all_texts, all_titles)
            quality[k] = {
                **top_k(qv, pv, all_texts, answers),
                "max_abs_diff_vs_index": float(np.abs(pv - stored).max()),
                "encode_cpu_s": round(time.process_time() - t0, 1),
            }
            log(f"quality {k}: {quality[k]}")

    # --- a fresh process: load + one search ---------------------------------------------
    search_part = {r: fresh_search(args.index, r, args.runs, args.core) for r in ("torch", "onnx")}
    search_part["speedup_wall"] = round(
        search_part["torch"]["median_wall_s"] / search_part["onnx"]["median_wall_s"], 3
    )
    return {
        "what": "dense bi-encoder on each runtime, one thread (bench/dense_runtime.py)",
        "model": name,
        "index": str(args.index),
        "open_onnx_in_process_s": round(open_s, 3),
        "questions": {"n": n_q, "one_per_call": True, **question_part},
        "question_max_abs_diff": q_diff,
        "passages": {"n": len(texts), "batch_size": bs, **passage_part},
        "quality": quality,
        "fresh_process_search": search_part,
        "rounds": args.rounds,
        "cpu": platform.processor() or platform.machine(),
        "native_bf16": bool(native_bf16()),
        "torch": torch.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
