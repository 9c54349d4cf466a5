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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phrase-model", required=True, help="Chinese phrase model directory")
    ap.add_argument("--dpr", required=True, help="me5-small DPR model fine-tuned on Chinese")
    ap.add_argument("--work", required=True, type=Path, help="where the indexes go")
    ap.add_argument("--depth", type=int, default=100, help="hybrid candidates per system")
    ap.add_argument("--limit", type=int, default=None, help="questions per source (smoke runs)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)

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
    dpr = build_or_open(args.work / "dpr", src, "dense", args.threads, model=args.dpr)
    phrase = build_or_open(
        args.work / "phrase", src, "phrase", args.threads, model=args.phrase_model
    )
    assert isinstance(bm25, BM25Index) and isinstance(phrase, PhraseIndex)
    assert isinstance(me5, DenseIndex) and isinstance(dpr, DenseIndex)
    depth = args.depth

    rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows["bm25"] = bm25.search_rows(texts, depth)
    qv = {"me5": me5.encode_queries(texts), "dpr": dpr.encode_queries(texts)}
    rows["me5"] = me5.search_vectors(qv["me5"], depth)
    rows["dpr"] = dpr.search_vectors(qv["dpr"], depth)
    qs_p, qe_p = phrase.encode_queries(texts)
    pr, ps, stats = phrase_passage_rows(phrase, qs_p, qe_p)
    rows["phrase"] = (pr, ps)
    log("rankings done")

    def scores_of(name: str, cand: np.ndarray) -> np.ndarray:
        if name == "bm25":
            return bm25.score_rows(texts, cand)
        if name == "phrase":
            return phrase.score_rows(qs_p, qe_p, cand)
        idx = me5 if name == "me5" else dpr
        return idx.score_rows(qv[name], cand)

    for a, b in (("bm25", "me5"), ("bm25", "dpr"), ("bm25", "phrase"), ("dpr", "phrase")):
        cand = union_candidates(rows[a][0], rows[b][0])
        rows[f"{a}+{b}"] = fuse(cand, scores_of(a, cand), scores_of(b, cand))
    log("hybrids done")

    passage: dict[str, Any] = {}
    cmrc_only: dict[str, Any] = {}
    for name, (r, s) in rows.items():
        passage[name] = passage_metrics(store, qs, r, s)
        cmrc_only[name] = passage_metrics(store, cmrc, r[is_cmrc], s[is_cmrc])

    phrase_em: dict[str, Any] = {}
    for name, qset in (("all", qs), ("cmrc2018_dev", cmrc)):
        gold = evaluate_index(phrase, qset, scope="gold-passage", progress=False)
        open_ = evaluate_index(phrase, qset, progress=False)
        g, o = 100 * gold.metrics["em"], 100 * open_.metrics["em"]
        phrase_em[name] = {
            "gold_passage": {"em": round(g, 2), "f1": round(100 * gold.metrics["f1"], 2)},
            "open_corpus": {"em": round(o, 2), "f1": round(100 * open_.metrics["f1"], 2)},
            "open_over_gold": round(o / g, 4) if g else None,
        }
    log("phrase EM done")

    g_em = phrase_em["all"]["gold_passage"]["em"]
    ratio = phrase_em["all"]["open_over_gold"] or 0.0
    hyb = max(cmrc_only["bm25+me5"]["top@1"], cmrc_only["bm25+dpr"]["top@1"])
    targets = {
        "hybrid_top1_cmrc_dev": {"value": hyb, "target": 0.96, "gap": round(hyb - 0.96, 4)},
        "phrase_gold_em": {"value": g_em, "target": 40.0, "gap": round(g_em - 40.0, 2)},
        "phrase_open_over_gold": {"value": ratio, "target": 0.75, "gap": round(ratio - 0.75, 4)},
        "phrase_top5_vs_me5_top5": {
            "value": passage["phrase"]["top@5"],
            "target": passage["me5"]["top@5"],
            "gap": round(passage["phrase"]["top@5"] - passage["me5"]["top@5"], 4),
        },
    }
    encode: dict[str, Any] = {"me5_passages_per_s": None}
    if fresh_me5:
        encode["me5_passages_per_s"] = round(len(store) / me5_s, 2)
        encode["note"] = "index build time, model loading included"
    counts = phrase.manifest.get("counts", {})
    out = {
        "questions": {"all": len(qs), "cmrc2018_dev": len(cmrc)},
        "passages": len(store),
        "phrase_model": str(args.phrase_model),
        "dpr_model": str(args.dpr),
        "phrase_bytes_per_passage": counts.get("bytes_per_passage"),
        "passage": passage,
        "passage_cmrc2018_dev": cmrc_only,
        "phrase_em": phrase_em,
        "unit_search_mean_rounds": round(float(np.mean([s.rounds for s in stats])), 4),
        "encoding": encode,
        "threads": args.threads,
        "targets": targets,
    }
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
