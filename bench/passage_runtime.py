"""Passage encoding for the phrase dump on each runtime, in one process on one core (issue 35,
passage side).

Encodes the first ``--n`` paragraphs of SQuAD v1.1 dev (title and text, as a build does)
with the phrase model (``phrase-minilm`` unless ``--model``) through ``encode_passages``,
what the dump calls per shard (windows cut by the tokenizer, batched longest first so a
batch holds little padding, each token's vectors from the window giving it most context),
on:

- ``torch_fp32`` (the baseline) and ``torch_bf16`` (autocast; native on this CPU);
- ``onnx_basic``: the exported passage graph, float32, ONNX Runtime's basic graph
  optimisations (constant folding, redundant nodes);
- ``onnx_all``: the same graph with ``ORT_ENABLE_ALL`` (what ``OnnxGraph`` opens);
- ``onnx_fused``: the graph through ``onnxruntime.transformers.optimizer`` (BERT's
  attention, LayerNorm and GELU fused), ``ORT_ENABLE_ALL``;
- ``onnx_int8``: ``onnxruntime.quantization.quantize_dynamic`` of the graph, int8
  weights per channel, activations quantised on the fly.

For each: passages per CPU second of this process (the best of ``--rounds`` runs,
interleaved; CPU time, not wall time, since other jobs on a shared core stretch the wall
clock, and one thread each makes them the same on an idle core; the best wall time is
given beside), the ratio to torch fp32 in the same run, the largest absolute
difference of the start/end vectors and filter logits from torch fp32 on the same
passages, and how many kept-token decisions (start or end flag after the model's filter
threshold, or the default keep fraction's tau found from torch fp32's logits when the
model records none) differ.  Prints one JSON object.

    OMP_NUM_THREADS=1 taskset -c 1 python3 bench/passage_runtime.py \\
        [--squad ../shared/data/squad-v1.1/dev-v1.1.json] [--n 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_SQUAD = Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def paragraphs(path: Path, n: int) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    texts, titles = [], []
    for art in data:
        for p in art["paragraphs"]:
            texts.append(p["context"])
            titles.append(art["title"].replace("_", " "))
    return texts[:n], titles[:n]


def variant(base: Path, root: Path, name: str, graph: Callable[[Path, Path], None]) -> Path:
    """A copy of the graph directory ``base`` whose graph.onnx is ``graph(src, dst)``'s; the
    token table and tokenizer linked, not copied."""
    d = root / name
    d.mkdir()
    for f in base.iterdir():
        if f.name != "graph.onnx":
            (d / f.name).symlink_to(f)
    graph(base / "graph.onnx", d / "graph.onnx")
    return d


def fused(src: Path, dst: Path, *, heads: int, hidden: int) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    m = optimize_model(
        str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0
    )
    log(f"fusion: {m.get_fused_operator_statistics()}")
    m.save_model_to_file(str(dst))


def int8(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=QuantType.QInt8)


def with_level(enc: Any, level: str) -> Any:
    """``enc`` (an OnnxPassageEncoder) with its session opened at graph optimisation
    ``level``, one intra-op thread."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    so.log_severity_level = 3
    enc.graph._session = ort.InferenceSession(
        str(enc.directory / "graph.onnx"), so, providers=["CPUExecutionProvider"]
    )
    return enc


