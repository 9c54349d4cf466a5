"""Exact re-scoring of compressed phrase indexes (issue 37): open EM and passage top@5 per
index and ``--rescore`` N, with bytes per passage and questions per second.

One JSON row per (index, N) on stdout, as each finishes (a list in ``--out`` too)::

    python bench/phrase_rescore.py --questions squad:../shared/data/squad-v1.1/dev-v1.1.json \\
        --index sq8-keep0.5=runs/sq-default --index pq48-keep0.5=runs/i37/pq-0.5 \\
        --index pq48-keep0.25=runs/i37/pq-0.25 --rescore 0,1,3,5 --limit 500 --threads 1

EM/F1 are of the top phrase (open corpus, fused scores unless the index has no BM25 part);
top@1/top@5 of passages by answer containment (``--unit passage``).  ``qps`` is questions
per second of the phrase-grain evaluation (question encoding, search, re-encoding the
re-scored passages) on ``--threads``; ``--shuffle SEED`` searches the questions in a random
order (SQuAD dev lists each paragraph's questions together, so a batch of 64 shares few
passages; shuffled, a batch re-encodes about as many passages as it asks for); ``cpu_qps``
divides by this process's CPU seconds instead of wall time (what an idle core would give
when other jobs share it).
Bytes per passage count every file of the index but its corpus store (FAISS codes, token
table, filter logits, ids, the BM25 part), the model referenced by name.

``--rescore-tokens stored,all`` adds a row per token mode (which tokens of the re-encoded
passages spans are ranked over: the index's stored ones, those passing the model's own
filter, or all) and ``--rescore-bf16 0,1`` per re-encoding precision (1: bfloat16
autocast); ``N`` = 0 gives one row (neither applies).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from _common import index_bytes

from anygrain.api import evaluate_index, load_questions
from anygrain.corpus.questions import Questions
from anygrain.index.base import Index
from anygrain.phrase import rescore as rescore_module
from anygrain.utils.threads import set_threads


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


encoded: list[int] = []  # passage rows re-encoded, one entry per row per encoder call


def _counting(encode_rows: Any) -> Any:
    def counted(index: Any, rows: Any, **kw: Any) -> Any:
        encoded.extend(int(r) for r in set(int(x) for x in rows))
        return encode_rows(index, rows, **kw)

    return counted


rescore_module.encode_rows = _counting(rescore_module.encode_rows)


def run_one(
    idx: Index,
    qs: Questions,
    n: int,
    *,
    passage: bool,
    batch_size: int,
    tokens: str | None = None,
    bf16: bool | None = None,
    margin: float | None = None,
    context: int | None = None,
) -> dict[str, Any]:
    opts: dict[str, Any] = {"rescore": n, "batch_size": batch_size}
    if n:
        opts.update(rescore_tokens=tokens, rescore_bf16=bf16, rescore_margin=margin)
        if context is not None:
            opts["rescore_context"] = context
        # what a server has loaded before its first request (the torch phrase model that
        # re-encodes, its bf16 kernels) is not the evaluation's time
        idx.search([q.text for q in list(qs)[:4]], 1, **opts)
    encoded.clear()
    t, c = time.perf_counter(), time.process_time()
    phrase = evaluate_index(idx, qs, metrics=["em", "f1"], k=1, progress=False, search_options=opts)
    secs, cpu = time.perf_counter() - t, time.process_time() - c
    row: dict[str, Any] = {
        # passages re-encoded (each once per search batch, however many questions share it)
        "passages_encoded": len(encoded),
        "passages_encoded_per_question": round(len(encoded) / len(qs), 3),
        "em": round(100 * phrase.metrics["em"], 2),
        "f1": round(100 * phrase.metrics["f1"], 2),
        "phrase_seconds": round(secs, 2),
        "qps": round(len(qs) / secs, 2),
        # on a shared core wall time counts other jobs' turns: CPU seconds of this process
        # (one thread) are what an idle core would take
        "phrase_cpu_seconds": round(cpu, 2),
        "cpu_qps": round(len(qs) / cpu, 2),
    }
    if passage:
        t = time.perf_counter()
        rep = evaluate_index(
            idx,
            qs,
            metrics=["top@1", "top@5", "top@20"],
            unit="passage",
            progress=False,
            search_options=opts,
        )
        row.update({m: round(v, 4) for m, v in rep.metrics.items()})
        row["passage_qps"] = round(len(qs) / (time.perf_counter() - t), 2)
    return row


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--questions", required=True, help="FORMAT:PATH of the questions")
    ap.add_argument("--index", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--rescore", default="0,1,3,5", help="passages re-scored, comma-separated")
    ap.add_argument("--limit", type=int, default=None, help="the first N questions")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--shuffle", type=int, default=None, help="search in a random order (seed)")
    ap.add_argument(
        "--passage-rescore",
        default="0,1",
        help="the N at which the passage grain is evaluated too (comma-separated; with N <= 5 "
        "re-scoring reorders the first N passages only, so top@5 cannot change)",
    )
    ap.add_argument(
        "--rescore-tokens",
        default="stored",
        help="tokens re-scored: stored|model|all|index (the index's), comma-separated",
    )
    ap.add_argument(
        "--rescore-bf16",
        default="0",
        help="re-encode in bfloat16: 0|1|index (as the index was built), comma-separated",
    )
    ap.add_argument(
        "--rescore-margin",
        default="index",
        help="re-score a passage after the first only within this first-stage score of it: "
        "comma-separated floats or 'index' (the index's recorded margin), a row each",
    )
    ap.add_argument(
        "--rescore-context",
        default="index",
        help="re-encode this many characters each side of a passage's best first-stage "
        "phrase (0: the whole passage): comma-separated ints or 'index', a row each",
    )
    ap.add_argument(
        "--runtime",
        default="auto",
        help="auto|onnx|torch: onnx re-scores on the shipped passage graph (float32) too",
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the rows here (JSON)")
    a = ap.parse_args(argv)
    set_threads(a.threads)
    qs = load_questions(a.questions, limit=a.limit)
    if a.shuffle is not None:
        items = list(qs)
        random.Random(a.shuffle).shuffle(items)
        qs = Questions(items, source=qs.source, format=qs.format)
    ns = [int(x) for x in a.rescore.split(",") if x.strip()]
    at_passage = {int(x) for x in a.passage_rescore.split(",") if x.strip()}
    rows: list[dict[str, Any]] = []
    for spec in a.index:
        name, _, where = spec.partition("=")
        path = Path(where)
        idx = Index.load(path, runtime=a.runtime)
        counts = idx.manifest["counts"]
        settings = idx.manifest["settings"]
        b = index_bytes(path)
        n_p = int(counts["passages"])
        modes = [
            None if x.strip() == "index" else x.strip()
            for x in a.rescore_tokens.split(",")
            if x.strip()
        ]
        precisions = [
            None if x.strip() == "index" else bool(int(x))
            for x in a.rescore_bf16.split(",")
            if x.strip()
        ]
        margins = [
            None if x.strip() == "index" else float(x)
            for x in a.rescore_margin.split(",")
            if x.strip()
        ]
        contexts = [
            None if x.strip() == "index" else int(x)
            for x in a.rescore_context.split(",")
            if x.strip()
        ]
        runs = [(0, None, None, None, None)] * (0 in ns) + [
            (n, t, b, m, c)
            for n in ns
            if n
            for t in modes
            for b in precisions
            for m in margins
            for c in contexts
        ]
        for n, tokens, bf16, margin, context in runs:
            log(
                f"{name}: rescore {n} ({tokens}, bf16 {bf16}, margin {margin}, "
                f"context {context}) over {len(qs)} q"
            )
            row = {
                "index": name,
                "path": str(path),
                "compress": settings.get("compress"),
                "factory": settings.get("factory"),
                "threshold": settings.get("threshold"),
                "rescore": n,
                "rescore_tokens": tokens,
                "rescore_bf16": bf16,
                "rescore_margin": margin if margin is not None else settings.get("rescore_margin"),
                "rescore_context": (
                    context if context is not None else settings.get("rescore_context")
                ),
                "n_questions": len(qs),
                "shuffled": a.shuffle is not None,
                "threads": a.threads,
                "passages": n_p,
                "vectors_per_passage": counts.get("vectors_per_passage"),
                "kb_per_passage": round(sum(b.values()) / n_p / 1000, 2),
                "kb_per_passage_phrase": round(b["phrase"] / n_p / 1000, 2),
                "kb_per_passage_bm25": round(b["sparse"] / n_p / 1000, 2),
                **run_one(
                    idx,
                    qs,
                    n,
                    passage=n in at_passage,
                    batch_size=a.batch_size,
                    tokens=tokens,
                    bf16=bf16,
                    margin=margin,
                    context=context,
                ),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
            if a.out is not None:
                a.out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
