"""Evaluation refuses or reports what would otherwise be a silent wrong answer: qrels naming
units the index does not hold, and (``--scope gold-passage``) passage indexes judged by their
gold paragraph rather than by answer strings."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.api import evaluate_index
from anygrain.cli.main import app
from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError
from anygrain.eval.coverage import judge_by_gold, qrels_coverage
from anygrain.index.base import Index

runner = CliRunner()


def _qrels_questions(root: Path, qrels: list[str]) -> Path:
    """A Multi-CPR-style question set: two queries and the given qrels lines."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dev.query.txt").write_text(
        "1\tWho created Python?\n2\tHow long is the Great Wall?\n", encoding="utf-8"
    )
    (root / "qrels.dev.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def bm25(squad_file: Path, tmp_path: Path) -> Index:
    return Index.build(f"squad:{squad_file}", kind="bm25", out=tmp_path / "bm25", progress=False)


def test_qrels_naming_no_unit_of_the_index_is_an_error(bm25: Index, tmp_path: Path) -> None:
    qs = _qrels_questions(tmp_path / "other", ["1\t0\t260\t1", "2\t0\t779\t1"])
    with pytest.raises(AnygrainError, match="none of the 2 unit ids in the qrels") as e:
        evaluate_index(bm25, f"multicpr:{qs}", progress=False)
    assert "'260'" in str(e.value)
    r = runner.invoke(app, ["eval", str(bm25.path), "--questions", f"multicpr:{qs}", "--json"])
    assert r.exit_code == 2 and "none of the 2 unit ids" in r.output


def test_some_qrels_ids_missing_are_warned_and_counted(
    bm25: Index, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    qs = _qrels_questions(
        tmp_path / "mixed",
        ["1\t0\tPython_(language)_0\t1", "2\t0\tGreat_Wall_1\t1", "2\t0\tGone_7\t1"],
    )
    with caplog.at_level(logging.WARNING, logger="anygrain.eval.coverage"):
        rep = evaluate_index(bm25, f"multicpr:{qs}", metrics=["top@1"], progress=False)
    assert (rep.n_qrels_ids, rep.n_qrels_ids_missing) == (3, 1)
    assert "1 of 3 qrels ids are not in the index's corpus" in caplog.text
    assert "'Gone_7'" in caplog.text
    assert rep.metrics["top@1"] > 0  # the ids that are there still judge
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="anygrain.eval.coverage"):
        r = runner.invoke(app, ["eval", str(bm25.path), "--questions", f"multicpr:{qs}", "--json"])
    assert r.exit_code == 0, r.output
    assert "1 of 3 qrels ids are not in the index's corpus" in caplog.text  # stderr
    assert json.loads(r.stdout)["n_qrels_ids_missing"] == 1


def test_answer_questions_need_no_qrels_check(bm25: Index, squad_file: Path) -> None:
    rep = evaluate_index(bm25, f"squad:{squad_file}", progress=False)
    assert (rep.n_qrels_ids, rep.n_qrels_ids_missing) == (0, 0)


def test_qrels_coverage_counts_distinct_ids() -> None:
    qs = [
        Question("a", "x", qrels={"p1": 1, "p2": 0}),
        Question("b", "y", qrels={"p1": 2, "p3": 1}),
    ]
    cov = qrels_coverage(qs, {"p1"}.__contains__)
    assert (cov.n_ids, cov.n_missing, cov.n_found) == (3, 2, 1)
    assert cov.missing_examples == ("p2", "p3")


def _two_paris_squad(tmp_path: Path) -> Path:
    """The answer "Paris" is in both paragraphs; the question was asked of the second, but
    BM25 ranks the first (it repeats the question's words) on top."""
    first = "Paris is the capital of France. The capital of France is Paris."
    second = "The government of France sits in Paris."
    q = "What is the capital of France?"
    data = [
        {"title": "Capital", "paragraphs": [{"context": first, "qas": []}]},
        {
            "title": "Government",
            "paragraphs": [
                {
                    "context": second,
                    "qas": [
                        {
                            "id": "q1",
                            "question": q,
                            "answers": [{"text": "Paris", "answer_start": second.index("Paris")}],
                        }
                    ],
                }
            ],
        },
    ]
    p = tmp_path / "paris.json"
    p.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return p


def test_gold_passage_scope_judges_passage_indexes_by_the_gold_paragraph(
    tmp_path: Path,
) -> None:
    src = _two_paris_squad(tmp_path)
    idx = Index.build(f"squad:{src}", kind="bm25", out=tmp_path / "i", progress=False)
    assert idx.search(["What is the capital of France?"], 1)[0][0].passage_id == "Capital_0"
    ms = ["top@1", "top@2", "mrr@2"]
    by_answer = evaluate_index(idx, f"squad:{src}", metrics=ms, progress=False)
    by_gold = evaluate_index(idx, f"squad:{src}", metrics=ms, scope="gold-passage", progress=False)
    assert by_answer.metrics == {"top@1": 1.0, "top@2": 1.0, "mrr@2": 1.0}
    assert by_gold.metrics == {"top@1": 0.0, "top@2": 1.0, "mrr@2": 0.5}
    r = runner.invoke(
        app,
        ["eval", str(idx.path), "--questions", f"squad:{src}", "--metrics", "top@1",
         "--scope", "gold-passage", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["metrics"]["top@1"] == 0.0 and d["scope"] == "gold-passage"


def test_gold_passage_scope_refuses_another_corpus(tmp_path: Path, squad_file: Path) -> None:
    idx = Index.build(f"squad:{squad_file}", kind="bm25", out=tmp_path / "i", progress=False)
    other = _two_paris_squad(tmp_path)
    with pytest.raises(AnygrainError, match="gold passage 'Government_0' is not in the index"):
        evaluate_index(idx, f"squad:{other}", scope="gold-passage", progress=False)


def test_judge_by_gold_keeps_qrels_and_unanswerable_questions() -> None:
    qs = [
        Question("a", "x", answers=["y"], gold=["p1"]),
        Question("b", "x", qrels={"p2": 2}, gold=["p2"]),
        Question("c", "x", gold=["p3"]),  # SQuAD v2 unanswerable keeps its paragraph
    ]
    a, b, c = judge_by_gold(qs)
    assert a.qrels == {"p1": 1} and a.answers == []
    assert b is qs[1] and c is qs[2] and not c.answerable
    with pytest.raises(AnygrainError, match="'d' has no gold passage"):
        judge_by_gold([Question("d", "x", answers=["y"])])


def test_qrels_are_checked_at_the_grain_they_judge(bm25: Index) -> None:
    """Document-grain hits are judged by doc id, so their qrels are looked up among doc ids."""
    from anygrain.hits.hit import Unit

    passages, documents = bm25.unit_ids(Unit.PASSAGE), bm25.unit_ids(Unit.DOCUMENT)
    assert passages("Python_(language)_0") and not passages("Python_(language)")
    assert documents("Python_(language)") and not documents("Python_(language)_0")
