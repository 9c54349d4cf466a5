"""Extractive reader on SQuAD v1.1 dev: gold passage (D={p}) and end to end over retrievers.

Trains a reader from ``minilm`` on SQuAD-Shifts (or loads one with ``--reader``),
then prints one JSON object: EM/F1 and questions/s with the gold passage, and
for each retriever index given (``--bm25``, ``--dense``, ``--hybrid``; others
are skipped) EM/F1 at k = 1, 5, 20.  Each retriever is searched once at the
largest k; ``read_questions_per_second`` times reading only, and
``questions_per_second`` adds that one retrieval's time (an upper bound for
smaller k).  SQuAD dev is never trained on.

    python bench/reader.py --reader DIR [--bm25 IDX] [--dense IDX] [--hybrid IDX]
                           [--limit N] [--e2e-limit N] [--threads 1] [--bf16]
    python bench/reader.py --train-out DIR --max-examples 8000 --negatives 3 --bf16 --threads 1 [...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from anygrain import Index, load_questions
from anygrain.corpus.store import CorpusStore
from anygrain.reader import Reader, evaluate_reader

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHIFTS = ["new_wiki", "amazon_reviews", "reddit"]


def _train(args: argparse.Namespace) -> tuple[Path, dict[str, object]]:
    from anygrain.train.reader import ReaderTrainConfig
    from anygrain.train.reader import train as train_reader
    from anygrain.train.run_dir import LOG_FILE

    specs = [f"squad:{SHARED / 'squadshifts' / f'{name}_v1.0.json'}" for name in SHIFTS]
    config = ReaderTrainConfig(
        train=specs,
        out=str(args.train_out),
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        negatives=args.negatives,
        lr=args.lr,
        max_examples=args.max_examples,
        bf16=args.bf16,
    )
    t0 = time.perf_counter()
    out = train_reader(config, progress=not args.quiet)
    lines = (out / LOG_FILE).read_text(encoding="utf-8").splitlines()
    done = json.loads(lines[-1]) if lines else {}
    return out, {
        "out": str(out),
        "config": config.trajectory(),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "train_questions_per_second": done.get("questions_per_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, default=SHARED / "squad-v1.1" / "dev-v1.1.json")
    ap.add_argument("--reader", type=Path, help="A trained reader directory (skips training)")
    ap.add_argument(
        "--train-out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "anygrain-bench-reader",
        help="Where to train one (a rerun resumes or reuses it)",
    )
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--negatives", type=int, default=7)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-examples", type=int, default=None)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for training and reading")
    ap.add_argument("--bm25", type=Path)
    ap.add_argument("--dense", type=Path)
    ap.add_argument("--hybrid", type=Path)
    ap.add_argument("--ks", default="1,5,20")
    ap.add_argument("--limit", type=int, default=None, help="Evaluate the first N questions only")
    ap.add_argument(
        "--e2e-limit",
        type=int,
        default=None,
        help="End to end: only the first N of those (k=20 is slow on CPU)",
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads (1 is best on a busy CPU)"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.data.exists():
        sys.exit(f"{args.data}: not found (SQuAD v1.1 dev is expected in ../shared/data)")
    result: dict[str, object] = {"data": str(args.data), "threads": torch.get_num_threads()}
    if args.reader is None:
        reader_dir, result["train"] = _train(args)
    else:
        reader_dir = args.reader
    reader = Reader.load(reader_dir)
    result["reader"] = str(reader_dir)
    questions = list(load_questions(f"squad:{args.data}", limit=args.limit))
    result["n_questions"] = len(questions)
    ks = [int(k) for k in args.ks.split(",")]
    progress = not args.quiet

    with tempfile.TemporaryDirectory() as tmp:
        store = CorpusStore.build(f"squad:{args.data}", Path(tmp) / "corpus", progress=False)
        result["gold_passage"] = evaluate_reader(
            None,
            reader,
            questions,
            gold_passage=True,
            store=store,
            bf16=args.bf16,
            progress=progress,
        )
    for name in ("bm25", "dense", "hybrid"):
        path = getattr(args, name)
        if path is None:
            continue
        index = Index.load(path)
        e2e = questions[: args.e2e_limit] if args.e2e_limit is not None else questions
        t0 = time.perf_counter()
        hits = index.search([q.text for q in e2e], max(ks))
        retrieve_s = time.perf_counter() - t0
        per_k: dict[str, object] = {"retrieve_seconds": round(retrieve_s, 3)}
        for k in ks:
            rep = evaluate_reader(
                None, reader, e2e, k=k, hits=hits, bf16=args.bf16, progress=progress
            )
            n, read_s = rep["n_evaluated"], rep["read_seconds"]
            rep["questions_per_second"] = round(n / (read_s + retrieve_s), 3) if n else None
            rep["setting"] = f"end_to_end:{name}"
            per_k[f"k={k}"] = rep
        result[name] = per_k
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
