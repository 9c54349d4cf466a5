"""Scaling out: encoding throughput locally and on Ray; prints one JSON object on stdout.

1. Encoding throughput (passages/s) of the same corpus (the first ``--limit`` SQuAD v1.1
   dev paragraphs, read in place) into dense vector shards with the local executor and
   with Ray at each of ``--workers`` (default 1 and 2 actors, one model each).  Ray's own
   start-up is timed apart; each Ray figure includes starting its actors and shipping
   them the model, which is what a user pays per encode.  Every run's vectors are
   checked byte-identical to the local ones.
2. Merge overhead of sharded search (``sharded_search_merge``): the same passages indexed
   unsharded and in ``--shards`` shards, searched with the same questions
   (``bench/sharded_search.py``, whose JSON is included whole).

On a busy machine the figures say little about a quiet one: the JSON records the CPU
count and load average at the start.

Usage: python bench/scale.py [--limit 2000] [--workers 1,2] [--shard-size 100]
                             [--model minilm] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json"


def squad_store(path: Path, n: int, out: Path) -> Any:
    """A corpus store of the first ``n`` paragraphs of a SQuAD file (read in place)."""
    from anygrain.corpus.formats import parse_source
    from anygrain.corpus.store import CorpusStore

    docs, total = [], 0
    for d in parse_source(f"squad:{path}").documents():
        assert d.passages is not None
        d.passages = d.passages[: n - total]
        docs.append(d)
        total += len(d.passages)
        if total >= n:
            break
    return CorpusStore.build(docs, out, progress=False)


def vector_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("vectors-*.npy"))}


def encode_once(store: Any, model: Any, out: Path, executor: Any, args: Any) -> dict[str, Any]:
    """Encode ``store`` into ``out`` with ``executor``; seconds and passages/s."""
    from anygrain.dense.shards import encode_corpus

    t = time.perf_counter()
    encode_corpus(
        store,
        model,
        out,
        shard_size=args.shard_size,
        batch_size=args.batch_size,
        progress=False,
        executor=executor,
    )
    dt = time.perf_counter() - t
    return {"seconds": round(dt, 2), "passages_per_s": round(len(store) / dt, 1)}


def encoding_throughput(store: Any, model: Any, work: Path, args: Any) -> dict[str, Any]:
    """Section 1: local, then Ray with each worker count, on the same corpus and model."""
    from anygrain.encode.ray_executor import RayConfig, RayExecutor

    result: dict[str, Any] = {"local": encode_once(store, model, work / "local", None, args)}
    reference = vector_bytes(work / "local")
    try:
        import ray
    except ImportError:
        result["ray"] = {"error": "Ray is not installed: pip install anygrain[ray]"}
        return result
    t = time.perf_counter()
    try:
        ray.init(num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    except Exception as e:  # a machine too busy for Ray's agents to start in time, say
        ray.shutdown()
        result["ray"] = {"error": f"{type(e).__name__}: {e}"}
        return result
    result["ray_init_seconds"] = round(time.perf_counter() - t, 2)
    try:
        for w in args.workers:
            out = work / f"ray-{w}"
            executor = RayExecutor(RayConfig(workers=w, retries=0))
            run = encode_once(store, model, out, executor, args)
            run["identical_to_local"] = vector_bytes(out) == reference
            result[f"ray_{w}_workers"] = run
    finally:
        ray.shutdown()
    return result


def sharded_search_overhead(args: Any) -> dict[str, Any] | None:
    """Section 2: what searching N index shards in parallel and merging their hits costs
    against the unsharded index, on the same passages and questions:
    ``bench/sharded_search.py`` (its JSON, whole) on the first ``--limit`` passages."""
    if not args.shards:
        return None
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("sharded_search.py")),
        "--data",
        str(args.data),
        "--passages",
        str(args.limit),
        "--queries",
        str(args.queries),
        "--kinds",
        args.kinds,
        "--shards",
        args.shards,
        "--model",
        args.model,
    ]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="a SQuAD-format file")
    ap.add_argument("--limit", type=int, default=2000, help="passages to encode")
    ap.add_argument("--workers", default="1,2", help="Ray worker counts, comma-separated")
    ap.add_argument("--shard-size", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--shards", default="2,4", help="sharded search: shard counts ('' skips)")
    ap.add_argument("--kinds", default="bm25,dense", help="sharded search: index kinds")
    ap.add_argument("--queries", type=int, default=500, help="sharded search: questions")
    args = ap.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]

    from anygrain.dense.index import as_biencoder

    report: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "data": str(args.data),
        "model": args.model,
        "shard_size": args.shard_size,
        "batch_size": args.batch_size,
    }
    with tempfile.TemporaryDirectory(prefix="anygrain-scale-") as d:
        work = Path(d)
        store = squad_store(args.data, args.limit, work / "corpus")
        report["n_passages"] = len(store)
        model = as_biencoder(args.model)
        report["encoding"] = encoding_throughput(store, model, work, args)
    report["sharded_search_merge"] = sharded_search_overhead(args)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
