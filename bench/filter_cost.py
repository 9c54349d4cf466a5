"""What a metadata filter costs (``search(..., filter=...)``, issue 36): the mask computed
once per corpus and filter, and the search latency at several shares of matching passages,
against the unfiltered search, on a synthetic corpus written here.

    taskset -c 1 python bench/filter_cost.py [--kind bm25] [--passages 20000] [--model NAME]

Prints one line per filter: the mask's time (once) and the filtered search's ms/query (and
the ratio to the unfiltered search); queries short of ``k`` are those whose matching
passages the index holds fewer than ``k`` of (BM25 returns only passages sharing a term).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from anygrain import Index
from anygrain.corpus.records import SourceDocument
from anygrain.index.filters import allowed_rows

FILTERS: dict[str, dict[str, Any]] = {
    "all": {"src": "x"},
    "25%": {"color": "red"},
    "10%": {"bucket": {"$lt": 100}},
    "1%": {"bucket": {"$lt": 10}},
    "0.1%": {"bucket": 7},
}


def corpus(n: int, seed: int = 0) -> tuple[list[SourceDocument], list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    docs = [
        SourceDocument(
            f"d{i}",
            f"T{i}",
            " ".join(rng.choice(vocab) for _ in range(40)),
            meta={
                "bucket": i % 1000,
                "color": ("red", "green", "blue", "amber")[i % 4],
                "src": "x",
            },
        )
        for i in range(n)
    ]
    queries = [" ".join(rng.choice(vocab) for _ in range(4)) for _ in range(50)]
    return docs, queries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="bm25")
    ap.add_argument("--passages", type=int, default=20000)
    ap.add_argument("--model", default=None, help="dense/hybrid/phrase: the model")
    ap.add_argument("-k", type=int, default=10)
    a = ap.parse_args()
    docs, queries = corpus(a.passages)
    opts = {"model": a.model} if a.model else {}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        idx = Index.build(docs, kind=a.kind, out=Path(tmp) / "i", progress=False, **opts)
        print(f"{a.kind}: {len(idx.corpus)} passages, built in {time.perf_counter() - t:.1f} s")
        idx.search(queries, a.k)  # warm
        t = time.perf_counter()
        idx.search(queries, a.k)
        base = (time.perf_counter() - t) / len(queries) * 1000
        print(f"  unfiltered: {base:.2f} ms/query")
        for name, spec in FILTERS.items():
            t = time.perf_counter()
            allowed_rows(idx, spec)
            mask_ms = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            got = idx.search(queries, a.k, filter=spec)
            ms = (time.perf_counter() - t) / len(queries) * 1000
            short = sum(len(g) < a.k for g in got)
            print(
                f"  {name:>5} of passages: mask {mask_ms:5.0f} ms once; "
                f"{ms:6.2f} ms/query ({ms / base:4.1f}x); {short} queries short of k"
            )


if __name__ == "__main__":
    main()
