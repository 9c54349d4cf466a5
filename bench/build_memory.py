"""Peak memory of a phrase-index build, at several corpus sizes, with a memory trace.

Each build runs in its own process; this one samples the child's ``/proc/PID/status``
(resident memory: all, anonymous, file-backed) every ``--interval`` seconds and takes the
peak from the kernel (``wait4``'s ``ru_maxrss``), so the figure is the build's alone.  The
corpus is real English text, one document per paragraph, in this order, cut at ``N``:
SQuAD v1.1 dev (2,067), the three SQuAD-Shifts sets (5,666), SQuAD v1.1 train (18,896),
read in place from ../shared/data.  ``--corpus zh`` builds over Chinese text instead:
CMRC 2018 dev (848 paragraphs), XQuAD zh (240), DRCD dev (1,524, Traditional), with the
default Chinese phrase model (``phrase-me5-zh``: 12 layers, a 250k-token vocabulary).  With ``--search Q`` the largest index is then loaded
in a fresh process and searched with the first Q SQuAD dev questions (batch, one process):
questions per second on an index of that many vectors.

    python bench/build_memory.py --work runs/mem --sizes 10000,20000 [--budget 1.5G] \
        [--search 2000] [--threads 1]
    python bench/build_memory.py --corpus zh --work runs/mem-zh --sizes 1088

Prints one JSON object; builds are kept under ``--work`` (a rerun re-measures them only
with ``--rebuild``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.corpus.records import SourceDocument

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD_DEV = SHARED / "squad-v1.1" / "dev-v1.1.json"
#: the corpus, in this order: one document per paragraph (SQuAD-format JSON files)
SOURCES = [
    SQUAD_DEV,
    *(SHARED / "squadshifts" / f"{n}_v1.0.json" for n in ("new_wiki", "amazon_reviews", "reddit")),
    SHARED / "squad-v1.1" / "train-v1.1.json",
]
#: the Chinese corpus, in this order (SQuAD-format JSON files)
SOURCES_ZH = [
    SHARED / "cmrc2018" / "cmrc2018_dev.json",
    SHARED / "xquad" / "xquad.zh.json",
    SHARED / "drcd" / "DRCD_dev.json",
]
CORPORA = {"en": SOURCES, "zh": SOURCES_ZH}
DEFAULT_MODELS = {"en": "phrase-minilm", "zh": "phrase-me5-zh"}


def paragraphs(limit: int, corpus: str = "en") -> Iterator[SourceDocument]:
    """The first ``limit`` paragraphs of ``corpus``'s sources, each a document (ids unique
    across files)."""
    n = 0
    for f, path in enumerate(CORPORA[corpus]):
        for a, article in enumerate(json.loads(path.read_text())["data"]):
            for p, para in enumerate(article["paragraphs"]):
                if n >= limit:
                    return
                yield SourceDocument(f"{f}-{a}-{p}", article.get("title", ""), para["context"])
                n += 1


def _status(pid: int) -> dict[str, int] | None:
    """Resident set of ``pid`` in KiB: VmRSS, RssAnon, RssFile (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(rest.split()[0])
    return out


def run_traced(cmd: list[str], interval: float, max_points: int = 300) -> dict[str, Any]:
    """Run ``cmd``; its exit status, wall time, peak RSS and a sampled memory trace."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    trace: list[list[float]] = []

    def sample() -> None:
        while proc.poll() is None:
            s = _status(proc.pid)
            if s:
                trace.append(
                    [
                        round(time.perf_counter() - t0, 2),
                        round(s.get("VmRSS", 0) / 1024, 1),
                        round(s.get("RssAnon", 0) / 1024, 1),
                        round(s.get("RssFile", 0) / 1024, 1),
                    ]
                )
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = proc.stdout.read() if proc.stdout else ""
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])}...: exit {proc.returncode}")
    wall = time.perf_counter() - t0
    # keep the trace small: at most ~max_points points, always including the peak
    step = max(1, len(trace) // max_points)
    peak_i = max(range(len(trace)), key=lambda i: trace[i][1]) if trace else 0
    thin = [p for i, p in enumerate(trace) if i % step == 0 or i == peak_i]
    return {
        "wall_seconds": round(wall, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # the kernel's high-water mark
        "peak_sampled": {
            "rss_mb": max((p[1] for p in trace), default=0),
            "anon_mb": max((p[2] for p in trace), default=0),
            "file_mb": max((p[3] for p in trace), default=0),
        },
        "trace_columns": ["seconds", "rss_mb", "anon_mb", "file_mb"],
        "trace": thin,
        "child": json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None,
    }


def child_build(
    out: str, size: int, threads: int, budget: str | None, model: str, corpus: str
) -> None:
    from anygrain.phrase import PhraseIndex
    from anygrain.utils.threads import set_threads

    set_threads(threads)
    docs = paragraphs(size, corpus)
    options: dict[str, Any] = {"model": model}
    if budget:
        options["memory_budget"] = budget
    idx = PhraseIndex.build_from(docs, Path(out), progress=False, overwrite=True, **options)
    m = idx.manifest
    print(
        json.dumps(
            {
                "settings": {k: m["settings"].get(k) for k in ("factory", "compress", "keep")},
                "counts": m["counts"],
                "timings": m["timings"],
            }
        )
    )


def child_search(index: str, limit: int, threads: int) -> None:
    from anygrain import Index, load_questions
    from anygrain.utils.threads import set_threads

    set_threads(threads)
    idx = Index.load(index)
    qs = load_questions(f"squad:{SQUAD_DEV}", limit=limit)
    texts = [q.text for q in qs]
    idx.search(texts[:32], k=10)  # warm: the model and the FAISS indexes paged in
    t0 = time.perf_counter()
    idx.search(texts, k=10)
    secs = time.perf_counter() - t0
    c = idx.manifest["counts"]
    print(
        json.dumps(
            {
                "questions": len(texts),
                "seconds": round(secs, 2),
                "questions_per_second": round(len(texts) / secs, 1),
                "start_vectors": c["start_vectors"],
                "end_vectors": c["end_vectors"],
                "factory": idx.manifest["settings"]["factory"],
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--sizes", default="10000,20000", help="paragraphs per build, comma-separated")
    ap.add_argument("--budget", default=None, help="memory budget of the build (e.g. 1.5G)")
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="en")
    ap.add_argument("--model", default=None, help="default: the corpus language's shipped one")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--search", type=int, default=0, help="SQuAD dev questions to search")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--max-points", type=int, default=300, help="trace points kept per build")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.model = args.model or DEFAULT_MODELS[args.corpus]
    if args.child:
        what, *rest = args.child
        if what == "build":
            child_build(rest[0], int(rest[1]), args.threads, args.budget, args.model, args.corpus)
        else:
            child_search(rest[0], int(rest[1]), args.threads)
        return
    for s in CORPORA[args.corpus]:
        if not s.exists():
            sys.exit(f"{s}: not found (expected under ../shared/data)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, "--work", str(work), "--threads", str(args.threads)]
    me += ["--model", args.model, "--corpus", args.corpus]
    if args.budget:
        me += ["--budget", args.budget]
    builds = []
    out_dir = None
    for size in [int(x) for x in args.sizes.split(",") if x]:
        out_dir = work / f"phrase-{size}"
        record = work / f"phrase-{size}.json"
        if record.exists() and not args.rebuild:
            builds.append(json.loads(record.read_text()))
            continue
        shutil.rmtree(out_dir, ignore_errors=True)
        cmd = [*me, "--child", "build", str(out_dir), str(size)]
        res = run_traced(cmd, args.interval, args.max_points)
        res = {"documents": size, **res}
        record.write_text(json.dumps(res))
        builds.append(res)
    result: dict[str, Any] = {
        "threads": args.threads,
        "corpus": args.corpus,
        "budget": args.budget,
        "model": args.model,
        "builds": builds,
    }
    if args.search and out_dir is not None:
        res = run_traced([*me, "--child", "search", str(out_dir), str(args.search)], 1.0)
        result["search"] = {
            "index": str(out_dir),
            **res["child"],
            "peak_rss_mb": res["peak_rss_mb"],
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
