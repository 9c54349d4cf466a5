"""Cold start: what a user at a shell waits for the first answer, in the current install.

Builds (once) a small phrase index under ``--dir`` (default ``/tmp/anygrain-cold-start``:
three short documents, the shipped ``phrase-minilm``, its sparse part included), then runs
each command ``--runs`` times as a fresh process pinned to one core, after one discarded
warm-up run (the page cache holds the libraries and the graph cache its graphs, as for
anyone who ran anygrain before):

- ``anygrain --help`` (target 0.3 s);
- ``anygrain search IDX Q`` (the phrase grain; target 1.5 s);
- ``anygrain search IDX Q --unit answer`` (the shipped ``reader-minilm`` reading the top
  passages; target 1.5 s);

each as the CPU presents itself and again with ``ONEDNN_MAX_CPU_ISA=AVX2``, which takes
oneDNN's bfloat16 kernels away as a CPU without native bfloat16 would: there ``auto`` reads
on ONNX Runtime, and torch should not even be imported.  Reported per command: the median
and minimum wall time, the median CPU time of the child (user + system: on a shared core
the wall time also counts other processes' turns), and whether one more run, with Python's
import profiler, imported torch, transformers or faiss.  Prints one JSON object.

    OMP_NUM_THREADS=1 taskset -c 1 python3 bench/cold_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from startup import _env, _pin, anygrain_command, imported_modules, run_once  # noqa: E402

QUESTION = "Who created Python?"
TARGETS_S = {"help": 0.3, "search_phrase": 1.5, "search_answer": 1.5}
HEAVY = ("torch", "transformers", "faiss")
CORPUS = """\
Alpha Centauri is the closest star system to the Solar System. It is 4.37 light-years away. \
The system contains three stars. Proxima Centauri is the smallest of them.

Python was created by Guido van Rossum and first released in 1991. Python uses indentation \
to delimit blocks. Its design emphasises readability.

The Great Wall of China was built over many centuries to protect against raids. It stretches \
for thousands of kilometres across northern China.
"""
#: oneDNN without AVX-512: no native bfloat16 kernels
NO_BF16 = {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def cpu_name() -> str:
    """The CPU's model name as ``lscpu`` gives it (else /proc/cpuinfo's, else the platform's)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.lower().startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def build_index(directory: Path, core: int) -> Path:
    """The phrase index under ``directory``, built when it is not there yet."""
    index = directory / "phrase"
    if (index / "index.json").is_file():
        return index
    directory.mkdir(parents=True, exist_ok=True)
    corpus = directory / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    cmd = [*anygrain_command(), "index", str(corpus), "--kind", "phrase", "--out", str(index)]
    # its summary line goes to stderr: stdout is the JSON report's
    subprocess.run([*cmd, "-q"], check=True, env=_env(), preexec_fn=_pin(core), stdout=sys.stderr)
    return index


def imported(cmd: Sequence[str], core: int, extra: dict[str, str]) -> dict[str, bool]:
    """Which of :data:`HEAVY` one run of ``cmd`` imported (Python's import profile)."""
    names = imported_modules(cmd, core, extra)
    return {h: h in names for h in HEAVY}


def measure(cmd: Sequence[str], runs: int, core: int, extra: dict[str, str]) -> dict[str, object]:
    saved = dict(os.environ)
    os.environ.update(extra)  # startup._env copies this process's environment
    try:
        run_once(cmd, core)  # warm-up: discarded
        walls, cpus = zip(*(run_once(cmd, core) for _ in range(runs)), strict=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "runs_s": [round(w, 3) for w in walls],
        "imported": imported(cmd, core, extra),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/anygrain-cold-start"))
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (median)")
    ap.add_argument(
        "--core",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core every run is pinned to (default: the highest this process may use)",
    )
    args = ap.parse_args(argv)
    index = build_index(args.dir, args.core)
    ag = anygrain_command()
    search = [*ag, "search", str(index), QUESTION, "-k", "5"]
    commands = {
        "help": [*ag, "--help"],
        "search_phrase": search,
        "search_answer": [*search, "--unit", "answer"],
    }
    results: dict[str, dict[str, object]] = {}
    for label, extra in (("default", {}), ("avx2", NO_BF16)):
        for name, cmd in commands.items():
            r = measure(cmd, args.runs, args.core, extra)
            r["target_s"] = TARGETS_S[name]
            r["meets_target"] = float(str(r["median_s"])) <= TARGETS_S[name]
            results[f"{name}_{label}"] = r
    probe = "from anygrain.utils.precision import native_bf16; print(native_bf16())"
    native = {
        label: subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=_env(extra)
        ).stdout.strip()
        for label, extra in (("default", {}), ("avx2", NO_BF16))
    }
    print(
        json.dumps(
            {
                "bench": "cold_start",
                "cpu": cpu_name(),
                "native_bf16": native,
                "core": args.core,
                "runs": args.runs,
                "python": platform.python_version(),
                "anygrain": " ".join(ag),
                "index": str(index),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
