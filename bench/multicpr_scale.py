"""Scale check for Multi-CPR-sized corpora: corpus store build and BM25 indexing, streamed.

Writes a synthetic Chinese-like ``pid<TAB>text`` corpus (Multi-CPR's ``corpus.tsv``
layout: short product/video/medical-style lines of Zipf-distributed 1-4 character
words) into a temporary directory, then runs each phase in its own process so each
peak RSS is its own:

* ``store``: ``CorpusStore.build("multicpr:corpus.tsv")`` (read, split, Arrow write, id table)
* ``bm25``: ``write_bm25_index`` on that store (jieba analysis, score matrix, save)

and prints one JSON object: per phase seconds, passages/s and peak RSS (MiB, from
``resource.getrusage``), the RSS of a process that has only imported the modules
(``baseline_rss_mib``), and the corpus size.  A phase that held the corpus in Python
objects would grow with ``--passages``; streamed, the store stays near the baseline
and BM25 grows only with its arrays (8-12 bytes per distinct (passage, term) pair).

    python bench/multicpr_scale.py [--passages 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _rss_mib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(path: Path, n: int, seed: int = 0, vocab: int = 50_000) -> int:
    """``n`` lines ``pid<TAB>text``; returns the file size in bytes."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 5, size=vocab)
    chars = rng.integers(0x4E00, 0x4E00 + 6000, size=int(lengths.sum()))
    words, pos = [], 0
    for ln in lengths.tolist():
        words.append("".join(map(chr, chars[pos : pos + ln].tolist())))
        pos += ln
    chunk = 50_000
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            counts = rng.integers(6, 25, size=m)
            ids = (rng.zipf(1.3, size=int(counts.sum())) - 1) % vocab
            lines, k = [], 0
            for i, c in enumerate(counts.tolist()):
                text = "".join(words[w] for w in ids[k : k + c].tolist())
                lines.append(f"{start + i + 1}\t{text}\n")
                k += c
            f.write("".join(lines))
    return path.stat().st_size


def phase(name: str, work: Path) -> dict[str, object]:
    from anygrain.corpus.store import CorpusStore
    from anygrain.sparse.bm25 import Bm25Settings, write_bm25_index

    base = _rss_mib()
    t0 = time.perf_counter()
    if name == "store":
        store = CorpusStore.build(
            f"multicpr:{work / 'corpus.tsv'}", work / "corpus", progress=False
        )
        extra: dict[str, object] = {}
    elif name == "bm25":
        store = CorpusStore(work / "corpus")
        (work / "bm25").mkdir(exist_ok=True)
        settings = write_bm25_index(work / "bm25", store, Bm25Settings(lang="zh"), progress=False)
        extra = {"lang": settings["bm25"]["lang"]}
        data = np.load(work / "bm25" / "bm25" / "data.csc.index.npy", mmap_mode="r")
        extra["nnz"] = int(data.shape[0])
        vocab = json.loads((work / "bm25" / "bm25" / "vocab.index.json").read_text("utf-8"))
        extra["vocab"] = len(vocab)
    else:
        raise SystemExit(f"unknown phase {name}")
    seconds = time.perf_counter() - t0
    n = len(store)
    return {
        "passages": n,
        "seconds": round(seconds, 2),
        "passages_per_second": round(n / seconds, 1),
        "peak_rss_mib": round(_rss_mib(), 1),
        "rss_before_mib": round(base, 1),
        **extra,
    }


def _child(name: str, work: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--work", str(work)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _baseline() -> float:
    code = (
        "import resource, anygrain.corpus.store, anygrain.sparse.bm25, anygrain.corpus.readers;"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return round(float(out.stdout.strip()), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="work here and keep the files")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.work)))
        return
    with tempfile.TemporaryDirectory(prefix="multicpr-scale-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        size = generate(work / "corpus.tsv", args.passages)
        gen_s = time.perf_counter() - t0
        report = {
            "passages": args.passages,
            "corpus_mib": round(size / 2**20, 1),
            "generate_seconds": round(gen_s, 1),
            "baseline_rss_mib": _baseline(),
            "store": _child("store", work),
            "bm25": _child("bm25", work),
            "cpu_count": os.cpu_count(),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
