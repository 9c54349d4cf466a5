"""Phrase retrieval (DensePhrases) with a trained phrase model: quality and speed.

Prints one JSON object.

Quality (default): index SQuAD v1.1 dev's 2,067 paragraphs, then EM / F1 of the
top phrase and top@k, for reading comprehension (D = {p}: each question searched in
its gold paragraph) and for the open corpus of all paragraphs; with vectors kept
per passage, index bytes and queries/s.

    python bench/phrase_retrieval.py MODEL_DIR [--limit 1000] [--threshold TAU] [--nprobe 64,549]
        [--depths 300,1000] [--keep 0.5,0.25]

``--keep`` adds the filter's trade-off: for each fraction, a smaller index keeping about
that share of the vectors (``anygrain.phrase.refilter``, no re-encoding) is scored the
same way, with its vectors and bytes per passage.

Speed (``--speed``): index SQuAD dev + SQuAD-Shifts paragraphs (>= 1M token
vectors without a filter) and time, per question, the whole phrase search from
question vectors (two MIPS calls, exact span scoring, merging, hits) against the
two raw FAISS calls alone; question encoding is timed separately.

    python bench/phrase_retrieval.py MODEL_DIR --speed [--queries 1000] [--factory IVF1024,Flat]

``--index DIR`` keeps the built index there and reuses it on the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.corpus.formats import parse_source
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.refilter import refilter, threshold_for_fraction
from anygrain.phrase.search import aggregate, unit_hits

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD_DEV = SHARED / "squad-v1.1" / "dev-v1.1.json"
SHIFTS = [
    SHARED / "squadshifts" / f
    for f in ("new_wiki_v1.0.json", "amazon_reviews_v1.0.json", "reddit_v1.0.json")
]


def _index(
    args: argparse.Namespace, sources: list[Path], where: Path
) -> tuple[PhraseIndex, float | None]:
    """Open ``--index`` when it holds an index, else build one (returns build seconds)."""
    out = Path(args.index) if args.index else where / "phrase-index"
    if args.index and (out / "index.json").exists():
        idx = Index.load(out)
        assert isinstance(idx, PhraseIndex)
        return idx, None
    t0 = time.perf_counter()
    # Documents of every source, read into the index's own corpus (so --index can be reused).
    src = (d for s in sources for d in parse_source(f"squad:{s}").documents())
    idx = PhraseIndex.build_from(
        src,
        out,
        model=args.model,
        threshold=args.threshold,
        factory=args.factory,
        batch_size=args.batch_size,
        bf16=args.bf16,
        progress=not args.quiet,
    )
    return idx, time.perf_counter() - t0


def _sizes(idx: PhraseIndex) -> dict[str, object]:
    c = idx.manifest["counts"]
    return {
        "passages": c["passages"],
        "tokens_seen": c["tokens_seen"],
        "token_vectors": c["tokens_kept"],
        "start_vectors": c["start_vectors"],
        "end_vectors": c["end_vectors"],
        "vectors_kept_per_passage": c["vectors_per_passage"],
        "index_bytes": c["bytes"],
        "bytes_per_passage": c["bytes_per_passage"],
        "factory": idx.manifest["settings"]["factory"],
        "threshold": idx.manifest["settings"]["threshold"],
    }


def quality(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    idx, build_s = _index(args, [Path(args.data)], tmp)
    qs = load_questions(f"squad:{args.data}", limit=args.limit)
    out: dict[str, object] = {"mode": "quality", "data": str(args.data), "n_questions": len(qs)}
    out["index"] = {**_sizes(idx), "build_seconds": build_s}
    runs: list[tuple[str, str, dict[str, object]]] = [
        ("rc_gold_passage", "gold-passage", {}),
        ("open_corpus", "corpus", {"top_k": args.top_k}),
    ]
    # Extra open-corpus runs at other IVF depths, on the same index: what IVF costs.
    for n in args.nprobe or []:
        runs.append((f"open_corpus_nprobe_{n}", "corpus", {"top_k": args.top_k, "nprobe": n}))
    # ... and at other MIPS depths: how many true phrases the top-k starts/ends miss.
    for d in args.depths or []:
        runs.append((f"open_corpus_depth_{d}", "corpus", {"top_k": d}))
    for name, scope, opts in runs:
        rep = evaluate_index(
            idx, qs, k=args.k, scope=scope, progress=not args.quiet, search_options=opts
        )
        out[name] = {
            **{m: round(100 * v, 2) for m, v in rep.metrics.items()},
            "queries_per_s": round(rep.queries_per_second or 0.0, 2),
        }
    out["open_over_gold_passage_em"] = round(
        out["open_corpus"]["em"] / max(out["rc_gold_passage"]["em"], 1e-9),  # type: ignore[index]
        3,
    )
    if args.keep:
        out["filter_sweep"] = [_sweep_point(idx, qs, f, tmp, args) for f in args.keep]
    return out


def _sweep_point(
    idx: PhraseIndex, qs: object, fraction: float, tmp: Path, args: argparse.Namespace
) -> dict[str, object]:
    """Scores of a refiltered copy of ``idx`` keeping about ``fraction`` of its vectors."""
    tau = threshold_for_fraction(idx, fraction)
    sub = refilter(idx, tmp / f"keep-{fraction}", tau, progress=False)
    c = sub.manifest["counts"]
    row: dict[str, object] = {
        "keep": fraction,
        "threshold": round(tau, 4),
        "vectors_per_passage": c["vectors_per_passage"],
        "bytes_per_passage": c["bytes_per_passage"],
        "factory": sub.manifest["settings"]["factory"],
    }
    for name, scope in (("rc_gold_passage", "gold-passage"), ("open_corpus", "corpus")):
        rep = evaluate_index(
            sub, qs, k=args.k, scope=scope, progress=False, search_options={"top_k": args.top_k}
        )
        row[name] = {m: round(100 * v, 2) for m, v in rep.metrics.items()}
    return row


def speed(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    idx, build_s = _index(args, [Path(args.data), *SHIFTS], tmp)
    texts = load_questions(f"squad:{args.data}", limit=args.queries).texts
    n, bs, depth, k = len(texts), args.search_batch, args.top_k, 10
    # One untimed pass, so page faults of the freshly built (memory-mapped) index are not timed.
    for i in range(0, n, bs):
        idx.search_phrases(*idx.encode_queries(texts[i : i + bs], batch_size=bs), top_k=depth)
    t_enc = t_faiss = t_search = t_hits = 0.0
    for i in range(0, n, bs):
        batch = texts[i : i + bs]
        t0 = time.perf_counter()
        qs, qe = idx.encode_queries(batch, batch_size=bs, bf16=args.bf16)
        t1 = time.perf_counter()
        idx.start_index.search(qs, depth)
        idx.end_index.search(qe, depth)
        t2 = time.perf_counter()
        phrases = idx.search_phrases(qs, qe, top_k=depth)
        t3 = time.perf_counter()
        found = [aggregate(idx.table, idx.store, p, k, Unit.PHRASE) for p in phrases]
        unit_hits(idx.table, idx.store, found, Unit.PHRASE)
        t4 = time.perf_counter()
        t_enc += t1 - t0
        t_faiss += t2 - t1
        t_search += t3 - t2
        t_hits += t4 - t3
    phrase_s = t_search + t_hits
    return {
        "mode": "speed",
        "n_queries": n,
        "mips_depth": depth,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": round(os.getloadavg()[0], 2),
        "index": {**_sizes(idx), "build_seconds": build_s},
        "raw_faiss_two_calls_qps": round(n / t_faiss, 2),
        "phrase_search_from_vectors_qps": round(n / phrase_s, 2),
        "phrase_search_with_encoding_qps": round(n / (phrase_s + t_enc), 2),
        "question_encoding_qps": round(n / t_enc, 2),
        "phrase_search_over_raw_faiss": round(phrase_s / t_faiss, 3),
        "breakdown_ms_per_query": {
            "encode": round(1000 * t_enc / n, 3),
            "faiss_two_calls": round(1000 * t_faiss / n, 3),
            "mips_plus_span_scoring": round(1000 * t_search / n, 3),
            "hits": round(1000 * t_hits / n, 3),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="trained phrase model directory (anygrain train phrase --out)")
    ap.add_argument("--data", default=str(SQUAD_DEV))
    ap.add_argument(
        "--speed", action="store_true", help="speed mode: >= 1M vectors, phrase search vs raw FAISS"
    )
    ap.add_argument(
        "--limit", type=int, default=None, help="quality: evaluate the first N questions"
    )
    ap.add_argument("--queries", type=int, default=1000, help="speed: questions to time")
    ap.add_argument("-k", type=int, default=10, help="quality: top@k")
    ap.add_argument("--top-k", type=int, default=100, help="MIPS depth per side")
    ap.add_argument(
        "--nprobe",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="quality: also evaluate the open corpus at these IVF nprobe values (e.g. 64,549)",
    )
    ap.add_argument(
        "--depths",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="quality: also evaluate the open corpus at these MIPS depths (e.g. 300,1000)",
    )
    ap.add_argument(
        "--keep",
        type=lambda v: [float(x) for x in v.split(",")],
        default=None,
        help="quality: also score refiltered indexes keeping these fractions of the vectors",
    )
    ap.add_argument("--search-batch", type=int, default=64)
    ap.add_argument(
        "--threshold", type=float, default=None, help="filter tau (default: the model's)"
    )
    ap.add_argument("--factory", default=None, help="FAISS factory (default: by size)")
    ap.add_argument("--batch-size", type=int, default=32, help="passage windows per encoding batch")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--index", default=None, help="keep/reuse the index in this directory")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch and FAISS threads (1 on a shared CPU)"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.threads:
        import faiss

        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    for p in [Path(args.data), *(SHIFTS if args.speed else [])]:
        if not p.exists():
            sys.exit(f"{p}: not found (expected under ../shared/data)")
    with tempfile.TemporaryDirectory() as tmp:
        res = speed(args, Path(tmp)) if args.speed else quality(args, Path(tmp))
    res["model"] = str(args.model)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
