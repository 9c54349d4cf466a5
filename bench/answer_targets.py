"""Answers off Wikipedia, and knowing when they are not there: the answer grain's targets.

Every part asks its questions at the answer grain as a user gets it (``read_passages``:
the reader's default passages and retriever weight; top answer) and judges the answer's
calibrated confidence (``Hit.confidence``) at the reader's default threshold (its
``confidence.json``): below it the answer grain abstains (``abstain_or_answer``).

* ``abstain``: SQuAD v1.1 dev with ``--removed`` (8) of its 48 articles left out of the
  index (chosen by ``--seed``): ALL questions are asked over a phrase index of the other
  articles' paragraphs.  A question of a removed article is wrong by definition.  Reports
  the confidence AUROC (label: exactly right), abstention precision and recall for the
  removed articles' questions, and open EM on the kept articles' questions with and
  without abstaining.
* ``ece``: expected calibration error (10 equal-width bins) of the confidence, and open
  EM, over a phrase index of all 2,067 dev paragraphs (``--dev-index`` or built).
* ``tatqa``: TAT-QA text-span questions (a test set: only evaluated), open EM/F1 over a
  phrase index of its 710 paragraphs, for ``--reader`` and ``--baseline-reader`` in one
  run, and the difference.
* ``v2``: SQuAD v2.0 dev with each question's own paragraph (no retrieval), the empty
  answer below the threshold: HasAns, NoAns and overall EM/F1 (the official definitions).

Indexes (kind phrase, the defaults, one thread) are built under ``--work`` and reused.
``--limit N`` asks N questions of each part (a seeded sample for ``abstain``, the first N
elsewhere); ``--articles M`` keeps only the first M articles (TAT-QA: tables) of each set,
indexes included, for a smoke run.  Prints one JSON document; progress goes to stderr.

    python bench/answer_targets.py [--reader DIR] [--parts abstain,ece,tatqa,v2] \
        [--dev-index /work/runs/sq-new] [--work /tmp/answer-targets] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import build_or_open, log  # noqa: E402
from calibrate_reader import auroc, ece  # noqa: E402

from anygrain import Index, load_questions  # noqa: E402
from anygrain.corpus.lang import detect_lang  # noqa: E402
from anygrain.corpus.questions import Question  # noqa: E402
from anygrain.corpus.store import CorpusStore  # noqa: E402
from anygrain.eval.squad import exact_match, f1, normalize_answer  # noqa: E402
from anygrain.hits.hit import Hit  # noqa: E402
from anygrain.models.shipped import default_reader  # noqa: E402
from anygrain.reader.answering import (  # noqa: E402
    ReadSettings,
    abstain_or_answer,
    answer_hits,
    load_reader_for,
    read_passages,
)
from anygrain.reader.confidence import confidence_for  # noqa: E402
from anygrain.reader.evaluate import describe_reader, gold_hits  # noqa: E402
from anygrain.utils.threads import set_threads  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD = SHARED / "squad-v1.1" / "dev-v1.1.json"
SQUAD_V2 = SHARED / "squad-v2.0" / "dev-v2.0.json"
TATQA = SHARED / "tatqa" / "tatqa-text-span.json"
PARTS = ("abstain", "ece", "tatqa", "v2")
CHUNK = 64  # questions per read_passages call: batches the reader, moves the log


def target(value: float, op: str, bound: float) -> dict[str, Any]:
    met = value >= bound if op == ">=" else value <= bound
    return {"value": round(value, 4), "target": f"{op} {bound}", "met": bool(met)}


def subset(src: Path, articles: int | None, work: Path, name: str) -> Path:
    """``src``, or (``articles``) a copy of its first ``articles`` articles under ``work``."""
    if articles is None:
        return src
    data = json.loads(src.read_text())
    out = work / f"{name}-a{articles}.json"
    if not out.exists():
        work.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**data, "data": data["data"][:articles]}))
    return out


def open_reader(where: Any, name: str | None, runtime: str | None) -> tuple[Any, dict[str, Any]]:
    """The reader ``name`` (None: the one shipped for the corpus language) and its record."""
    if name is None:
        name = default_reader(detect_lang(where.corpus).value)
    model = load_reader_for(where, name, runtime)
    info = describe_reader(name, model)
    info["runtime"] = str(getattr(model, "runtime", "torch"))
    return model, info


def threshold_of(model: Any, info: dict[str, Any]) -> float:
    cal = confidence_for(model)
    if cal is None or cal.threshold is None:
        raise SystemExit(
            f"reader {info['name']}: no confidence calibration with a threshold "
            "(confidence.json); fit one with bench/calibrate_reader.py"
        )
    return float(cal.threshold)


def best_answers(
    index: Index, model: Any, qs: Sequence[Question]
) -> tuple[list[Hit | None], float]:
    """Each question's top answer at the answer grain (None: no span found), and seconds."""
    out: list[Hit | None] = []
    s = ReadSettings()
    t0 = time.perf_counter()
    for b in range(0, len(qs), CHUNK):
        texts = [q.text for q in qs[b : b + CHUNK]]
        out.extend(a[0] if a else None for a in read_passages(index, model, texts, 1, s))
        if (b // CHUNK) % 10 == 9 or b + CHUNK >= len(qs):
            log(f"  read {len(out)}/{len(qs)} ({time.perf_counter() - t0:.0f} s)")
    return out, time.perf_counter() - t0


def confidences(answers: Sequence[Hit | None]) -> np.ndarray:
    # no span at all is no confidence, as abstain_or_answer counts it
    return np.asarray(
        [(a.confidence or 0.0) if a is not None else 0.0 for a in answers], dtype=np.float64
    )


def abstained(answers: Sequence[Hit | None], t: float) -> np.ndarray:
    return np.asarray([not abstain_or_answer([] if a is None else [a], [], t) for a in answers])


def predictions(answers: Sequence[Hit | None]) -> list[str]:
    return ["" if a is None else a.answer_text for a in answers]


def part_abstain(args: argparse.Namespace) -> dict[str, Any]:
    src = subset(SQUAD, args.articles, args.work, "squad-dev")
    data = json.loads(src.read_text())
    arts = data["data"]
    if not 1 <= args.removed < len(arts):
        raise SystemExit(f"--removed {args.removed}: must be in 1..{len(arts) - 1}")
    rng = random.Random(args.seed)
    gone_at = set(rng.sample(range(len(arts)), args.removed))
    kept = [a for i, a in enumerate(arts) if i not in gone_at]
    removed = [a for i, a in enumerate(arts) if i in gone_at]
    gone_ids = {qa["id"] for a in removed for p in a["paragraphs"] for qa in p["qas"]}
    tag = f"abstain-seed{args.seed}-removed{args.removed}" + (
        f"-a{args.articles}" if args.articles else ""
    )
    d = args.work / tag
    d.mkdir(parents=True, exist_ok=True)
    kept_json = d / "kept.json"
    if not kept_json.exists():
        kept_json.write_text(json.dumps({**data, "data": kept}))
    idx = build_or_open(d / "index", f"squad:{kept_json}", "phrase", 1, progress=False)
    qs = list(load_questions(f"squad:{src}"))
    if args.limit is not None and args.limit < len(qs):
        pick = sorted(random.Random(args.seed).sample(range(len(qs)), args.limit))
        qs = [qs[i] for i in pick]
    model, info = open_reader(idx, args.reader, args.runtime)
    t = threshold_of(model, info)
    log(f"abstain: {len(qs)} questions over {len(kept)} articles, threshold {t:.4f}")
    answers, secs = best_answers(idx, model, qs)
    conf = confidences(answers)
    gone = np.asarray([q.id in gone_ids for q in qs])
    em = np.asarray(
        [exact_match(p, q.answers) for p, q in zip(predictions(answers), qs, strict=True)]
    )
    right = (em > 0) & ~gone
    abst = abstained(answers, t)
    caught = float((abst & gone).sum())
    kept_em = 100 * float(em[~gone].mean()) if (~gone).any() else 0.0
    kept_em_abst = 100 * float((em * ~abst)[~gone].mean()) if (~gone).any() else 0.0
    return {
        "reader": info,
        "index": str(idx.path),
        "seed": args.seed,
        "removed_articles": [a["title"] for a in removed],
        "n_questions": len(qs),
        "n_kept_questions": int((~gone).sum()),
        "n_removed_questions": int(gone.sum()),
        "seconds": round(secs, 2),
        "threshold": round(t, 4),
        "auroc": target(auroc(conf, right), ">=", 0.85),
        "abstention_precision": target(caught / max(int(abst.sum()), 1), ">=", 0.8),
        "abstention_recall": round(caught / max(int(gone.sum()), 1), 4),
        "n_abstained": int(abst.sum()),
        "n_kept_abstained": int((abst & ~gone).sum()),
        "kept_em": round(kept_em, 2),
        "kept_em_with_abstention": round(kept_em_abst, 2),
        "kept_em_drop_points": target(kept_em - kept_em_abst, "<=", 2.0),
    }


def part_ece(args: argparse.Namespace) -> dict[str, Any]:
    src = subset(SQUAD, args.articles, args.work, "squad-dev")
    if args.dev_index is not None:
        idx = Index.load(args.dev_index)
    else:
        name = "squad-dev" + (f"-a{args.articles}" if args.articles else "")
        idx = build_or_open(args.work / name, f"squad:{src}", "phrase", 1, progress=False)
    qs = list(load_questions(f"squad:{src}", limit=args.limit))
    model, info = open_reader(idx, args.reader, args.runtime)
    t = threshold_of(model, info)
    log(f"ece: {len(qs)} questions over {idx.path}")
    answers, secs = best_answers(idx, model, qs)
    conf = confidences(answers)
    right = np.asarray(
        [exact_match(p, q.answers) > 0 for p, q in zip(predictions(answers), qs, strict=True)]
    )
    abst = abstained(answers, t)
    return {
        "reader": info,
        "index": str(idx.path),
        "n_questions": len(qs),
        "seconds": round(secs, 2),
        "ece_10": target(ece(conf, right), "<=", 0.05),
        "em": round(100 * float(right.mean()), 2),
        "mean_confidence": round(float(conf.mean()), 4),
        "auroc": round(auroc(conf, right), 4),
        "threshold": round(t, 4),
        "n_abstained": int(abst.sum()),
        "answered_em": round(100 * float(right[~abst].mean()), 2) if (~abst).any() else None,
    }


def part_tatqa(args: argparse.Namespace) -> dict[str, Any]:
    src = subset(TATQA, args.articles, args.work, "tatqa")
    name = "tatqa" + (f"-a{args.articles}" if args.articles else "")
    idx = build_or_open(args.work / name, f"squad:{src}", "phrase", 1, progress=False)
    qs = [q for q in load_questions(f"squad:{src}", limit=args.limit) if q.answers]
    out: dict[str, Any] = {"index": str(idx.path), "n_questions": len(qs)}
    for role, reader in (("reader", args.reader), ("baseline", args.baseline_reader)):
        model, info = open_reader(idx, reader, args.runtime)
        log(f"tatqa {role} {info['name']}: {len(qs)} questions")
        answers, secs = best_answers(idx, model, qs)
        preds = predictions(answers)
        out[role] = {
            "reader": info,
            "seconds": round(secs, 2),
            "em": round(100 * sum(map(exact_match, preds, [q.answers for q in qs])) / len(qs), 2),
            "f1": round(100 * sum(map(f1, preds, [q.answers for q in qs])) / len(qs), 2),
        }
    out["em_gain_points"] = target(out["reader"]["em"] - out["baseline"]["em"], ">=", 8.0)
    out["f1_gain_points"] = round(out["reader"]["f1"] - out["baseline"]["f1"], 2)
    return out


def part_v2(args: argparse.Namespace) -> dict[str, Any]:
    src = subset(SQUAD_V2, args.articles, args.work, "squad-v2-dev")
    where = args.work / ("squad-v2-corpus" + (f"-a{args.articles}" if args.articles else ""))
    if (where / "corpus.json").exists():
        store = CorpusStore(where)
    else:
        log(f"building corpus store {where}")
        store = CorpusStore.build(f"squad:{src}", where, progress=False)
    qs = list(load_questions(f"squad:{src}", limit=args.limit))
    hits, missing = gold_hits(store, qs)
    model, info = open_reader(SimpleNamespace(corpus=store), args.reader, args.runtime)
    t = threshold_of(model, info)
    log(f"v2: {len(qs)} questions with their own paragraph, threshold {t:.4f}")
    answers: list[Hit | None] = []
    t0 = time.perf_counter()
    s = ReadSettings()
    for b in range(0, len(qs), CHUNK):
        texts = [q.text for q in qs[b : b + CHUNK]]
        answers.extend(
            a[0] if a else None for a in answer_hits(model, texts, hits[b : b + CHUNK], 1, s)
        )
        if (b // CHUNK) % 10 == 9 or b + CHUNK >= len(qs):
            log(f"  read {len(answers)}/{len(qs)} ({time.perf_counter() - t0:.0f} s)")
    secs = time.perf_counter() - t0
    abst = abstained(answers, t)
    always = predictions(answers)
    preds = ["" if a else p for p, a in zip(always, abst, strict=True)]
    has = np.asarray([bool(q.answers) for q in qs])

    def scores(ps: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # the official v2 scores: an unanswerable question is right iff the answer is empty
        em = [
            exact_match(p, q.answers) if q.answers else float(not normalize_answer(p))
            for p, q in zip(ps, qs, strict=True)
        ]
        f = [
            f1(p, q.answers) if q.answers else float(not normalize_answer(p))
            for p, q in zip(ps, qs, strict=True)
        ]
        return 100 * np.asarray(em, dtype=np.float64), 100 * np.asarray(f, dtype=np.float64)

    def mean(x: np.ndarray) -> float | None:
        return round(float(x.mean()), 2) if len(x) else None

    em, f = scores(preds)
    em_all, f_all = scores(always)
    return {
        "reader": info,
        "n_questions": len(qs),
        "n_has_answer": int(has.sum()),
        "n_no_answer": int((~has).sum()),
        "n_missing_gold": missing,
        "seconds": round(secs, 2),
        "threshold": round(t, 4),
        "n_abstained": int(abst.sum()),
        "HasAns_exact": mean(em[has]),
        "HasAns_f1": mean(f[has]),
        "NoAns_exact": mean(em[~has]),
        "NoAns_f1": mean(f[~has]),
        "exact": mean(em),
        "f1": mean(f),
        "always_answering": {
            "HasAns_exact": mean(em_all[has]),
            "HasAns_f1": mean(f_all[has]),
            "exact": mean(em_all),
            "f1": mean(f_all),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reader", help="reader directory or shipped name (default: shipped)")
    ap.add_argument("--baseline-reader", default="reader-minilm", help="tatqa: compared with")
    ap.add_argument("--runtime", help="auto | onnx | torch (default: auto)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    ap.add_argument("--limit", type=int, help="questions asked per part (smoke runs)")
    ap.add_argument("--articles", type=int, help="first articles of each set only (smoke runs)")
    ap.add_argument("--seed", type=int, default=0, help="abstain: which articles are removed")
    ap.add_argument("--removed", type=int, default=8, help="abstain: articles left out")
    ap.add_argument("--dev-index", type=Path, help="ece: a phrase index of SQuAD dev")
    ap.add_argument("--work", type=Path, default=Path("/tmp/answer-targets"))
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise SystemExit(f"--parts: {','.join(bad) or 'none'} not of {','.join(PARTS)}")
    for opt in ("limit", "articles"):
        if getattr(args, opt) is not None and getattr(args, opt) < 1:
            raise SystemExit(f"--{opt} must be at least 1")
    set_threads(1)
    out: dict[str, Any] = {"command": " ".join(sys.argv), "threads": 1}
    run = {"abstain": part_abstain, "ece": part_ece, "tatqa": part_tatqa, "v2": part_v2}
    for p in parts:
        t0 = time.perf_counter()
        out[p] = run[p](args)
        out[p]["part_seconds"] = round(time.perf_counter() - t0, 1)
        log(f"{p}: {json.dumps(out[p])}")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
