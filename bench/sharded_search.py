"""Sharded search: queries/s and latency of an unsharded index vs the same corpus in N shards.

For each index kind (``--kinds``) the corpus is indexed once unsharded and once per shard
count (``--shards``, default 2 and 4), and the same questions are searched in each:

- ``batch_qps``: all questions in one ``search_rows`` call (best of ``--repeat``);
- ``latency_ms``: one question per call, median and 95th percentile;
- ``merge_overhead``: sharded time / unsharded time for the batch and for one question
  (1.0 = free; the merge itself plus the threads, on this machine's cores);
- ``same_topk``: the fraction of questions whose top-k rows equal the unsharded index's
  (1.0 for exhaustive indexes, up to score ties).

Dense search is timed from encoded question vectors, so the figures are the search and
merge, not the question encoder.  Prints one JSON object on stdout.

    python bench/sharded_search.py [--data ../shared/data/squad-v1.1/dev-v1.1.json]
        [--passages 2000] [--queries 500] [--kinds bm25,dense] [--shards 2,4]

The data is read in place; indexes go to a temporary directory (or ``--work``, reused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anygrain import Index, load_questions
from anygrain.api import build_index
from anygrain.corpus.store import CorpusStore
from anygrain.utils.threads import set_threads


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _best(fn: Callable[[], object], repeat: int) -> float:
    """Fastest of ``repeat`` runs: on a shared machine the minimum is the least disturbed."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _searcher(idx: Any, kind: str, queries: Sequence[str], k: int) -> Callable[[int, int], Any]:
    """``search(i, j)``: rows and scores of questions ``i:j`` (dense: pre-encoded vectors)."""
    if kind == "dense":
        q = idx.encode_queries(list(queries))
        return lambda i, j: idx.search_vectors(q[i:j], k)
    if kind == "phrase":
        qs, qe = idx.encode_queries(list(queries))
        return lambda i, j: idx.search_phrases(qs[i:j], qe[i:j], top_k=max(100, 10 * k))
    return lambda i, j: idx.search_rows(queries[i:j], k)


def _rows(result: Any, kind: str, idx: Any, k: int) -> list[list[int]]:
    if kind == "phrase":
        return [idx.table.row[p.start[:k]].tolist() for p in result]
    return [r.tolist() for r in result[0]]


def measure(
    idx: Any, kind: str, queries: Sequence[str], k: int, repeat: int, single: int
) -> tuple[dict[str, Any], list[list[int]]]:
    search = _searcher(idx, kind, queries, k)
    n = len(queries)
    rows = _rows(search(0, n), kind, idx, k)  # also warms the page cache and thread pools
    t_batch = _best(lambda: search(0, n), repeat)
    lat = []
    for i in range(min(single, n)):
        t0 = time.perf_counter()
        search(i, i + 1)
        lat.append(time.perf_counter() - t0)
    return {
        "batch_qps": round(n / t_batch, 1),
        "batch_seconds": round(t_batch, 4),
        "latency_ms": {
            "p50": round(1000 * float(np.median(lat)), 3),
            "p95": round(1000 * float(np.percentile(lat, 95)), 3),
        },
    }, rows


def _same(a: list[int], b: list[int]) -> bool:
    return a == b or sorted(a) == sorted(b)  # ties may come in another order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        default=str(
            Path(__file__).resolve().parents[1].parent / "shared/data/squad-v1.1/dev-v1.1.json"
        ),
        help="SQuAD-format file: its paragraphs are the corpus, its questions the queries",
    )
    ap.add_argument("--passages", type=int, default=0, help="first N passages (0: all)")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--kinds", default="bm25,dense", help="comma list of bm25, dense, phrase")
    ap.add_argument("--shards", default="2,4", help="shard counts to compare with 1")
    ap.add_argument("--model", default=None, help="dense encoder (default: minilm)")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--single", type=int, default=100, help="questions timed one at a time")
    ap.add_argument("--threads", type=int, default=None, help="torch/FAISS threads")
    ap.add_argument("--work", default=None, help="keep indexes here (reused on a rerun)")
    args = ap.parse_args()
    if not Path(args.data).exists():
        sys.exit(f"{args.data}: not found (SQuAD v1.1 dev is expected in ../shared/data)")
    set_threads(args.threads)
    shard_counts = [int(x) for x in args.shards.split(",") if x]
    kinds = [x for x in args.kinds.split(",") if x]
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="sharded-bench-")
    work = Path(args.work or tmp.name)  # type: ignore[union-attr]
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    if not (corpus / "corpus.json").exists():
        full = CorpusStore.build(f"squad:{args.data}", work / "corpus-all", progress=False)
        n = min(args.passages or len(full), len(full))
        full.write_rows(0, n, corpus)
    store = CorpusStore(corpus)
    questions = load_questions(f"squad:{args.data}").texts[: args.queries]
    report: dict[str, Any] = {
        "data": os.path.relpath(args.data),
        "passages": len(store),
        "queries": len(questions),
        "k": args.k,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "kinds": {},
    }
    for kind in kinds:
        settings: dict[str, Any] = {"progress": False, "lang": "en"}
        if kind == "dense":
            settings["model"] = args.model or "minilm"
        res: dict[str, Any] = {}
        base_rows: list[list[int]] = []
        for n_shards in [1, *shard_counts]:
            out = work / f"{kind}-{n_shards}"
            if (out / "index.json").exists():
                idx = Index.load(out)
            else:
                log(f"building {kind} with {n_shards} shard(s)")
                t0 = time.perf_counter()
                idx = build_index(store, kind=kind, out=out, shards=n_shards, **settings)
                log(f"built in {time.perf_counter() - t0:.1f} s")
            m, rows = measure(idx, kind, questions, args.k, args.repeat, args.single)
            if n_shards == 1:
                base, base_rows = m, rows
            else:
                m["merge_overhead"] = {
                    "batch": round(m["batch_seconds"] / base["batch_seconds"], 3),
                    "single_p50": round(m["latency_ms"]["p50"] / base["latency_ms"]["p50"], 3),
                }
                m["same_topk"] = round(
                    sum(_same(a, b) for a, b in zip(rows, base_rows, strict=True)) / len(rows), 4
                )
            res[str(n_shards)] = m
            log(f"{kind} x{n_shards}: {json.dumps(m)}")
        report["kinds"][kind] = res
    print(json.dumps(report, indent=2))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
