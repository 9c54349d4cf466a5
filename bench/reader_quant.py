"""The ONNX reader's graph variants on one CPU thread: float32 as exported today, fused
(ONNX Runtime's transformers optimizer), and int8 (dynamic; static QDQ calibrated on
TRAINING questions), measured on 128-token windows as the answer grain reads them.

* speed: ms per 128-token window at batch 1, 4 and 8, every variant timed in the same run,
  alternating (A B C ... A B C ...), ``--repeats`` rounds, the median; ratios against
  ``float32``;
* agreement: the share of held-out windows whose best span (the argmax the reader decodes)
  is float32's, and SQuAD EM/F1 of each variant's best span against the gold answers.

Windows: each question's gold paragraph cut to the 128-token window around its first gold
answer (``reader.features.focus_windows``, as the answer grain cuts one around the phrase
that found the passage).  Calibration questions come from ``--train`` (SQuAD train less the
held-out articles), measured ones from ``--questions`` (the held-out articles): never a
dev or test set.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/reader_quant.py \
        --train runs/split/train.json --questions runs/split/validation.json

Also measured: weight-only int8 in blocks (MatMulNBits; its quantizer needs ``pip install
onnx-ir``, skipped without it) and, for comparison, the torch reader in bfloat16 (the
reading of a CPU with native bf16).  Prints JSON.  Needs torch for the re-exported (fused)
graph and the bf16 row; ``--no-export`` skips both.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.encode.onnx_runtime import TOKEN_EMBEDS, GraphCache
from anygrain.eval.squad import exact_match, f1
from anygrain.reader.features import Window, collate_arrays, focus_windows
from anygrain.reader.onnx import OnnxReader, load_reader
from anygrain.reader.read import windows_of
from anygrain.reader.spans import best_spans_array

WINDOW = 128
HEADS = 12  # MiniLM-L6: checked against the reader's config when it is exported


def squad_examples(path: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` seeded questions of a SQuAD file with their gold paragraph and answers."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    rows = [
        {
            "question": qa["question"],
            "context": p["context"],
            "title": a.get("title", ""),
            "answers": [x["text"] for x in qa["answers"]],
            "span": (
                qa["answers"][0]["answer_start"],
                qa["answers"][0]["answer_start"] + len(qa["answers"][0]["text"]),
            ),
        }
        for a in data
        for p in a["paragraphs"]
        for qa in p["qas"]
        if qa.get("answers")
    ]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def focused(reader: OnnxReader, rows: list[dict[str, Any]]) -> list[Window]:
    """One window of at most WINDOW tokens per question, around its first gold answer."""
    ws = windows_of(
        reader,
        [r["question"] for r in rows],
        [r["context"] for r in rows],
        [r["title"] for r in rows],
    )
    return focus_windows(ws, [r["span"] for r in rows], WINDOW)


def feeds(reader: OnnxReader, windows: list[Window], width: int | None = None) -> dict[str, Any]:
    """The graph's inputs for ``windows`` (padded to ``width`` when given)."""
    b = collate_arrays(windows, reader.tokenizer.pad_token_id or 0)
    ids, mask = b.input_ids, b.attention_mask
    types = b.token_type_ids if b.token_type_ids is not None else np.zeros_like(ids)
    if width is not None and ids.shape[1] < width:
        pad = ((0, 0), (0, width - ids.shape[1]))
        ids, mask, types = (np.pad(a, pad) for a in (ids, mask, types))
    out = {
        TOKEN_EMBEDS: np.asarray(reader.graph.token_table[ids], dtype=np.float32),
        "attention_mask": mask,
        "token_type_ids": types,
    }
    return {n: out[n] for n in reader.inputs}


