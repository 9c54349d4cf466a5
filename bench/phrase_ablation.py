"""Phrase-model ablations at an equal time budget (DensePhrases Table 6 style).

Trains one phrase model per variant from the same encoder, data and seed, each on
the same ``--examples`` training questions for one epoch (equal steps and questions,
so CPU contention changes the seconds reported, never the comparison; pre-batch
negatives join for the second half), then scores every model the same way on SQuAD
v1.1 dev: EM / F1 of
the top phrase in the gold passage (D = {p}) and over the open corpus of all 2,067
paragraphs (exact MIPS, so the index adds no error).  Prints one JSON object.

    python bench/phrase_ablation.py --work runs/ablation --examples 9600 --limit 1000 \
        [--variants full,no_prebatch,no_inbatch,separate,per_side_clip,token_negatives,distill] [--teacher READER_DIR]

Runs are resumable: a variant already trained with the same settings is not trained
again, and its index is reused.  ``distill`` needs ``--teacher`` (a reader from
``anygrain train reader``); without one it is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.corpus.formats import parse_source
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.train.phrase import PhraseTrainConfig
from anygrain.train.phrase import train as train_phrase

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD_DEV = SHARED / "squad-v1.1" / "dev-v1.1.json"
SHIFTS = [
    SHARED / "squadshifts" / f
    for f in ("new_wiki_v1.0.json", "amazon_reviews_v1.0.json", "reddit_v1.0.json")
]

#: Variant name -> the settings it changes from the full model.
VARIANTS: dict[str, dict[str, object]] = {
    "full": {},
    "no_prebatch": {"pre_batch": 0},
    "no_inbatch": {"in_batch": False},
    "separate": {"question_encoder": "separate"},
    # full, with the phrase and question encoders' gradients clipped apart: pre-batch
    # negatives reach only the question side, and one global norm shrinks the phrase side's step
    "per_side_clip": {"grad_clip": "per-side"},
    # in-batch negatives from every token of the other passages, not only their golds
    "token_negatives": {"in_batch_negatives": "tokens"},
    "token_negatives_no_prebatch": {"in_batch_negatives": "tokens", "pre_batch": 0},
    "distill": {},  # + teacher, filled in from --teacher
}


def train_variant(name: str, base: PhraseTrainConfig, teacher: str | None) -> Path:
    changes = dict(VARIANTS[name])
    if name == "distill":
        changes["teacher"] = teacher
    cfg = replace(base, out=str(Path(base.out) / name), **changes)  # type: ignore[arg-type]
    return train_phrase(cfg, progress=False)


def score(model_dir: Path, args: argparse.Namespace) -> dict[str, object]:
    index_dir = model_dir / "squad-dev-index"
    if (index_dir / "index.json").exists():
        idx = Index.load(index_dir)
    else:
        docs = parse_source(f"squad:{args.data}").documents()
        idx = PhraseIndex.build_from(
            docs, index_dir, model=model_dir, factory="SQfp16", bf16=args.bf16, progress=False
        )
    assert isinstance(idx, PhraseIndex)
    qs = load_questions(f"squad:{args.data}", limit=args.limit)
    out: dict[str, object] = {}
    for key, scope in (("gold_passage", "gold-passage"), ("open_corpus", "corpus")):
        rep = evaluate_index(idx, qs, k=10, scope=scope, progress=False)
        out[key] = {m: round(100 * v, 2) for m, v in rep.metrics.items()}
    gp, oc = out["gold_passage"], out["open_corpus"]
    out["open_over_gold_passage_em"] = round(oc["em"] / max(gp["em"], 1e-9), 3)  # type: ignore[index]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="directory for the models and their indexes")
    ap.add_argument(
        "--examples", type=int, default=9600, help="training questions per variant (one epoch)"
    )
    ap.add_argument("--limit", type=int, default=1000, help="first N SQuAD dev questions")
    ap.add_argument("--variants", default="full,no_prebatch,no_inbatch,separate,distill")
    ap.add_argument("--teacher", default=None, help="reader directory for the distill variant")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--data", default=str(SQUAD_DEV))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--bf16", action="store_true", help="bf16 autocast (only on CPUs with native bf16)"
    )
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    for p in [Path(args.data), *SHIFTS]:
        if not p.exists():
            sys.exit(f"{p}: not found (expected under ../shared/data)")
    torch.set_num_threads(args.threads)
    base = PhraseTrainConfig(
        train=[f"squad:{p}" for p in SHIFTS],
        out=args.work,
        model=args.model,
        epochs=1,
        max_examples=args.examples,
        batch_size=32,
        lr=1e-4,
        bf16=args.bf16,
        threads=args.threads,
    )
    res: dict[str, object] = {
        "examples_per_variant": args.examples,
        "n_questions": args.limit,
        "threads": args.threads,
        "bf16": args.bf16,
        "load_average": round(os.getloadavg()[0], 2),
        "variants": {},
    }
    for name in names:
        if name == "distill" and not args.teacher:
            res["variants"][name] = {"skipped": "no --teacher reader given"}  # type: ignore[index]
            continue
        t0 = time.time()
        model_dir = train_variant(name, base, args.teacher)
        t1 = time.time()
        log = [json.loads(x) for x in (model_dir / "train_log.jsonl").read_text().splitlines()]
        done = next((e for e in reversed(log) if e.get("event") == "done"), {})
        row = {
            "changes": VARIANTS[name] or ({"teacher": args.teacher} if name == "distill" else {}),
            "steps": done.get("step"),
            "questions_seen": done.get("questions"),
            "train_seconds_this_call": round(t1 - t0, 1),
            **score(model_dir, args),
        }
        res["variants"][name] = row  # type: ignore[index]
        print(json.dumps({name: row}), file=sys.stderr, flush=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
