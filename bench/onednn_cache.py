"""What capping oneDNN's primitive cache costs the bf16 phrase dump (issue 35): passages per
CPU second and peak RSS of torch bf16 passage encoding with oneDNN's default cache (1,024
primitives) and with the cap a dump sets (``anygrain.utils.precision.cap_onednn_cache``).

oneDNN reads ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` once, when its cache is first used, so each
setting runs in a child process of its own, started with or without the variable; the
children run interleaved, ``--rounds`` each, one thread, and the best CPU time of each is
kept (other jobs on a shared core stretch the wall clock, not the CPU time).  Each child
encodes the first ``--n`` paragraphs of SQuAD v1.1 dev (title and text, as a build does)
with ``encode_passages(..., bf16=True)`` at the CPU build's batch, after a warm-up.
Prints one JSON object.

    OMP_NUM_THREADS=1 taskset -c 1 python3 bench/onednn_cache.py [--n 400] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_SQUAD = Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json"
VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child(squad: Path, n: int, model_name: str, batch_size: int) -> dict[str, Any]:
    """One timed bf16 encode in this process (the variable as the parent left it)."""
    import torch

    from anygrain.phrase.build import as_phrase_model

    torch.set_num_threads(1)
    data = json.loads(squad.read_text(encoding="utf-8"))["data"]
    pairs = [(p["context"], a["title"].replace("_", " ")) for a in data for p in a["paragraphs"]]
    texts, titles = [t for t, _ in pairs[:n]], [t for _, t in pairs[:n]]
    model = as_phrase_model(model_name)
    model.encode_passages(texts[:8], titles[:8], batch_size=batch_size, bf16=True)  # warm-up
    t, c = time.perf_counter(), time.process_time()
    model.encode_passages(texts, titles, batch_size=batch_size, bf16=True)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "capacity": os.environ.get(VARIABLE, "default"),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, default=DEFAULT_SQUAD)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--model", default="phrase-minilm")
    ap.add_argument("--batch-size", type=int, default=8, help="the CPU build's batch")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        out = child(args.squad, args.n, args.model, args.batch_size)
        print(json.dumps(out))
        return out

    from anygrain.utils.precision import DUMP_ONEDNN_CACHE

    base = {k: v for k, v in os.environ.items() if k != VARIABLE}
    settings = {"default_1024": base, f"capped_{DUMP_ONEDNN_CACHE}": {**base}}
    settings[f"capped_{DUMP_ONEDNN_CACHE}"][VARIABLE] = str(DUMP_ONEDNN_CACHE)
    cmd = [sys.executable, __file__, "--child", "--squad", str(args.squad), "--n", str(args.n)]
    cmd += ["--model", args.model, "--batch-size", str(args.batch_size)]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in settings}
    for r in range(args.rounds):
        for name, env in settings.items():
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            res = json.loads(done.stdout.splitlines()[-1])
            runs[name].append(res)
            log(f"round {r + 1} {name}: {res}")
    best = {k: min(v, key=lambda x: x["cpu_s"]) for k, v in runs.items()}
    ref = best["default_1024"]
    out = {
        "what": "torch bf16 phrase passage encoding, oneDNN primitive cache default vs capped",
        "n_paragraphs": args.n,
        "model": args.model,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "cpu": platform.processor() or platform.machine(),
        "settings": {
            k: {
                "passages_per_cpu_s": round(args.n / b["cpu_s"], 2),
                "vs_default": round(ref["cpu_s"] / b["cpu_s"], 3),
                "best_cpu_s": b["cpu_s"],
                "best_wall_s": min(x["wall_s"] for x in runs[k]),
                "peak_rss_kb": max(x["maxrss_kb"] for x in runs[k]),
            }
            for k, b in best.items()
        },
        "runs": runs,
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
