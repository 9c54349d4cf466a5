"""What packing a phrase model costs: size against EM / F1 on SQuAD v1.1 dev (D = {p}).

Prints one JSON object.  For the full trained model and each packing (``--bits``), it
builds a phrase index over the dev articles that hold the first ``--limit`` questions
and scores those questions in their gold paragraphs (reading comprehension: the
phrase representations alone, no retrieval errors), with the stored size of each
form of the model.  With ``--open`` it also scores them over all of those articles.

    python bench/packed_model.py runs/phrase-minilm-frozen --limit 2000 --bits 8,4

The models are never trained on SQuAD dev (the shipped model trains on SQuAD-Shifts).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from anygrain import load_questions
from anygrain.api import evaluate_index
from anygrain.corpus.formats import parse_source
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.packed import PackSettings, pack_phrase_model

SQUAD_DEV = Path(__file__).resolve().parents[1].parent / "shared/data/squad-v1.1/dev-v1.1.json"


def dir_bytes(path: Path, pattern: str = "*") -> int:
    return sum(f.stat().st_size for f in path.rglob(pattern) if f.is_file())


def score(model: PhraseEncoder, docs: list, questions, where: Path, args) -> dict:  # type: ignore[no-untyped-def, type-arg]
    t0 = time.perf_counter()
    idx = PhraseIndex.build_from(iter(docs), where, model=model, progress=not args.quiet)
    build = time.perf_counter() - t0
    out: dict[str, object] = {"index_seconds": round(build, 1)}
    scopes = ["gold-passage", "corpus"] if args.open else ["gold-passage"]
    for scope in scopes:
        r = evaluate_index(idx, questions, k=10, scope=scope, progress=not args.quiet)
        out[scope] = {m: round(100 * v, 2) for m, v in r.metrics.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="the trained (full) phrase model directory")
    ap.add_argument("--questions", default=str(SQUAD_DEV))
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--bits", default="8,4", help="packings to score, comma-separated")
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--open", action="store_true", help="also score over all loaded articles")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    qs = load_questions(f"squad:{args.questions}", limit=args.limit)
    titles = {g.rsplit("_", 1)[0] for q in qs for g in q.gold}
    docs = [d for d in parse_source(f"squad:{args.questions}").documents() if d.doc_id in titles]
    full = PhraseEncoder.load(args.model)
    result: dict[str, object] = {
        "model": args.model,
        "questions": args.questions,
        "n_questions": len(qs),
        "n_articles": len(docs),
        "variants": {},
    }
    variants = result["variants"]
    assert isinstance(variants, dict)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        variants["full"] = {
            "bytes": dir_bytes(Path(args.model) / "phrase", "*.safetensors")
            + sum(dir_bytes(Path(args.model) / n, "*.safetensors") for n in full._question_dirs())
            + (Path(args.model) / "heads.safetensors").stat().st_size,
            **score(full, docs, qs, t / "idx-full", args),
        }
        for bits in (int(b) for b in args.bits.split(",") if b):
            packed_dir = pack_phrase_model(
                full, t / f"packed-{bits}", settings=PackSettings(bits=bits, group=args.group)
            )
            model = PhraseEncoder.load(packed_dir)
            variants[f"packed-{bits}bit"] = {
                "bytes": dir_bytes(packed_dir),
                **score(model, docs, qs, t / f"idx-{bits}", args),
            }
    full_em = variants["full"]["gold-passage"]["em"]
    for v in variants.values():
        v["em_loss_vs_full"] = round(full_em - v["gold-passage"]["em"], 2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
