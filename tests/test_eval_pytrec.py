"""Qrels-based metrics pinned to trec_eval (through pytrec_eval), and Multi-CPR semantics."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import pytrec_eval

from anygrain.corpus.questions import Question
from anygrain.eval import evaluate, evaluate_run
from anygrain.hits.hit import Hit, Unit

CUTOFFS = (1, 3, 5, 10, 20)
TOL = 1e-6


def hit(docid: str, score: float) -> Hit:
    return Hit(Unit.PASSAGE, score, -1, docid, f"doc-of-{docid}", "", "")


class FakeIndex:
    """Returns canned hits by query text, cut to k, and records how it was called."""

    kind = "fake"

    def __init__(self, results: dict[str, list[Hit]]) -> None:
        self.results = results
        self.calls: list[tuple[list[str], int, dict[str, Any]]] = []

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        self.calls.append((list(queries), k, options))
        return [list(self.results.get(q, []))[:k] for q in queries]


def random_collection(seed: int, n_queries: int = 50):
    """Graded qrels (some queries with nothing relevant) and runs with distinct scores."""
    rng = random.Random(seed)
    pool = [f"d{i}" for i in range(80)]
    questions, run = [], {}
    for qi in range(n_queries):
        qid = f"q{qi}"
        judged = rng.sample(pool, rng.randint(1, 15))
        if qi % 7 == 3:
            qrels = dict.fromkeys(judged, 0)  # judged, but nothing relevant
        else:
            qrels = {d: rng.choice([-1, 0, 0, 1, 2, 3]) for d in judged}
            qrels[judged[0]] = rng.choice([1, 2, 3])
        questions.append(Question(id=qid, text=f"query {qi}", qrels=qrels))
        n = rng.randint(1, 30)
        docs = rng.sample(pool, n)
        scores = sorted(rng.sample(range(1, 10_000), n), reverse=True)
        run[qid] = [hit(d, s / 100.0) for d, s in zip(docs, scores, strict=True)]
    return questions, run


def trec(qrels: dict[str, dict[str, int]], run: dict[str, list[Hit]], measures: set[str]):
    ev = pytrec_eval.RelevanceEvaluator(qrels, measures)
    return ev.evaluate({q: {h.unit_id: h.score for h in hits} for q, hits in run.items() if hits})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_qrels_metrics_match_pytrec_eval(seed: int) -> None:
    questions, run = random_collection(seed)
    qrels = {q.id: q.qrels for q in questions}
    metrics = [f"{m}@{k}" for m in ("top", "p", "recall", "ndcg", "mrr") for k in CUTOFFS]
    report = evaluate_run(run, questions, [*metrics, "rprec"])
    assert report.n_questions == 50
    assert all(n == 50 for n in report.n_evaluated.values())

    measures = {f"P.{k}" for k in CUTOFFS} | {f"recall.{k}" for k in CUTOFFS}
    measures |= {f"ndcg_cut.{k}" for k in CUTOFFS} | {f"success.{k}" for k in CUTOFFS}
    measures |= {"Rprec"}
    ref = trec(qrels, run, measures)
    assert set(ref) == set(report.per_question)
    for qid, values in report.per_question.items():
        r = ref[qid]
        for k in CUTOFFS:
            assert values[f"p@{k}"] == pytest.approx(r[f"P_{k}"], abs=TOL)
            assert values[f"recall@{k}"] == pytest.approx(r[f"recall_{k}"], abs=TOL)
            assert values[f"ndcg@{k}"] == pytest.approx(r[f"ndcg_cut_{k}"], abs=TOL)
            assert values[f"top@{k}"] == pytest.approx(r[f"success_{k}"], abs=TOL)
        assert values["rprec"] == pytest.approx(r["Rprec"], abs=TOL)
    for k in CUTOFFS:
        mean = sum(r[f"ndcg_cut_{k}"] for r in ref.values()) / len(ref)
        assert report.metrics[f"ndcg@{k}"] == pytest.approx(mean, abs=TOL)

    # recip_rank is not cut in trec_eval: compare on runs truncated to k.
    for k in CUTOFFS:
        cut = trec(qrels, {q: h[:k] for q, h in run.items()}, {"recip_rank"})
        for qid, values in report.per_question.items():
            assert values[f"mrr@{k}"] == pytest.approx(cut[qid]["recip_rank"], abs=TOL)


def test_collection_exercises_edge_cases() -> None:
    """The random data must contain what the comparison is meant to cover."""
    questions, run = random_collection(0)
    assert any(not any(r > 0 for r in q.qrels.values()) for q in questions)
    assert any(len({r for r in q.qrels.values() if r > 0}) > 1 for q in questions)
    assert any(len(run[q.id]) < 20 for q in questions)
    assert any(r < 0 for q in questions for r in q.qrels.values())
    assert evaluate_run(run, questions, ["ndcg@10"]).metrics["ndcg@10"] > 0


def test_evaluate_through_index_matches_run_file_scored_by_trec_eval(tmp_path: Path) -> None:
    questions, run = random_collection(5)
    index = FakeIndex({q.text: run[q.id] for q in questions})
    out = tmp_path / "run.trec"
    report = evaluate(
        index, questions, ["p@5", "ndcg@10", "recall@20"], batch_size=7, run_out=out, progress=False
    )
    assert report.k == 20
    assert {k for _, k, _ in index.calls} == {20}
    assert [len(qs) for qs, _, _ in index.calls] == [7] * 7 + [1]
    with open(out) as f:
        parsed = pytrec_eval.parse_run(f)
    assert {line.split()[5] for line in out.read_text().splitlines()} == {"fake"}
    ev = pytrec_eval.RelevanceEvaluator(
        {q.id: q.qrels for q in questions}, {"P.5", "ndcg_cut.10", "recall.20"}
    )
    ref = ev.evaluate(parsed)
    for name, key in (("p@5", "P_5"), ("ndcg@10", "ndcg_cut_10"), ("recall@20", "recall_20")):
        mean = sum(r[key] for r in ref.values()) / len(ref)
        assert report.metrics[name] == pytest.approx(mean, abs=TOL)


def test_duplicate_unit_ids_count_once_like_trec_eval() -> None:
    q = Question(id="q", text="t", qrels={"a": 1, "b": 1})
    hits = [hit("a", 3.0), hit("a", 2.5), hit("c", 2.0), hit("b", 1.0)]
    per = evaluate_run({"q": hits}, [q], ["p@2", "recall@3", "rprec"]).per_question["q"]
    ref = trec({"q": q.qrels}, {"q": [hits[0], hits[2], hits[3]]}, {"P.2", "recall.3", "Rprec"})
    assert per == pytest.approx(
        {"p@2": ref["q"]["P_2"], "recall@3": ref["q"]["recall_3"], "rprec": ref["q"]["Rprec"]}
    )
    assert per["p@2"] == 0.5


# --- Multi-CPR ------------------------------------------------------------------


def multicpr_reference(
    qrels: dict[str, list[str]], results: dict[str, list[tuple[str, float]]], topk: int
):
    """The Multi-CPR retrieval/evaluate.py algorithm: mean over queries in the result file."""
    mrr, found, judged = 0.0, 0, 0
    for qid, res in results.items():
        if qid not in qrels:
            continue
        judged += 1
        ranked = sorted(res, key=lambda x: x[1], reverse=True)
        rr = 0.0
        for i, (pid, _) in enumerate(ranked[:topk]):
            if pid in qrels[qid]:
                rr = 1.0 / (i + 1)
                break
        mrr += rr
        found += rr > 0
    return mrr / judged, found / judged


def multicpr_collection(seed: int = 11, n: int = 40):
    rng = random.Random(seed)
    questions: list[Question] = []
    run: dict[str, list[Hit]] = {}
    for i in range(n):
        gold = f"p{rng.randint(0, 3000)}"
        questions.append(Question(id=str(200000 + i), text=f"查询{i}", qrels={gold: 1}))
        if i % 5 == 0:
            run[str(200000 + i)] = []  # no results (e.g. every query term out of vocabulary)
            continue
        docs = rng.sample([f"p{j}" for j in range(3000)], 1000)
        if rng.random() < 0.7:
            docs[rng.choice([0, 1, 4, 9, 15, 200, 999])] = gold
        run[str(200000 + i)] = [hit(d, 2000.0 - r) for r, d in enumerate(dict.fromkeys(docs))]
    return questions, run


def test_multicpr_empty_results_count_as_zero_and_drop_empty_reproduces_script() -> None:
    questions, run = multicpr_collection()
    qrels = {q.id: list(q.qrels) for q in questions}
    in_file = {q: [(h.unit_id, h.score) for h in hits] for q, hits in run.items() if hits}
    ref_mrr, _ = multicpr_reference(qrels, in_file, 10)
    _, ref_recall = multicpr_reference(qrels, in_file, 1000)
    n_empty = sum(1 for h in run.values() if not h)
    assert n_empty == 8

    index = FakeIndex({q.text: run[q.id] for q in questions})
    dropped = evaluate(index, questions, ["mrr@10", "recall@1000"], drop_empty=True, progress=False)
    assert dropped.k == 1000
    assert dropped.n_empty == n_empty
    assert dropped.n_evaluated["mrr@10"] == 32
    assert dropped.metrics["mrr@10"] == pytest.approx(ref_mrr, abs=TOL)
    assert dropped.metrics["recall@1000"] == pytest.approx(ref_recall, abs=TOL)

    counted = evaluate(index, questions, ["mrr@10", "recall@1000"], progress=False)
    assert counted.n_evaluated["mrr@10"] == 40
    assert counted.n_empty == n_empty
    assert counted.metrics["mrr@10"] == pytest.approx(ref_mrr * 32 / 40, abs=TOL)
    assert counted.metrics["recall@1000"] == pytest.approx(ref_recall * 32 / 40, abs=TOL)
    assert all(counted.per_question[q.id]["mrr@10"] == 0.0 for q in questions if not run[q.id])
    assert 0 < counted.metrics["mrr@10"] < counted.metrics["recall@1000"] < 1


def test_question_missing_from_run_counts_as_empty() -> None:
    q1 = Question(id="1", text="a", qrels={"x": 1})
    q2 = Question(id="2", text="b", qrels={"y": 1})
    rep = evaluate_run({"1": [hit("x", 1.0)]}, [q1, q2], ["mrr@10"])
    assert rep.metrics["mrr@10"] == 0.5
    assert rep.n_empty == 1
    dropped = evaluate_run({"1": [hit("x", 1.0)]}, [q1, q2], ["mrr@10"], drop_empty=True)
    assert dropped.metrics["mrr@10"] == 1.0