def session(path: Path, optimized: Path | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def eager_export(out: Path) -> Path | None:
    """The reader's graph exported with the plain (eager) attention, which ONNX Runtime's
    optimizer can fuse; None without torch."""
    try:
        from anygrain.encode.onnx_runtime import attention
        from anygrain.models.shipped import saved_model_dir
        from anygrain.reader.model import Reader
        from anygrain.reader.onnx import export_reader
    except ImportError:
        return None
    r = Reader.load(saved_model_dir("reader-minilm"))
    assert int(r.encoder.config.num_attention_heads) == HEADS
    with attention(r.encoder, "eager"):
        d = export_reader(r, GraphCache(out / "eager-cache"))
    return d / "graph.onnx"


def fuse(path: Path, out: Path) -> tuple[Path, dict[str, int]]:
    from onnxruntime.transformers.optimizer import optimize_model

    m = optimize_model(str(path), model_type="bert", num_heads=HEADS, hidden_size=384, opt_level=0)
    m.save_model_to_file(str(out))
    stats = {k: v for k, v in m.get_fused_operator_statistics().items() if v}
    return out, stats


class Calibration:
    """Calibration batches for ``quantize_static`` (onnxruntime's CalibrationDataReader)."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self.it = iter(batches)

    def get_next(self) -> dict[str, Any] | None:
        return next(self.it, None)


def quantise(f32: Path, out: Path, calib: list[dict[str, Any]], kind: str) -> Path:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    if kind == "dynamic":
        quantize_dynamic(
            str(f32), str(out), per_channel=True, weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
        )  # fmt: skip
        return out
    quantize_static(
        str(f32),
        str(out),
        Calibration(calib),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
    )
    return out


def blockwise(f32: Path, out: Path, block: int) -> Path | None:
    """Weight-only int8 in blocks of ``block`` (MatMulNBits, int8 activations: ONNX
    Runtime's accuracy level 4); None without ``onnx_ir``, which its quantizer needs."""
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except ImportError:
        return None
    q = MatMulNBitsQuantizer(
        str(f32), bits=8, block_size=block, is_symmetric=True, accuracy_level=4
    )
    q.process()
    q.model.save_model_to_file(str(out), False)
    return out


def bf16_spans(windows: list[Window], reader: OnnxReader) -> list[tuple[int, int]] | None:
    """The best spans the torch reader finds in bfloat16 (the native-bf16 path's reading),
    for comparison; None without torch."""
    try:
        from anygrain.models.shipped import saved_model_dir
        from anygrain.reader.model import Reader
    except ImportError:
        return None
    r = Reader.load(saved_model_dir("reader-minilm"))
    out: list[tuple[int, int]] = []
    with r.reading():
        for i in range(0, len(windows), 8):
            part = windows[i : i + 8]
            b = collate_arrays(part, reader.tokenizer.pad_token_id or 0)
            o = r.window_logits(b, bf16=True)
            st, en, _ = best_spans_array(
                o.start, o.end, b.start_ok, b.end_ok, reader.config.max_answer_length
            )
            for k, w in enumerate(part):
                a, e = int(st[k]), int(en[k])
                out.append((int(w.offsets[a, 0]), int(w.offsets[e, 1])) if a >= 0 else (-1, -1))
    return out


def time_variants(
    sessions: dict[str, Any], batches: list[dict[str, Any]], repeats: int
) -> dict[str, float]:
    """Median ms per window of each session over ``batches``, the sessions alternating."""
    per: dict[str, list[float]] = {n: [] for n in sessions}
    windows = sum(len(b["attention_mask"]) for b in batches)
    for s in sessions.values():
        s.run(None, batches[0])  # warm up
    for _ in range(repeats):
        for n, s in sessions.items():
            t = time.perf_counter()
            for b in batches:
                s.run(None, b)
            per[n].append((time.perf_counter() - t) * 1000 / windows)
    return {n: round(statistics.median(v), 2) for n, v in per.items()}


def spans(s: Any, reader: OnnxReader, windows: list[Window]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in range(0, len(windows), 8):
        part = windows[i : i + 8]
        b = collate_arrays(part, reader.tokenizer.pad_token_id or 0)
        start, end, _ = s.run(None, feeds(reader, part))
        st, en, _ = best_spans_array(
            start, end, b.start_ok, b.end_ok, reader.config.max_answer_length
        )
        for r, w in enumerate(part):
            a, e = int(st[r]), int(en[r])
            out.append((int(w.offsets[a, 0]), int(w.offsets[e, 1])) if a >= 0 else (-1, -1))
    return out


def cpu_name() -> dict[str, Any]:
    model = platform.processor()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    keep = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
    return {"model": model, "flags": [f for f in keep if f in flags]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=Path, default=Path("runs/split/train.json"))
    ap.add_argument("--questions", type=Path, default=Path("runs/split/validation.json"))
    ap.add_argument("--calibrate", type=int, default=200, help="training questions")
    ap.add_argument("--limit", type=int, default=300, help="held-out questions")
    ap.add_argument("--timed", type=int, default=24, help="windows timed per batch size")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-export", action="store_true", help="skip what needs torch")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()

    reader = load_reader("reader-minilm", "onnx")
    assert isinstance(reader, OnnxReader)
    with tempfile.TemporaryDirectory(prefix="reader-quant-") as d:
        report = measure(args, reader, Path(d))
    json.dump(report, sys.stdout, indent=2)
    print()


def measure(args: argparse.Namespace, reader: OnnxReader, tmp: Path) -> dict[str, Any]:
    """Every variant's graph made under ``tmp``, timed and read."""
    f32 = reader.graph.directory / "graph.onnx"
    calib_w = focused(reader, squad_examples(args.train, args.calibrate, args.seed))
    calib = [feeds(reader, calib_w[i : i + 8]) for i in range(0, len(calib_w), 8)]
    rows = squad_examples(args.questions, args.limit, args.seed)
    held = focused(reader, rows)

    graphs: dict[str, Path] = {"float32": f32}
    info: dict[str, Any] = {}
    t = time.perf_counter()
    session(f32, tmp / "f32-ort-all.onnx")
    info["ort_all_saved_s"] = round(time.perf_counter() - t, 2)
    graphs["float32-ort-all-saved"] = tmp / "f32-ort-all.onnx"
    graphs["fused-as-exported"], info["fused_as_exported"] = fuse(f32, tmp / "f32-fused.onnx")
    eager = None if args.no_export else eager_export(tmp)
    if eager is not None:
        graphs["eager"] = eager
        graphs["eager-fused"], info["fused_eager"] = fuse(eager, tmp / "eager-fused.onnx")
    graphs["int8-dynamic"] = quantise(f32, tmp / "dyn.onnx", calib, "dynamic")
    t = time.perf_counter()
    graphs["int8-qdq"] = quantise(f32, tmp / "qdq.onnx", calib, "static")
    info["qdq_calibration_s"] = round(time.perf_counter() - t, 1)
    for block in (32, 128):
        got = blockwise(f32, tmp / f"block{block}.onnx", block)
        if got is not None:
            graphs[f"int8-blockwise-{block}"] = got
    sessions = {n: session(p) for n, p in graphs.items()}

    speed: dict[str, Any] = {}
    for bs in (1, 4, 8):
        timed = held[: args.timed]
        batches = [feeds(reader, timed[i : i + bs], WINDOW) for i in range(0, len(timed), bs)]
        ms = time_variants(sessions, batches, args.repeats)
        speed[f"batch{bs}"] = {
            "ms_per_window": ms,
            "speedup": {n: round(ms["float32"] / v, 3) for n, v in ms.items()},
        }
    base = spans(sessions["float32"], reader, held)
    found = {n: base if n == "float32" else spans(s, reader, held) for n, s in sessions.items()}
    torch_bf16 = None if args.no_export else bf16_spans(held, reader)
    if torch_bf16 is not None:
        found["torch-bfloat16"] = torch_bf16
    quality: dict[str, Any] = {}
    for n, got in found.items():
        texts = [r["context"][a:e] if a >= 0 else "" for r, (a, e) in zip(rows, got, strict=True)]
        quality[n] = {
            "argmax_agreement": round(float(np.mean([g == b for g, b in zip(got, base, strict=True)])), 4),
            "em": round(100 * float(np.mean([exact_match(x, r["answers"]) for x, r in zip(texts, rows, strict=True)])), 2),
            "f1": round(100 * float(np.mean([f1(x, r["answers"]) for x, r in zip(texts, rows, strict=True)])), 2),
        }  # fmt: skip
    return {
        "cpu": cpu_name(),
        "window": WINDOW,
        "threads": 1,
        "calibration_questions": len(calib_w),
        "held_out_questions": len(held),
        "graph_mb": {n: round(p.stat().st_size / 1e6, 1) for n, p in graphs.items()},
        "info": info,
        "speed": speed,
        "quality": quality,
    }


if __name__ == "__main__":
    main()