def flat(enc: Sequence[Any]) -> dict[str, np.ndarray]:
    return {
        "start": np.concatenate([p.start for p in enc]),
        "end": np.concatenate([p.end for p in enc]),
        "filter": np.concatenate([p.filter_logits for p in enc]),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, default=DEFAULT_SQUAD)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--model", default="phrase-minilm")
    ap.add_argument("--batch-size", type=int, default=8, help="the CPU build's batch")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", nargs="*", help="settings to run (default: all)")
    args = ap.parse_args(argv)

    import torch

    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.phrase.build import DEFAULT_KEEP, as_phrase_model
    from anygrain.phrase.dump import END_OK, START_OK, keep_flags
    from anygrain.phrase.filtering import fraction_threshold
    from anygrain.phrase.onnx import OnnxPassageEncoder, export_passages

    torch.set_num_threads(1)
    texts, titles = paragraphs(args.squad, args.n)
    model = as_phrase_model(args.model)
    tau = model.config.filter_threshold
    n_windows = len(model.windows(texts, titles))
    tmp = Path(tempfile.mkdtemp(prefix="passage-runtime-"))
    try:
        t = time.perf_counter()
        base = export_passages(model, GraphCache(tmp / "cache"))
        export_s = time.perf_counter() - t
        cfg = model.phrase.config  # type: ignore[union-attr]
        heads, hidden = int(cfg.num_attention_heads), int(cfg.hidden_size)
        root = tmp / "variants"
        root.mkdir()
        bs = args.batch_size

        Run = Callable[[list[str], list[str]], Any]

        def onnx(directory: Path, level: str) -> Run:
            enc = with_level(OnnxPassageEncoder(directory), level)
            return lambda x, y: enc.encode_passages(x, y, batch_size=bs)

        settings: dict[str, Run] = {
            "torch_fp32": lambda x, y: model.encode_passages(x, y, batch_size=bs),
            "torch_bf16": lambda x, y: model.encode_passages(x, y, batch_size=bs, bf16=True),
            "onnx_basic": onnx(base, "ORT_ENABLE_BASIC"),
            "onnx_all": onnx(base, "ORT_ENABLE_ALL"),
        }
        try:
            d = variant(base, root, "fused", lambda s, o: fused(s, o, heads=heads, hidden=hidden))
            settings["onnx_fused"] = onnx(d, "ORT_ENABLE_ALL")
        except Exception as e:  # the optimizer may not know this export's patterns
            log(f"fusion failed: {type(e).__name__}: {e}")
        settings["onnx_int8"] = onnx(variant(base, root, "int8", int8), "ORT_ENABLE_ALL")
        if args.only:
            settings = {k: v for k, v in settings.items() if k in args.only or k == "torch_fp32"}

        # warm-up (first-call allocations), then the rounds, interleaved
        for run in settings.values():
            run(texts[:8], titles[:8])
        best: dict[str, float] = {}  # CPU seconds: what a shared core's other jobs leave alone
        wall: dict[str, float] = {}
        outputs: dict[str, dict[str, np.ndarray]] = {}
        flags: dict[str, np.ndarray] = {}
        for r in range(args.rounds):
            for name, run in settings.items():
                t, c = time.perf_counter(), time.process_time()
                enc = run(texts, titles)
                dt, dc = time.perf_counter() - t, time.process_time() - c
                best[name] = min(best.get(name, float("inf")), dc)
                wall[name] = min(wall.get(name, float("inf")), dt)
                log(f"round {r + 1} {name}: {dc:.2f} s CPU, {dt:.2f} s wall")
                if name not in outputs:
                    outputs[name] = flat(enc)
                    flags[name] = np.concatenate([keep_flags(p, tau) for p in enc])
                del enc
        ref, ref_flags = outputs["torch_fp32"], flags["torch_fp32"]
        if tau is None:
            # the default build keeps a fraction (DEFAULT_KEEP): its tau, from torch fp32's logits
            tau = fraction_threshold(ref_flags, ref["filter"], DEFAULT_KEEP)
            for name in settings:
                o, allowed = outputs[name], flags[name]
                keep_s = ((allowed & START_OK) > 0) & (o["filter"][:, 0] >= tau)
                keep_e = ((allowed & END_OK) > 0) & (o["filter"][:, 1] >= tau)
                flags[name] = keep_s * START_OK + keep_e * END_OK
            ref_flags = flags["torch_fp32"]
        out: dict[str, Any] = {}
        for name in settings:
            o = outputs[name]
            out[name] = {
                "cpu_seconds": round(best[name], 3),
                "wall_seconds": round(wall[name], 3),
                "passages_per_s": round(len(texts) / best[name], 2),
                "ratio_to_torch_fp32": round(best["torch_fp32"] / best[name], 3),
                "max_abs_diff_start_end": float(
                    max(
                        np.abs(o["start"] - ref["start"]).max(), np.abs(o["end"] - ref["end"]).max()
                    )
                ),
                "max_abs_diff_filter": float(np.abs(o["filter"] - ref["filter"]).max()),
                "kept_flags_differing": int(np.count_nonzero(flags[name] != ref_flags)),
            }
        return {
            "what": "phrase dump passage encoding, one thread (bench/passage_runtime.py)",
            "model": args.model,
            "passages": len(texts),
            "windows": n_windows,
            "tokens": int(len(ref_flags)),
            "batch_size": bs,
            "filter_threshold": tau,
            "rounds": args.rounds,
            "export_seconds": round(export_s, 2),
            "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "onnxruntime": __import__("onnxruntime").__version__,
            "settings": out,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
