"""Multi-CPR evaluation: MRR@10 and Recall@1000 by the paper's definition and by
pytrec_eval (zero-result queries included), and the per-domain table in one pass."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import pytrec_eval
from conftest import shared_file
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.corpus.questions import Question
from anygrain.corpus.readers.multicpr import read_multicpr_questions
from anygrain.errors import ErrorLog
from anygrain.eval import evaluate, evaluate_run
from anygrain.eval.domains import evaluate_domains
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index

TOL = 1e-9


def hit(docid: str, score: float) -> Hit:
    return Hit(Unit.PASSAGE, score, -1, docid, docid, "", "")


class FakeIndex:
    kind = "fake"

    def __init__(self, results: dict[str, list[Hit]]) -> None:
        self.results = results

    def search(self, queries, k=10, **options):  # type: ignore[no-untyped-def]
        return [list(self.results.get(q, []))[:k] for q in queries]


def collection(seed: int, n: int = 60, prefix: str = ""):
    """Multi-CPR-like qrels (mostly one relevant passage, some two), runs of up to 1200
    hits with distinct scores; every 6th query has no hits, every 7th is missing."""
    rng = random.Random(seed)
    pool = [f"{prefix}p{i}" for i in range(5000)]
    questions, run = [], {}
    for i in range(n):
        qid = f"{prefix}{200000 + i}"
        rel = rng.sample(pool, 1 if i % 4 else 2)
        questions.append(Question(id=qid, text=f"{prefix}查询{i}", qrels=dict.fromkeys(rel, 1)))
        if i % 6 == 0:
            run[qid] = []
            continue
        if i % 7 == 0:
            continue
        docs = rng.sample(pool, rng.choice([5, 50, 1200]))
        for p in rel:
            if rng.random() < 0.6:
                pos = rng.choice([0, 2, 9, 10, 500, 999, 1000, 1100])
                if pos < len(docs) and p not in docs:
                    docs[pos] = p
        run[qid] = [hit(d, 5000.0 - r) for r, d in enumerate(docs)]
    return questions, run


def paper_definition(questions, run):  # type: ignore[no-untyped-def]
    """MRR@10 and Recall@1000 as Multi-CPR defines them, averaged over ALL judged queries."""
    mrr = recall = 0.0
    for q in questions:
        relevant = {p for p, r in q.qrels.items() if r > 0}
        ranked = [h.unit_id for h in run.get(q.id, [])]
        rr = next((1.0 / (i + 1) for i, p in enumerate(ranked[:10]) if p in relevant), 0.0)
        mrr += rr
        recall += len(relevant & set(ranked[:1000])) / len(relevant)
    return mrr / len(questions), recall / len(questions)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mrr10_recall1000_match_the_definition_and_pytrec_eval(seed: int) -> None:
    questions, run = collection(seed)
    missing = [q.id for q in questions if q.id not in run]
    empty = [q.id for q in questions if q.id in run and not run[q.id]]
    assert missing and empty
    assert any(len(h) > 1000 for h in run.values())
    rep = evaluate_run(run, questions, ["mrr@10", "recall@1000"])
    assert rep.n_evaluated == {"mrr@10": 60, "recall@1000": 60}
    assert rep.n_empty == len(missing) + len(empty)
    want_mrr, want_recall = paper_definition(questions, run)
    assert rep.metrics["mrr@10"] == pytest.approx(want_mrr, abs=TOL)
    assert rep.metrics["recall@1000"] == pytest.approx(want_recall, abs=TOL)
    assert 0 < rep.metrics["mrr@10"] < rep.metrics["recall@1000"] < 1

    qrels = {q.id: q.qrels for q in questions}
    cut10 = {q: {h.unit_id: h.score for h in hits[:10]} for q, hits in run.items() if hits}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut10)
    full = {q: {h.unit_id: h.score for h in hits} for q, hits in run.items() if hits}
    rc = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1000"}).evaluate(full)
    # pytrec_eval leaves out every query absent from the run ...
    assert set(rr) == set(rc) == {q for q, h in run.items() if h}
    for qid, values in rep.per_question.items():
        assert values["mrr@10"] == pytest.approx(rr.get(qid, {}).get("recip_rank", 0.0), abs=TOL)
        assert values["recall@1000"] == pytest.approx(
            rc.get(qid, {}).get("recall_1000", 0.0), abs=TOL
        )
    # ... so its own mean is over fewer queries; ours divides by all 60.
    n = len(questions)
    assert rep.metrics["mrr@10"] == pytest.approx(
        sum(v["recip_rank"] for v in rr.values()) / n, abs=TOL
    )
    assert rep.metrics["recall@1000"] == pytest.approx(
        sum(v["recall_1000"] for v in rc.values()) / n, abs=TOL
    )
    naive = sum(v["recip_rank"] for v in rr.values()) / len(rr)
    assert naive > rep.metrics["mrr@10"]


def test_per_domain_indexes_and_one_merged_index_give_the_same_rows() -> None:
    per_domain, merged_results, questions = {}, {}, {}
    for seed, name in enumerate(["ecom", "video", "medical"]):
        qs, run = collection(seed, n=30 + 10 * seed, prefix=f"{name}-")
        questions[name] = qs
        results = {q.text: run.get(q.id, []) for q in qs}
        per_domain[name] = FakeIndex(results)
        merged_results.update(results)
    one = evaluate_domains(questions, FakeIndex(merged_results))
    each = evaluate_domains(questions, per_domain)
    assert [r.domain for r in one.rows] == ["ecom", "video", "medical"]
    for a, b, name in zip(one.rows, each.rows, ["ecom", "video", "medical"], strict=True):
        alone = evaluate(
            per_domain[name], questions[name], ["mrr@10", "recall@1000"], progress=False
        )
        assert a.metrics == pytest.approx(alone.metrics, abs=TOL)
        assert b.metrics == pytest.approx(alone.metrics, abs=TOL)
        assert a.n_questions == b.n_questions == alone.n_questions
        assert a.n_empty == b.n_empty == alone.n_empty > 0
    assert one.overall is not None and each.overall is not None
    everything = [q for qs in questions.values() for q in qs]
    total = evaluate(
        FakeIndex(merged_results), everything, ["mrr@10", "recall@1000"], progress=False
    )
    assert one.overall.metrics == pytest.approx(total.metrics, abs=TOL)
    assert each.overall.metrics == pytest.approx(total.metrics, abs=TOL)
    text = one.format()
    lines = text.splitlines()
    assert lines[0].split() == ["domain", "queries", "MRR@10", "Recall@1000"]
    assert [ln.split()[0] for ln in lines[2:]] == ["ecom", "video", "medical", "all"]
    assert f"{one.rows[1].metrics['mrr@10']:.4f}" in lines[3]
    # --drop-empty reproduces the original script per domain
    dropped = evaluate_domains(questions, per_domain, drop_empty=True)
    for row in dropped.rows:
        assert row.n_evaluated["mrr@10"] == row.n_questions - row.n_empty


# --- the command, on real BM25 indexes ------------------------------------------------------

DOMAINS = {
    "ecom": (
        [("1", "红色连衣裙 夏季 雪纺"), ("2", "蓝牙耳机 无线 降噪"), ("3", "儿童自行车 辅助轮")],
        [("200000", "红色连衣裙", "1"), ("200001", "无线蓝牙耳机", "2"), ("200002", "滑板", "3")],
    ),
    "video": (
        [("1", "甄嬛传 电视剧 全集"), ("2", "海贼王 动漫 第一季"), ("3", "流浪地球 科幻电影")],
        [("200000", "海贼王", "2"), ("200001", "流浪地球 电影", "3")],
    ),
}


def _root(tmp: Path) -> Path:
    root = tmp / "multi-cpr"
    for name, (corpus, queries) in DOMAINS.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "corpus.tsv").write_text("".join(f"{p}\t{t}\n" for p, t in corpus), "utf-8")
        (d / "dev.query.txt").write_text("".join(f"{q}\t{t}\n" for q, t, _ in queries), "utf-8")
        (d / "qrels.dev.tsv").write_text("".join(f"{q}\t0\t{p}\t1\n" for q, _, p in queries))
    return root


def test_cli_eval_domains_per_domain_and_merged(tmp_path: Path) -> None:
    root = _root(tmp_path)
    for name in DOMAINS:
        Index.build(
            f"multicpr:{root / name}", kind="bm25", out=tmp_path / "idx" / name, progress=False
        )
    Index.build(f"multicpr:{root}", kind="bm25", out=tmp_path / "merged", progress=False)
    runner = CliRunner()
    res = runner.invoke(
        app, ["eval-domains", str(root), "--index", str(tmp_path / "idx" / "{domain}"), "--json"]
    )
    assert res.exit_code == 0, res.output
    each = json.loads(res.output)
    rows = {r["domain"]: r for r in each["domains"]}
    # ecom: ranks 1 and 1, and "滑板" matches nothing (no results: counts as 0)
    assert rows["ecom"]["n_questions"] == 3 and rows["ecom"]["n_empty"] == 1
    assert rows["ecom"]["metrics"] == pytest.approx({"mrr@10": 2 / 3, "recall@1000": 2 / 3})
    assert rows["video"]["metrics"] == pytest.approx({"mrr@10": 1.0, "recall@1000": 1.0})
    assert each["overall"]["metrics"]["mrr@10"] == pytest.approx(4 / 5)
    res = runner.invoke(
        app, ["eval-domains", str(root), "--index", str(tmp_path / "merged"), "--json"]
    )
    assert res.exit_code == 0, res.output
    merged = json.loads(res.output)
    assert [r["domain"] for r in merged["domains"]] == ["ecom", "video"]
    assert merged["domains"][1]["metrics"] == pytest.approx({"mrr@10": 1.0, "recall@1000": 1.0})
    assert merged["domains"][0]["metrics"]["recall@1000"] == pytest.approx(2 / 3)
    table = runner.invoke(
        app, ["eval-domains", str(root), "--index", str(tmp_path / "idx" / "{domain}"), "-q"]
    )
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[0].split() == ["domain", "queries", "MRR@10", "Recall@1000"]
    bad = runner.invoke(app, ["eval-domains", str(root), "--index", str(tmp_path / "nope")])
    assert bad.exit_code != 0


def test_real_dev_queries_merged_by_prefix() -> None:
    """The real dev sets, merged with domain prefixes: a run that finds each query's
    passage at a known rank for some queries and nothing for the rest."""
    questions, results = {}, {}
    for d, name in enumerate(["ecom", "video", "medical"]):
        path = shared_file(f"multi-cpr/{name}/dev.query.txt")
        qs = list(read_multicpr_questions(path, ErrorLog(), prefix=f"{name}-"))
        assert len(qs) == 1000 and all(q.gold[0].startswith(f"{name}-") for q in qs)
        questions[name] = qs
        for i, q in enumerate(qs):
            if (i + d) % 3 == 0:
                continue  # no results
            rank = (i * 7 + d) % 15  # 0..14: beyond 10 only recall finds it
            hits = [hit(f"{name}-x{j}", 100.0 - j) for j in range(rank)]
            results[q.text] = [*hits, hit(q.gold[0], 100.0 - rank)]
    table = evaluate_domains(questions, FakeIndex(results))
    for row in table.rows:
        qs = questions[row.domain]
        run = {q.id: results.get(q.text, []) for q in qs}
        want = paper_definition(qs, run)
        assert row.n_questions == 1000 and row.n_empty > 300
        assert (row.metrics["mrr@10"], row.metrics["recall@1000"]) == pytest.approx(want, abs=TOL)
