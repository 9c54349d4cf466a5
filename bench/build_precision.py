"""Phrase builds by precision and runtime: CPU time, peak memory and index quality, as JSON.

Each variant builds the same corpus in a child process (one thread), then the index is
evaluated on a question set at the phrase grain (EM/F1) and the passage grain (top@1/5/20);
ratios are against the first variant, in the same run.  Variants (``--variants``, comma list):

- ``torch-fp32-avx2``: torch float32 with oneDNN capped at AVX2 (a CPU without bf16);
- ``torch-fp32``: torch float32, native kernels;
- ``torch-bf16``: torch bfloat16 (native where the CPU has it);
- ``onnx-fp32``: ONNX Runtime's float32 passage graph;
- ``onnx-int8``: its int8 sibling (``--int8``).

    python bench/build_precision.py --source squad:VAL.json --questions squad:VAL.json \
        --work runs/build_precision --variants torch-fp32-avx2,onnx-fp32,onnx-int8
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import log  # noqa: E402
from cold_start import cpu_name  # noqa: E402

VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "torch-fp32-avx2": (
        ["--runtime", "torch", "--no-bf16", "--no-int8"],
        {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    ),
    "torch-fp32": (["--runtime", "torch", "--no-bf16", "--no-int8"], {}),
    "torch-bf16": (["--runtime", "torch", "--bf16", "--no-int8"], {}),
    "onnx-fp32": (["--runtime", "onnx", "--no-bf16", "--no-int8"], {}),
    "onnx-int8": (["--runtime", "onnx", "--no-bf16", "--int8"], {}),
}


def run_child(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``; its wall and CPU seconds and its own peak RSS (KB, from wait4)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    out = p.stdout.read().decode() if p.stdout else ""
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_kb": usage.ru_maxrss,
        "stdout": out,
    }


def evaluate(index: Path, questions: str, unit: str, env: dict[str, str]) -> dict[str, float]:
    cmd = ["anygrain", "eval", str(index), "--questions", questions, "--unit", unit, "--json"]
    r = run_child(cmd, env)
    metrics = json.loads(r["stdout"])
    metrics = metrics.get("metrics", metrics)
    keep = ("em", "f1", "top@1", "top@5", "top@20")
    return {k: round(float(v), 4) for k, v in metrics.items() if k in keep}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--variants", default="torch-fp32-avx2,onnx-fp32,onnx-int8")
    ap.add_argument(
        "--time-only",
        default="",
        help="comma list of variants only timed, not evaluated (torch and ONNX Runtime float32 "
        "give the same vectors to ~1e-5)",
    )
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base_env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for name in args.variants.split(","):
        flags, extra = VARIANTS[name]
        env = {**base_env, **extra}
        out = work / name
        cmd = ["anygrain", "index", args.source, "--kind", "phrase", "--out", str(out)]
        build = run_child([*cmd, *flags, "--threads", "1", "-q"], env)
        summary = json.loads((out / "index.json").read_text()).get("timings", {})
        row: dict[str, Any] = {
            "variant": name,
            "encoding": summary.get("encoding"),
            "build_wall_s": build["wall_s"],
            "build_cpu_s": build["cpu_s"],
            "build_peak_rss_kb": build["peak_rss_kb"],
        }
        if name not in args.time_only.split(","):
            row["phrase"] = evaluate(out, args.questions, "phrase", base_env)
            row["passage"] = evaluate(out, args.questions, "passage", base_env)
        log(json.dumps(row))
        rows.append(row)
    first = rows[0]
    judged = [r for r in rows if "phrase" in r]
    for r in rows:
        r["cpu_speedup_vs_first"] = round(first["build_cpu_s"] / r["build_cpu_s"], 3)
        if "phrase" in r and r is not judged[0]:  # quality against the first evaluated
            r["phrase_em_vs_float"] = round(
                100 * (r["phrase"]["em"] - judged[0]["phrase"]["em"]), 2
            )
            r["top5_vs_float"] = round(r["passage"]["top@5"] - judged[0]["passage"]["top@5"], 4)
    print(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "cpu": cpu_name(),
                "max_rss_unit": "KB",
                "self_cpu_s": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime, 2),
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
