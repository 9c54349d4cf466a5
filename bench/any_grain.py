"""Any grain from one phrase index, against DPR, BM25 and hybrids, on SQuAD v1.1 dev.

The question the benchmark answers is the one of "Phrase Retrieval Learns Passage Retrieval,
Too" (Lee, Wettig, Chen 2021): does one phrase index, scoring a passage (sentence, document) by
its best phrase, retrieve passages as well as a passage retriever trained on the same data with
the same backbone?

Systems, all over the same corpus store (the phrase index's), all questions of the file:

* ``phrase``: the phrase index, units ranked by their best phrase (``search_units``, with its
  deeper retries when the phrases found cover fewer than k units);
* ``dpr``: a dense index encoded with ``--dpr`` (a model from ``anygrain train dpr``);
* ``bm25``: BM25 over title + text;
* hybrids: z-score fusion of exact scores over the union of each system's top ``--depth``
  passages: ``bm25+dpr`` (the project's best passage hybrid), ``bm25+phrase`` and
  ``dpr+phrase``; a phrase score of a candidate passage is its best phrase
  (``PhraseIndex.score_rows``).

Grains and how a hit is judged:

* passage: top@1/5/20 and mrr@20, a hit relevant when it contains an answer string (DPR's rule,
  as every passage table in docs/benchmarks.md);
* document (the Wikipedia article): top@1/5 and R-precision with the article of the question's
  gold paragraph as the one relevant document (so R = 1 and R-precision equals precision@1 --
  both are printed, computed by the library's metrics); passage systems rank articles by their
  best passage;
* sentence (phrase index only): top@1 when the first sentence is the gold paragraph's sentence
  holding the gold answer's first character, and top@1 by answer containment;
* phrase: EM/F1 of the top phrase with D = {p} (each question's own paragraph) and over the
  whole corpus, and their ratio (how well scores compare across passages).

(Named ``any_grain.py``, not ``anygrain.py``: a file of the package's name in bench/ would be
imported instead of the package by every script there.)

Speed: questions/s of the phrase index's passage search from encoded questions, and of
question encoding, on this machine.  Prints one JSON object; the ``targets`` block gives
the phrase-quality targets and the gap to each.  Phrase rows come twice: ``phrase_fused``
(BM25 fused into phrase scores, the index's default) and ``phrase`` (the dense score alone,
``--sparse-weight 0``); ``--ablation`` copies recipe tables from bench/phrase_validation.py.

    python bench/any_grain.py --phrase-index runs/sq-phrase --dpr runs/dpr-full \
        --work runs/grain-bench [--limit N] [--threads 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import build_or_open, fuse, log, passage_metrics, phrase_passage_rows, rounded

from anygrain import Index
from anygrain.api import evaluate_index, load_questions
from anygrain.composite.fusion import union_candidates
from anygrain.corpus.questions import Questions
from anygrain.dense.index import DenseIndex
from anygrain.eval import evaluate_run
from anygrain.eval.answers import has_answer
from anygrain.hits.hit import Hit, Unit
from anygrain.index.scope import gold_rows
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.search import sentence_of
from anygrain.sparse.bm25 import BM25Index
from anygrain.utils.threads import set_threads

ROOT = Path(__file__).resolve().parents[1]
SQUAD_DEV = ROOT.parent / "shared" / "data" / "squad-v1.1" / "dev-v1.1.json"


def _docs_of_rows(doc_of: np.ndarray, rows: np.ndarray, k: int) -> list[list[str]]:
    """Per question, articles in the order of their best passage (first occurrence)."""
    out: list[list[str]] = []
    for r in rows.tolist():
        seen: list[str] = []
        for x in r:
            if x >= 0 and doc_of[x] not in seen:
                seen.append(str(doc_of[x]))
                if len(seen) == k:
                    break
        out.append(seen)
    return out


def document_metrics(
    qs: Questions, gold_doc: list[str], ranked: list[list[str]]
) -> dict[str, float]:
    """top@1/5 and R-precision with the gold article as the one relevant document: documents
    become hits whose passage id is the article id, questions carry qrels on articles."""
    judged = [
        dataclasses.replace(q, answers=[], gold=[], qrels={g: 1}, context=None)
        for q, g in zip(qs, gold_doc, strict=True)
    ]
    run = {
        q.id: [Hit(Unit.DOCUMENT, float(-i), -1, d, d, "", "") for i, d in enumerate(docs)]
        for q, docs in zip(judged, ranked, strict=True)
    }
    rep = evaluate_run(run, Questions(judged), ["top@1", "top@5", "rprec"])
    return rounded(rep.metrics)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phrase-index", required=True, type=Path)
    ap.add_argument("--dpr", required=True, help="DPR model directory (same backbone)")
    ap.add_argument("--work", required=True, type=Path, help="where BM25 and DPR indexes go")
    ap.add_argument("--questions", default=f"squad:{SQUAD_DEV}")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--depth", type=int, default=100, help="hybrid candidates per system")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--ablation",
        type=Path,
        action="append",
        default=[],
        help="JSON from bench/phrase_validation.py (recipes scored on held-out training "
        "passages), copied into the output's ablation table",
    )
    ap.add_argument(
        "--xquad",
        default=None,
        help="also report gold-passage EM on this question set (e.g. squad:xquad.en.json)",
    )
    args = ap.parse_args()
    set_threads(args.threads)

    phrase = Index.load(args.phrase_index)
    assert isinstance(phrase, PhraseIndex), f"{args.phrase_index} is not a phrase index"
    store = phrase.corpus
    corpus_dir = store.path
    qs = load_questions(args.questions, limit=args.limit)
    texts = qs.texts
    n = len(qs)
    log(f"{n} questions, {len(store)} passages")
    args.work.mkdir(parents=True, exist_ok=True)
    bm25 = build_or_open(args.work / "bm25", corpus_dir, "bm25", args.threads)
    dense = build_or_open(args.work / "dpr", corpus_dir, "dense", args.threads, model=args.dpr)
    assert isinstance(bm25, BM25Index) and isinstance(dense, DenseIndex)
    depth = args.depth

    # --- question vectors -------------------------------------------------------------
    t = time.perf_counter()
    qs_p, qe_p = phrase.encode_queries(texts)
    enc_phrase_s = time.perf_counter() - t
    dq = dense.encode_queries(texts)
    log("questions encoded")

    # --- passages ---------------------------------------------------------------------
    rows_b, sc_b = bm25.search_rows(texts, depth)
    rows_d, sc_d = dense.search_vectors(dq, depth)
    t = time.perf_counter()
    rows_p, sc_p, stats = phrase_passage_rows(phrase, qs_p, qe_p)
    phrase_passage_s = time.perf_counter() - t
    fusion = phrase.fusion
    assert fusion is not None and phrase.lexical is not None, (
        f"{args.phrase_index} has no BM25 part: `anygrain attach-sparse` it first"
    )
    t = time.perf_counter()
    lex = phrase.lexical.queries(texts, fusion)
    rows_f, sc_f, stats_f = phrase_passage_rows(phrase, qs_p, qe_p, lexical=lex, fusion=fusion)
    fused_passage_s = time.perf_counter() - t
    log("passage rankings done")

    passage: dict[str, Any] = {
        "phrase_fused": passage_metrics(store, qs, rows_f, sc_f),
        "phrase": passage_metrics(store, qs, rows_p, sc_p),
        "dpr": passage_metrics(store, qs, rows_d, sc_d),
        "bm25": passage_metrics(store, qs, rows_b, sc_b),
    }
    # hybrids: exact scores of both systems over the union of their candidates
    cand_bd = union_candidates(rows_b, rows_d)
    fused = {
        "bm25+dpr": fuse(cand_bd, bm25.score_rows(texts, cand_bd), dense.score_rows(dq, cand_bd))
    }
    cand_bp = union_candidates(rows_b, rows_p)
    fused["bm25+phrase"] = fuse(
        cand_bp, bm25.score_rows(texts, cand_bp), phrase.score_rows(qs_p, qe_p, cand_bp)
    )
    cand_dp = union_candidates(rows_d, rows_p)
    fused["dpr+phrase"] = fuse(
        cand_dp, dense.score_rows(dq, cand_dp), phrase.score_rows(qs_p, qe_p, cand_dp)
    )
    for name, (r, s) in fused.items():
        passage[name] = passage_metrics(store, qs, r, s)
    log("hybrids done")

    # --- documents --------------------------------------------------------------------
    doc_of = np.asarray(store.column("doc_id"), dtype=object)
    gold_row = [gold_rows(store, q, source=qs.source)[0] for q in qs]
    gold_doc = [str(doc_of[r]) for r in gold_row]
    document = {}
    for name, extra in (("phrase_fused", {"lexical": lex, "fusion": fusion}), ("phrase", {})):
        dfound, _ = phrase.search_units(qs_p, qe_p, 5, Unit.DOCUMENT, depth=200, **extra)
        document[name] = document_metrics(
            qs, gold_doc, [[str(doc_of[phrase.table.row[h.start]]) for h in hs] for hs in dfound]
        )
    for name, r in (("dpr", rows_d), ("bm25", rows_b), ("bm25+dpr", fused["bm25+dpr"][0])):
        document[name] = document_metrics(qs, gold_doc, _docs_of_rows(doc_of, r, 5))
    document["n_documents"] = int(len(set(doc_of.tolist())))
    log("documents done")

    # --- sentences (phrase index) -----------------------------------------------------
    sfound, _ = phrase.search_units(
        qs_p, qe_p, 1, Unit.SENTENCE, depth=200, lexical=lex, fusion=fusion
    )
    s_starts = store.column("sent_starts", sorted(set(gold_row)))
    starts_of = dict(zip(sorted(set(gold_row)), s_starts, strict=True))
    text_of_row: dict[int, str] = {}
    gold_hit = contains = 0
    for q, r, hs in zip(qs, gold_row, sfound, strict=True):
        if not hs:
            continue
        h = hs[0]
        hr = int(phrase.table.row[h.start])
        if q.answer_starts and hr == r and h.span is not None:
            starts = list(starts_of[r] or [])
            want = sentence_of(starts, q.answer_starts[0])
            got = sentence_of(starts, h.span[0])
            gold_hit += int(want == got)
        if hr not in text_of_row:
            text_of_row[hr] = store.texts([hr])[0]
        if h.span is not None:
            a, b = h.span
            contains += int(has_answer(text_of_row[hr][a:b], q.answers))
    sentence = {
        "scores": "fused",
        "top@1_gold_sentence": round(gold_hit / n, 4),
        "top@1_answer": round(contains / n, 4),
    }
    log("sentences done")

    # --- phrases --------------------------------------------------------------------
    gold = evaluate_index(phrase, qs, scope="gold-passage", progress=False)
    g_em = 100 * gold.metrics["em"]
    phrase_em: dict[str, Any] = {
        "gold_passage": {"em": round(g_em, 2), "f1": round(100 * gold.metrics["f1"], 2)}
    }
    for name, w in (("open_corpus_fused", None), ("open_corpus_dense", 0.0)):
        r = evaluate_index(phrase, qs, progress=False, search_options={"sparse_weight": w})
        o_em = 100 * r.metrics["em"]
        phrase_em[name] = {
            "em": round(o_em, 2),
            "f1": round(100 * r.metrics["f1"], 2),
            "open_over_gold": round(o_em / g_em, 4) if g_em else None,
        }
    log("phrase EM done")
    xquad = None
    if args.xquad:
        xq = evaluate_index(phrase, args.xquad, scope="gold-passage", progress=False)
        xquad = {"questions": args.xquad, "gold_passage_em": round(100 * xq.metrics["em"], 2)}

    def gap(value: float, target: float, digits: int = 4) -> dict[str, float]:
        return {
            "value": value,
            "target": round(target, digits),
            "gap": round(value - target, digits),
        }

    d5 = passage["dpr"]["top@5"]
    fused_em = phrase_em["open_corpus_fused"]
    targets = {
        "gold_passage_em_50": gap(phrase_em["gold_passage"]["em"], 50.0, 2),
        "open_corpus_em_42": gap(fused_em["em"], 42.0, 2),
        "open_over_gold_084": gap(fused_em["open_over_gold"] or 0.0, 0.84),
        "fused_phrase_top5_vs_dpr_plus_3": gap(passage["phrase_fused"]["top@5"], d5 + 0.03),
        "dense_phrase_top5_vs_dpr": gap(passage["phrase"]["top@5"], d5),
    }
    if xquad is not None:
        targets["xquad_en_gold_em_50"] = gap(xquad["gold_passage_em"], 50.0, 2)
    ablation = [json.loads(p.read_text(encoding="utf-8")) for p in args.ablation]
    counts = phrase.manifest.get("counts", {})
    out = {
        "questions": n,
        "passages": len(store),
        "phrase_index": str(args.phrase_index),
        "phrase_model_fingerprint": phrase.manifest.get("model", {}).get("fingerprint"),
        "phrase_vectors": int(counts.get("start_vectors", 0)) + int(counts.get("end_vectors", 0)),
        "phrase_bytes_per_passage": counts.get("bytes_per_passage"),
        "dpr_model": str(args.dpr),
        "passage": passage,
        "document": document,
        "sentence": sentence,
        "phrase_em": phrase_em,
        "xquad": xquad,
        "sparse_fusion": fusion.to_dict(),
        "unit_search": {
            "mean_rounds": round(float(np.mean([s.rounds for s in stats])), 4),
            "exhausted": int(sum(s.exhausted for s in stats)),
            "fused_mean_rounds": round(float(np.mean([s.rounds for s in stats_f])), 4),
        },
        "speed": {
            "phrase_question_encoding_qps": round(n / enc_phrase_s, 1),
            "phrase_passage_search_qps": round(n / phrase_passage_s, 1),
            "fused_phrase_passage_search_qps": round(n / fused_passage_s, 1),
            "threads": args.threads,
        },
        "ablation": ablation,
        "targets": targets,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
