"""Start-up: the wall time of short ``anygrain`` commands, as a user at a shell runs them.

Each command runs ``--runs`` times as a fresh process pinned to one core (``--core``,
default the highest core this process may use: run it as ``taskset -c 1 python3 ...``),
after one discarded warm-up run (the page cache holds the libraries, as it does for anyone
who ran anygrain before); the median and the minimum wall time are reported, with the
median CPU time (user + system) of the child.  One more run with Python's import profiler
(``PYTHONPROFILEIMPORTTIME``) says whether the command imported torch or transformers.

Measured, beside the same-run baselines ``python -c pass`` (the interpreter) and
``python -c "import torch, transformers"`` (what each command paid before issue 35):

- ``anygrain --help`` (target: 0.3 s);
- ``anygrain search BM25_INDEX QUESTION`` (target: 0.8 s);
- ``anygrain search PHRASE_INDEX QUESTION --unit phrase`` when ``--phrase DIR`` is given
  (target: 1.5 s): questions encoded on ONNX Runtime (the default, ``--runtime auto``), and
  the same search with ``--runtime torch`` beside it.

``anygrain`` is the console script beside ``sys.executable`` (what ``pip install`` puts on
the PATH; a version manager's shim in front of it, pyenv's say, adds its own start-up), or
``python -m anygrain.cli`` where there is none.  Prints one JSON object.

    taskset -c 1 anygrain index ../shared/data/squad-v1.1/dev-v1.1.json --kind bm25 \\
        --out /tmp/sq-bm25 -q
    taskset -c 1 python3 bench/startup.py /tmp/sq-bm25 [--phrase DIR] [--runs 11]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"
HEAVY = ("torch", "transformers")
TARGETS_S = {"help": 0.3, "search_bm25": 0.8, "search_phrase": 1.5}


def anygrain_command() -> list[str]:
    """The console script beside this interpreter, else ``python -m anygrain.cli``."""
    script = Path(sys.executable).parent / "anygrain"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "anygrain.cli"]


def _pin(core: int) -> Callable[[], None]:
    def pin() -> None:
        os.sched_setaffinity(0, {core})

    return pin


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # the same rendering every run (rich sizes tables to the terminal); no colour codes
    env.update(COLUMNS="120", NO_COLOR="1", TERM="dumb")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.update(extra or {})
    return env


def run_once(cmd: Sequence[str], core: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run; fails loudly on an error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(
        list(cmd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_pin(core),
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def imported_modules(
    cmd: Sequence[str], core: int, extra: dict[str, str] | None = None
) -> set[str]:
    """The modules one run of ``cmd`` imported (Python's import profile), with ``extra``
    in its environment."""
    r = subprocess.run(
        list(cmd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env({**(extra or {}), "PYTHONPROFILEIMPORTTIME": "1"}),
        preexec_fn=_pin(core),
        check=False,
        text=True,
    )
    return {
        line.split("|")[-1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def imported_heavy(cmd: Sequence[str], core: int) -> dict[str, bool]:
    """Whether one run of ``cmd`` imported torch / transformers."""
    names = imported_modules(cmd, core)
    return {f"imports_{h}": h in names for h in HEAVY}


def measure(cmd: Sequence[str], runs: int, core: int, *, profile: bool = True) -> dict[str, object]:
    run_once(cmd, core)  # warm-up: discarded
    walls, cpus = zip(*(run_once(cmd, core) for _ in range(runs)), strict=True)
    out: dict[str, object] = {
        "command": " ".join(cmd),
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "runs_s": [round(w, 3) for w in walls],
    }
    if profile:
        out.update(imported_heavy(cmd, core))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bm25", type=Path, help="a BM25 index directory")
    ap.add_argument("--phrase", type=Path, default=None, help="a phrase index directory")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--runs", type=int, default=11, help="timed runs per command (median)")
    ap.add_argument(
        "--core",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core every run is pinned to (default: the highest this process may use)",
    )
    args = ap.parse_args(argv)
    for p in (args.bm25, args.phrase):
        if p is not None and not (p / "index.json").is_file():
            ap.error(f"{p}: not an anygrain index (no index.json)")

    ag = anygrain_command()
    py = [sys.executable]
    commands: dict[str, tuple[list[str], bool]] = {
        "python_bare": ([*py, "-c", "pass"], False),
        "import_torch_transformers": ([*py, "-c", "import torch, transformers"], False),
        "help": ([*ag, "--help"], True),
        "search_bm25": ([*ag, "search", str(args.bm25), args.question, "-k", "10"], True),
    }
    if args.phrase is not None:
        phrase = [*ag, "search", str(args.phrase), args.question, "--unit", "phrase", "-k", "10"]
        # the default (auto: ONNX Runtime, the graph exported by the warm-up run when it is
        # not cached yet), and the same search on torch, the same-run baseline
        commands["search_phrase"] = (phrase, True)
        commands["search_phrase_torch"] = ([*phrase, "--runtime", "torch"], True)
    results = {
        name: measure(cmd, args.runs, args.core, profile=profile)
        for name, (cmd, profile) in commands.items()
    }
    for name, target in TARGETS_S.items():
        if name in results:
            results[name]["target_s"] = target
            results[name]["meets_target"] = float(str(results[name]["median_s"])) <= target
    print(
        json.dumps(
            {
                "bench": "startup",
                "core": args.core,
                "runs": args.runs,
                "python": platform.python_version(),
                "cpu": platform.processor() or platform.machine(),
                "anygrain": " ".join(ag),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
