"""Query-side fine-tuning of a trained phrase model: open-corpus EM before and after.

Builds a phrase index over the TRAINING paragraphs (SQuAD-Shifts; never SQuAD dev),
fine-tunes the question encoder against it (``anygrain.train.phrase.query_side``),
then scores the base and the tuned question encoders on the same SQuAD v1.1 dev
phrase index: open corpus (all 2,067 paragraphs) and D = {p}.  Prints one JSON object.

    python bench/phrase_query_side.py MODEL_DIR --work runs/qsft [--train new_wiki] \
        [--loss phrase] [--epochs 1] [--limit 2000] [--dev-index DIR]

Everything built is kept under ``--work`` and reused by a rerun.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.corpus.formats import parse_source
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.train.phrase import PhraseQuerySideConfig
from anygrain.train.phrase import train_query_side as train_phrase_query_side

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD_DEV = SHARED / "squad-v1.1" / "dev-v1.1.json"
SHIFTS = {
    n: SHARED / "squadshifts" / f"{n}_v1.0.json" for n in ("new_wiki", "amazon_reviews", "reddit")
}


def _phrase_index(
    sources: list[Path], out: Path, model: str, bf16: bool, build: dict[str, object]
) -> tuple[PhraseIndex, float]:
    t0 = time.perf_counter()
    if not (out / "index.json").exists():
        docs = (d for s in sources for d in parse_source(f"squad:{s}").documents())
        PhraseIndex.build_from(docs, out, model=model, bf16=bf16, progress=False, **build)
    idx = Index.load(out)
    assert isinstance(idx, PhraseIndex)
    return idx, round(time.perf_counter() - t0, 1)


def _scores(idx: PhraseIndex, args: argparse.Namespace) -> dict[str, object]:
    qs = load_questions(f"squad:{SQUAD_DEV}", limit=args.limit)
    out: dict[str, object] = {}
    runs = (("open_corpus", "corpus", "phrase"), ("gold_passage", "gold-passage", "phrase"))
    if args.passage:
        runs += (("open_passage", "corpus", "passage"),)
    for name, scope, unit in runs:
        t0 = time.perf_counter()
        metrics = ["top@1", "top@5", "top@20"] if unit == "passage" else None
        rep = evaluate_index(
            idx,
            qs,
            k=20 if unit == "passage" else 10,
            metrics=metrics,
            scope=scope,
            unit=unit,
            progress=False,
        )
        out[name] = {m: round(100 * v, 2) for m, v in rep.metrics.items()}
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)  # type: ignore[index]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="trained phrase model (anygrain train phrase --out)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--train", default="new_wiki", help=f"comma-separated of {', '.join(SHIFTS)}")
    ap.add_argument("--loss", default="phrase", help="phrase | passage | both")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--limit", type=int, default=None, help="first N SQuAD dev questions")
    ap.add_argument("--max-examples", type=int, default=None, help="training questions (subset)")
    ap.add_argument("--dev-index", default=None, help="SQuAD dev phrase index to reuse")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--compress",
        default="none",
        help="compression of both indexes built here (none, sq8, sq4, opq-pq): with a "
        "compressed training index the question side learns against the decoded vectors "
        "(quantisation-aware fine-tuning)",
    )
    ap.add_argument("--keep", type=float, default=1.0, help="keep fraction of both indexes")
    ap.add_argument("--passage", action="store_true", help="also score passage grain (top@k)")
    ap.add_argument(
        "--bf16", action="store_true", help="bf16 autocast (only on CPUs with native bf16)"
    )
    args = ap.parse_args()
    names = [n for n in args.train.split(",") if n]
    if any(n not in SHIFTS for n in names):
        sys.exit(f"--train takes {', '.join(SHIFTS)}")
    for p in [SQUAD_DEV, *(SHIFTS[n] for n in names)]:
        if not p.exists():
            sys.exit(f"{p}: not found (expected under ../shared/data)")
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    build = {"compress": args.compress, "keep": args.keep}
    if args.compress == "none":
        build["keep_dump"] = True
    variant = f"{args.compress}-k{args.keep:g}"
    train_idx, train_build_s = _phrase_index(
        [SHIFTS[n] for n in names],
        work / f"train-index-{'-'.join(names)}-{variant}",
        args.model,
        args.bf16,
        build,
    )
    dev_dir = Path(args.dev_index) if args.dev_index else work / f"dev-index-{variant}"
    dev_idx, dev_build_s = _phrase_index([SQUAD_DEV], dev_dir, args.model, args.bf16, build)
    tag = f"{'-'.join(names)}-{variant}-{args.loss}-e{args.epochs}-n{args.max_examples or 'all'}"
    tuned_dir = work / f"qsft-{tag}"
    cfg = PhraseQuerySideConfig(
        index=str(train_idx.path),
        train=[f"squad:{SHIFTS[n]}" for n in names],
        out=str(tuned_dir),
        loss=args.loss,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        max_examples=args.max_examples,
        bf16=args.bf16,
        threads=args.threads,
    )
    t0 = time.perf_counter()
    train_phrase_query_side(cfg, progress=False)
    train_s = round(time.perf_counter() - t0, 1)
    log = [json.loads(x) for x in (tuned_dir / "train_log.jsonl").read_text().splitlines()]
    done = next(e for e in reversed(log) if e.get("event") == "done")
    base = _scores(dev_idx, args)
    tuned_idx = Index.load(dev_idx.path, model=tuned_dir)
    assert isinstance(tuned_idx, PhraseIndex)
    tuned = _scores(tuned_idx, args)
    res = {
        "model": args.model,
        "train": names,
        "loss": args.loss,
        "epochs": args.epochs,
        "compress": args.compress,
        "keep": args.keep,
        "dev_index": str(dev_dir),
        "dev_index_factory": dev_idx.manifest["settings"]["factory"],
        "train_index_factory": train_idx.manifest["settings"]["factory"],
        "train_index_vectors": train_idx.manifest["counts"]["tokens_kept"],
        "train_index_build_seconds": train_build_s,
        "dev_index_build_seconds": dev_build_s,
        "query_side_seconds": train_s,
        "query_side_questions": done.get("questions"),
        "query_side_with_positive": done.get("with_positive"),
        "base": base,
        "query_side": tuned,
    }
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
