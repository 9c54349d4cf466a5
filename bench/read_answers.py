"""Retrieve, then read: the answer grain's settings and targets, as JSON.

``tune`` chooses how many passages to read (K) and the retriever's weight on HELD-OUT
TRAINING articles (``bench/squad_holdout.py``'s validation.json), never on a test set:
each question's top ``--depth`` passages are retrieved and read once, then every
(K, weight) pair is scored from the same span candidates.

``eval`` measures the issue's targets on SQuAD v1.1 dev (all 10,570 questions unless
``--limit``): the reader with the gold passage, XQuAD en with the gold passage,
retrieve-then-read over the default phrase index of the 2,067 dev paragraphs (EM/F1 at
each K read), the answer grain's throughput through the public API on one thread
(batch), and the demo's ten questions.

    python bench/read_answers.py tune --reader DIR --index VAL_PHRASE_IDX \
        --questions squad:/work/runs/split/validation.json [--bm25 VAL_BM25_IDX]
    python bench/read_answers.py eval --reader DIR --index SQ_DEV_PHRASE_IDX [--limit N]

``zh`` measures the Chinese targets: the reader with the gold passage on CMRC 2018 dev and
XQuAD zh, and retrieve-then-read over one phrase index of both files' 1,088 paragraphs
(``bench/chinese.py``'s corpus), for all 4,409 questions, beside the phrase grain alone:

    python bench/read_answers.py zh --index ZH_PHRASE_IDX [--reader DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from anygrain import Index, load_questions
from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Unit
from anygrain.reader.answering import ReadSettings, combine, load_reader_for, span_candidates
from anygrain.reader.evaluate import evaluate_reader
from anygrain.utils.precision import native_bf16

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WEIGHTS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0]
KS = [1, 2, 3, 5, 8, 10]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def device() -> dict[str, Any]:
    return {
        "cpu": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "native_bf16": native_bf16(),
    }


def grid(reader: Any, index: Index, questions: Any, depth: int, limit: int | None) -> dict:
    qs = [q for q in questions if q.answers][:limit]
    t0 = time.time()
    hits = []
    for b in range(0, len(qs), 256):
        hits += index.search(
            [q.text for q in qs[b : b + 256]], depth, **index.unit_options(Unit.PASSAGE)
        )
    log(f"retrieved {len(qs)} questions in {time.time() - t0:.0f} s")
    s = ReadSettings(passages=depth)
    cands: list[Any] = []
    t1 = time.time()
    for b in range(0, len(qs), 32):
        cands += span_candidates(reader, [q.text for q in qs[b : b + 32]], hits[b : b + 32], s)
    log(f"read {len(qs)} x {depth} passages in {time.time() - t1:.0f} s")
    rows = {}
    for k in KS:
        if k > depth:
            continue
        for w in WEIGHTS:
            em = f = 0.0
            for q, c, h in zip(qs, cands, hits, strict=True):
                found = combine(c, h, 1, passages=k, retriever_weight=w)
                pred = found[0].answer_text if found else ""
                em += exact_match(pred, q.answers)
                f += f1(pred, q.answers)
            rows[f"K={k},w={w}"] = {
                "K": k,
                "weight": w,
                "em": round(100 * em / len(qs), 2),
                "f1": round(100 * f / len(qs), 2),
            }
    best = max(rows.values(), key=lambda r: (r["em"], r["f1"]))
    return {"questions": len(qs), "depth": depth, "best": best, "grid": list(rows.values())}


def cmd_tune(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    qs = load_questions(args.questions)
    out: dict[str, Any] = {"command": " ".join(sys.argv), "device": device(), "set": args.questions}
    for name, path in (("phrase", args.index), ("bm25", args.bm25)):
        if path is None:
            continue
        idx = Index.load(path)
        reader = load_reader_for(idx, args.reader)
        out[name] = grid(reader, idx, qs, args.depth, args.limit)
        log(f"{name}: best {out[name]['best']}")
    print(json.dumps(out, indent=1))


def gold(reader: str | None, spec: str, limit: int | None, threads: int) -> dict:
    from anygrain.api import evaluate_reader as api_eval

    r = api_eval(
        spec, reader, None, gold_passage=True, corpus=spec, limit=limit, threads=threads,
        progress=False,
    )  # fmt: skip
    return {k: r[k] for k in ("n_evaluated", "em", "f1", "questions_per_second")}


def demo(reader_name: str | None, work: Path) -> dict:
    from anygrain.api import run_demo

    res = run_demo(work, progress=False, read=True, reader=reader_name)
    rows = []
    for a in res.answers:
        h = a.hits.get(Unit.ANSWER, [])
        pred = h[0].answer_text if h else ""
        sent = h[0].text[h[0].sentence[0] : h[0].sentence[1]] if h and h[0].sentence else ""
        rows.append(
            {
                "question": a.question.text,
                "answer": pred,
                "gold": a.question.answers,
                "exact": bool(exact_match(pred, a.question.answers)),
                "sentence": sent,
            }
        )
    return {"exact": sum(r["exact"] for r in rows), "of": len(rows), "answers": rows}


def cmd_eval(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    dev = f"squad:{SHARED / 'squad-v1.1' / 'dev-v1.1.json'}"
    out: dict[str, Any] = {"command": " ".join(sys.argv), "device": device()}
    idx = Index.load(args.index)
    reader = load_reader_for(idx, args.reader)
    if "gold" in args.parts:
        log("gold passage, SQuAD dev")
        # by name: the report names the reader it read with
        out["squad_dev_gold"] = gold(args.reader, dev, args.limit, args.threads)
        log(f"{out['squad_dev_gold']}")
        xq = f"squad:{SHARED / 'xquad' / 'xquad.en.json'}"
        out["xquad_en_gold"] = gold(args.reader, xq, None, args.threads)
        log(f"{out['xquad_en_gold']}")
    if "open" in args.parts:
        log("retrieve-then-read, SQuAD dev paragraphs")
        qs = load_questions(dev, limit=args.limit)
        r = evaluate_reader(
            idx, reader, list(qs), k=args.k, at=[c for c in (1, 2, 3, 5) if c < args.k]
        )
        out["squad_dev_open"] = {
            k: v for k, v in r.items() if k not in ("per_question",) and not k.endswith("seconds")
        }
        log(f"{out['squad_dev_open']}")
    if "speed" in args.parts:
        from anygrain.api import search_questions

        qs = load_questions(dev, limit=args.speed_questions)
        t0 = time.perf_counter()
        n = sum(1 for _ in search_questions(idx, qs, 1, unit="answer", reader=reader, chunk=64))
        dt = time.perf_counter() - t0
        t1 = time.perf_counter()  # the same questions at the index's own grain: the baseline
        sum(1 for _ in search_questions(idx, qs, 1, chunk=64))
        base = time.perf_counter() - t1
        out["answer_grain_speed"] = {
            "questions": n,
            "seconds": round(dt, 2),
            "questions_per_second": round(n / dt, 2),
            "same_run_default_grain_questions_per_second": round(n / base, 2),
            "threads": args.threads,
        }
        log(f"{out['answer_grain_speed']}")
    if "demo" in args.parts:
        out["demo"] = demo(args.reader, Path(args.demo_dir))
        log(f"demo {out['demo']['exact']}/{out['demo']['of']}")
    print(json.dumps(out, indent=1))


def cmd_zh(args: argparse.Namespace) -> None:
    from anygrain.corpus.questions import Questions

    torch.set_num_threads(args.threads)
    files = {
        "cmrc2018_dev": f"squad:{SHARED / 'cmrc2018' / 'cmrc2018_dev.json'}",
        "xquad_zh": f"squad:{SHARED / 'xquad' / 'xquad.zh.json'}",
    }
    out: dict[str, Any] = {"command": " ".join(sys.argv), "device": device()}
    idx = Index.load(args.index)
    reader = load_reader_for(idx, args.reader)
    items = []
    for name, spec in files.items():
        if "gold" in args.parts:
            out[f"{name}_gold"] = gold(reader, spec, args.limit, args.threads)
            log(f"{name} gold {out[f'{name}_gold']}")
        for q in load_questions(spec, limit=args.limit):
            q.id = f"{name}/{q.id}"  # ids repeat across the two files
            items.append(q)
    if "open" in args.parts:
        qs = [q for q in Questions(items) if q.answers]
        r = evaluate_reader(idx, reader, qs, k=args.k, at=[c for c in (1, 2, 3, 5) if c < args.k])
        out["open"] = {k: v for k, v in r.items() if not k.endswith("seconds")}
        found = idx.search([q.text for q in qs], 1, unit="phrase")
        texts = [h[0].answer_text if h else "" for h in found]
        out["open_phrase_alone"] = {
            "em": sum(exact_match(t, q.answers) for t, q in zip(texts, qs, strict=True)) / len(qs),
            "f1": sum(f1(t, q.answers) for t, q in zip(texts, qs, strict=True)) / len(qs),
        }
        log(f"open {out['open']} phrase alone {out['open_phrase_alone']}")
    print(json.dumps(out, indent=1, ensure_ascii=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--reader")
    t.add_argument("--index", required=True)
    t.add_argument("--bm25")
    t.add_argument("--questions", required=True)
    t.add_argument("--depth", type=int, default=10)
    t.add_argument("--limit", type=int)
    t.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("eval")
    e.add_argument("--reader")
    e.add_argument("--index", required=True)
    e.add_argument("--k", type=int, default=None)
    e.add_argument("--limit", type=int)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--speed-questions", type=int, default=500)
    e.add_argument("--demo-dir", default="/tmp/anygrain-demo-bench")
    e.add_argument("--parts", default="gold,open,speed,demo")
    z = sub.add_parser("zh")
    z.add_argument("--reader")
    z.add_argument("--index", required=True)
    z.add_argument("--k", type=int, default=None)
    z.add_argument("--limit", type=int)
    z.add_argument("--threads", type=int, default=1)
    z.add_argument("--parts", default="gold,open")
    args = ap.parse_args()
    if args.cmd == "tune":
        cmd_tune(args)
    elif args.cmd == "zh":
        from anygrain.reader.answering import DEFAULT_PASSAGES

        args.k = args.k or DEFAULT_PASSAGES
        args.parts = args.parts.split(",")
        cmd_zh(args)
    else:
        from anygrain.reader.answering import DEFAULT_PASSAGES

        args.k = args.k or DEFAULT_PASSAGES
        args.parts = args.parts.split(",")
        cmd_eval(args)


if __name__ == "__main__":
    main()
