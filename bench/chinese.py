"""Chinese passage and phrase retrieval: BM25, me5-small zero-shot and fine-tuned, hybrids,
and the Chinese phrase model, on CMRC 2018 dev + XQuAD zh.

The test corpus is one corpus of CMRC 2018 dev (848 paragraphs, 3,219 questions) and XQuAD zh
(240 paragraphs, 1,190 questions): 1,088 paragraphs, never trained on.  Every system searches
all of it for all 4,409 questions.

Systems:

* ``bm25``: BM25 with jieba (the corpus language is detected as zh);
* ``me5``: dense, ``me5-small`` zero-shot;
* ``dpr``: dense, ``--dpr`` (``anygrain train dpr`` from me5-small on Chinese training data);
* ``phrase``: passages ranked by their best phrase in the phrase index of ``--phrase-model``;
* hybrids: z-score fusion of exact scores over the union of both systems' top ``--depth``
  (``bm25+me5``, ``bm25+dpr``, ``bm25+phrase``).

Passage top@1/5/20 and mrr@20 judge a hit by answer containment (DPR's rule, with each Chinese
character a token), for all questions and for CMRC dev alone (issue 17's hybrid target is on
CMRC dev).  Phrase EM/F1 follow the CMRC 2018 official script (character level) for each
question's own paragraph (D = {p}) and for the whole corpus.  Encoding speed is passages/s of
``me5-small`` while building the zero-shot index on this machine.  One JSON object is printed;
``targets`` gives issue 17's targets and the gap to each.

    python bench/chinese.py --phrase-model runs/phrase-me5-zh --dpr runs/dpr-me5-zh \
        --work runs/zh-bench [--threads 2] [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import build_or_open, fuse, log, passage_metrics, phrase_passage_rows

from anygrain.api import evaluate_index, load_questions
from anygrain.composite.fusion import union_candidates
from anygrain.corpus.formats import parse_source
from anygrain.corpus.questions import Questions
from anygrain.corpus.store import CorpusStore
from anygrain.dense.index import DenseIndex
from anygrain.errors import ErrorLog
from anygrain.phrase.index import PhraseIndex
from anygrain.sparse.bm25 import BM25Index
from anygrain.utils.threads import set_threads

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SOURCES = {
    "cmrc2018_dev": f"squad:{DATA / 'cmrc2018' / 'cmrc2018_dev.json'}",
    "xquad_zh": f"squad:{DATA / 'xquad' / 'xquad.zh.json'}",
}


def corpus_store(out: Path) -> CorpusStore:
    """One corpus of both files' paragraphs (built once, reused)."""
    if out.exists():
        return CorpusStore(out)
    errors = ErrorLog()
    docs = itertools.chain.from_iterable(
        parse_source(s).documents(errors) for s in SOURCES.values()
    )
    return CorpusStore.build(docs, out, progress=False, errors=errors)


def parse_models(specs: list[str]) -> dict[str, str]:
    """``NAME=DIR`` (or a bare ``DIR``, named ``phrase``) for each ``--phrase-model``."""
    out: dict[str, str] = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        out[name or "phrase"] = path
    return out


def phrase_em_rows(
    phrase: PhraseIndex, qs: Questions, is_cmrc: np.ndarray, max_words: int | None = None
) -> dict[str, dict[str, Any]]:
    """EM/F1 (CMRC character level) with the gold passage, and over the whole corpus by
    dense scores alone and by fused scores, for all questions and for CMRC dev alone
    (``max_words``: the longest phrase, default the index's)."""
    opts: dict[str, Any] = {} if max_words is None else {"max_words": max_words}
    reports = {
        "gold_passage": evaluate_index(
            phrase, qs, scope="gold-passage", progress=False, search_options=opts or None
        ),
        "open_dense": evaluate_index(
            phrase, qs, progress=False, search_options={"sparse_weight": 0.0, **opts}
        ),
    }
    if phrase.fusion is not None:
        reports["open_fused"] = evaluate_index(
            phrase, qs, progress=False, search_options=opts or None
        )
    cmrc_ids = {q.id for q, c in zip(qs, is_cmrc, strict=True) if c}
    out: dict[str, dict[str, Any]] = {"all": {}, "cmrc2018_dev": {}}
    for setting, rep in reports.items():
        out["all"][setting] = {k: round(100 * rep.metrics[k], 2) for k in ("em", "f1")}
        sub = [v for qid, v in rep.per_question.items() if qid in cmrc_ids]
        out["cmrc2018_dev"][setting] = {
            k: round(100 * float(np.mean([v[k] for v in sub])), 2) if sub else None
            for k in ("em", "f1")
        }
        out["all"][setting]["qps"] = rep.queries_per_second and round(rep.queries_per_second, 1)
    for part in out.values():
        g = part["gold_passage"]["em"]
        best = part.get("open_fused", part["open_dense"])["em"]
        part["open_over_gold"] = round(best / g, 4) if g else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--phrase-model",
        action="append",
        default=[],
        help="NAME=DIR of a Chinese phrase model (repeatable: one row per model)",
    )
    ap.add_argument("--dpr", default=None, help="me5-small DPR model fine-tuned on Chinese")
    ap.add_argument("--work", required=True, type=Path, help="where the indexes go")
    ap.add_argument("--depth", type=int, default=100, help="hybrid candidates per system")
    ap.add_argument("--limit", type=int, default=None, help="questions per source (smoke runs)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--max-words",
        type=int,
        default=None,
        help="longest phrase searched (default: each index's; chosen on training data with "
        "bench/search_settings.py)",
    )
    ap.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="an earlier run's JSON (this script's output): its phrase rows are carried "
        "into 'reported' for comparison, marked as not measured in this run",
    )
    args = ap.parse_args()
    set_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    models = parse_models(args.phrase_model)

    store = corpus_store(args.work / "corpus")
    per_source = {name: load_questions(s, limit=args.limit) for name, s in SOURCES.items()}
    # ids could repeat across the two files: prefix them by source
    items = []
    for name, qs_ in per_source.items():
        for q in qs_:
            q.id = f"{name}/{q.id}"
            items.append(q)
    qs = Questions(items, source="cmrc2018_dev+xquad_zh")
    texts = qs.texts
    is_cmrc = np.array([q.id.startswith("cmrc2018_dev/") for q in qs])
    cmrc = Questions([q for q in qs if q.id.startswith("cmrc2018_dev/")])
    log(f"{len(qs)} questions, {len(store)} passages")

    src = store.path
    bm25 = build_or_open(args.work / "bm25", src, "bm25", args.threads)
    t = time.perf_counter()
    fresh_me5 = not (args.work / "me5" / "index.json").exists()
    me5 = build_or_open(args.work / "me5", src, "dense", args.threads, model="me5-small")
    me5_s = time.perf_counter() - t
    assert isinstance(bm25, BM25Index) and isinstance(me5, DenseIndex)
    dense: dict[str, DenseIndex] = {"me5": me5}
    if args.dpr:
        dpr = build_or_open(args.work / "dpr", src, "dense", args.threads, model=args.dpr)
        assert isinstance(dpr, DenseIndex)
        dense["dpr"] = dpr
    phrases: dict[str, PhraseIndex] = {}
    build_s: dict[str, float] = {}
    for name, path in models.items():
        t = time.perf_counter()
        idx = build_or_open(args.work / f"phrase-{name}", src, "phrase", args.threads, model=path)
        build_s[name] = round(time.perf_counter() - t, 1)
        assert isinstance(idx, PhraseIndex)
        phrases[name] = idx
    depth = args.depth

    rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows["bm25"] = bm25.search_rows(texts, depth)
    qv = {name: idx.encode_queries(texts) for name, idx in dense.items()}
    for name, idx in dense.items():
        rows[name] = idx.search_vectors(qv[name], depth)
    qp: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, idx in phrases.items():
        qp[name] = idx.encode_queries(texts)
        r, s, _ = phrase_passage_rows(idx, *qp[name], max_words=args.max_words)
        rows[f"{name}_dense"] = (r, s)
        fusion = idx.search_fusion(None)
        if fusion is not None and idx.lexical is not None:
            lex = idx.lexical.queries(texts, fusion)
            r, s, _ = phrase_passage_rows(
                idx, *qp[name], lexical=lex, fusion=fusion, max_words=args.max_words
            )
            rows[f"{name}_fused"] = (r, s)
    log("rankings done")

    def scores_of(name: str, cand: np.ndarray) -> np.ndarray:
        if name == "bm25":
            return bm25.score_rows(texts, cand)
        return dense[name].score_rows(qv[name], cand)

    for b in dense:
        cand = union_candidates(rows["bm25"][0], rows[b][0])
        rows[f"bm25+{b}"] = fuse(cand, scores_of("bm25", cand), scores_of(b, cand))
    log("hybrids done")

    passage: dict[str, Any] = {}
    cmrc_only: dict[str, Any] = {}
    for name, (r, s) in rows.items():
        passage[name] = passage_metrics(store, qs, r, s)
        cmrc_only[name] = passage_metrics(store, cmrc, r[is_cmrc], s[is_cmrc])

    phrase_em = {
        name: phrase_em_rows(idx, qs, is_cmrc, args.max_words) for name, idx in phrases.items()
    }
    log("phrase EM done")

    targets: dict[str, Any] = {}
    if phrases:
        first = next(iter(phrases))
        em = phrase_em[first]["all"]
        g = em["gold_passage"]["em"]
        ratio = em["open_over_gold"] or 0.0
        top1 = passage.get(f"{first}_fused", passage[f"{first}_dense"])["top@1"]
        targets = {
            "model": first,
            "phrase_gold_em": {"value": g, "target": 35.0, "gap": round(g - 35.0, 2)},
            "open_over_gold": {"value": ratio, "target": 0.85, "gap": round(ratio - 0.85, 4)},
            "fused_passage_top1": {
                "value": top1,
                "target": 0.97,
                "gap": round(top1 - 0.97, 4),
            },
        }
    encode: dict[str, Any] = {"me5_passages_per_s": None}
    if fresh_me5:
        encode["me5_passages_per_s"] = round(len(store) / me5_s, 2)
        encode["note"] = "index build time, model loading included"
    out: dict[str, Any] = {
        "questions": {"all": len(qs), "cmrc2018_dev": len(cmrc)},
        "passages": len(store),
        "phrase_models": models,
        "dpr_model": args.dpr,
        "phrase_bytes_per_passage": {
            n: idx.manifest.get("counts", {}).get("bytes_per_passage") for n, idx in phrases.items()
        },
        "phrase_build_seconds": build_s,
        "passage": passage,
        "passage_cmrc2018_dev": cmrc_only,
        "phrase_em": phrase_em,
        "encoding": encode,
        "threads": args.threads,
        "max_words": args.max_words or {n: idx.max_words for n, idx in phrases.items()},
        "targets": targets,
    }
    if args.reference:
        ref = json.loads(args.reference.read_text(encoding="utf-8"))
        out["reported"] = {
            "source": str(args.reference),
            "note": "copied from an earlier run, not measured here",
            "phrase_em": ref.get("phrase_em"),
            "passage_phrase": {k: v for k, v in ref.get("passage", {}).items() if "phrase" in k},
        }
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
