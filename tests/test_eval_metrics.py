"""Metric registry, answer-based relevance, KILT R-precision and the evaluate() contract."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError
from anygrain.eval import EvalReport, evaluate, evaluate_run
from anygrain.eval.metrics import (
    UnknownMetricError,
    available_metrics,
    get_metric,
    parse_metrics,
)
from anygrain.hits.hit import Hit, Unit


def passage(
    pid: str, text: str, score: float = 1.0, doc: str | None = None, title: str = ""
) -> Hit:
    return Hit(Unit.PASSAGE, score, 0, pid, doc or f"D{pid}", title, text)


def phrase(pid: str, text: str, start: int, end: int, score: float = 1.0) -> Hit:
    return Hit(Unit.PHRASE, score, 0, pid, f"D{pid}", "", text, (start, end))


class FakeIndex:
    kind = "fake"

    def __init__(self, results: dict[str, list[Hit]], fail_after: int | None = None) -> None:
        self.results = results
        self.calls: list[tuple[list[str], int, dict[str, Any]]] = []
        self.fail_after = fail_after

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("index went away")
        self.calls.append((list(queries), k, options))
        return [list(self.results.get(q, []))[:k] for q in queries]


# --- registry -----------------------------------------------------------------------


def test_parse_names() -> None:
    names = [m.name for m in parse_metrics("top@5, MRR@10,p@20,recall@1000, ndcg@10,rprec,em,F1")]
    assert names == ["top@5", "mrr@10", "p@20", "recall@1000", "ndcg@10", "rprec", "em", "f1"]
    assert get_metric(" Top@ 20 ").name == "top@20"
    assert get_metric("precision@3").name == "p@3"
    assert parse_metrics(["top@5", "top@5"]) == [get_metric("top@5")]


@pytest.mark.parametrize(
    "bad", ["foo@3", "bleu", "top", "mrr", "em@3", "top@0", "top@x", "top@-1", ""]
)
def test_bad_names_are_clear(bad: str) -> None:
    with pytest.raises(UnknownMetricError) as e:
        parse_metrics([bad] if bad else "")
    assert isinstance(e.value, AnygrainError)
    if bad in ("foo@3", "bleu", ""):
        for valid in ("top@k", "mrr@k", "p@k", "recall@k", "ndcg@k", "rprec", "em", "f1"):
            assert valid in str(e.value)


def test_every_metric_documents_its_definition() -> None:
    expected = {"top@k", "mrr@k", "p@k", "recall@k", "ndcg@k", "rprec", "em", "f1"}
    assert set(available_metrics()) >= expected
    for name in available_metrics():
        m = get_metric(name.replace("@k", "@5"))
        assert len(m.doc) > 40, name


# --- answer-based relevance (DPR) ---------------------------------------------------


def test_top_k_with_answer_strings() -> None:
    q = Question(id="1", text="what sat?", answers=["cat"])
    hits = [passage("a", "category theory"), passage("b", "a dog"), passage("c", "The cat sat.")]
    per = evaluate_run({"1": hits}, [q], "top@1,top@2,top@3,mrr@3,mrr@2,p@3,recall@2,recall@3")
    assert per.per_question["1"] == {
        "top@1": 0.0,
        "top@2": 0.0,
        "top@3": 1.0,
        "mrr@3": pytest.approx(1 / 3),
        "mrr@2": 0.0,
        "p@3": pytest.approx(1 / 3),
        "recall@2": 0.0,  # answers only: recall@k is top@k
        "recall@3": 1.0,
    }


def test_regex_answers() -> None:
    q = Question(
        id="1",
        text="how tall?",
        answers=[r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t"],
        answers_are_regex=True,
    )
    hits = [passage("a", "It is 20,330 feet"), passage("b", "It is 20,320 feet tall")]
    assert evaluate_run({"1": hits}, [q], ["mrr@5"]).metrics["mrr@5"] == 0.5


def test_phrase_hits_must_be_the_answer() -> None:
    text = "The cat sat on the mat."
    q = Question(id="1", text="who sat?", answers=["the cat"])
    hits = [phrase("p", text, 0, 11), phrase("p", text, 4, 7)]  # "The cat sat", "cat"
    rep = evaluate_run({"1": hits}, [q], ["top@1", "top@2", "em", "f1"])
    # top-1 "cat sat" vs "cat" (articles dropped): P = 1/2, R = 1 -> F1 = 2/3
    assert rep.per_question["1"] == {
        "top@1": 0.0,
        "top@2": 1.0,
        "em": 0.0,
        "f1": pytest.approx(2 / 3),
    }


def test_sentence_hits_are_judged_on_the_sentence() -> None:
    text = "Dogs bark. The cat sat."
    q = Question(id="1", text="?", answers=["cat"])
    hits = [Hit(Unit.SENTENCE, 1.0, 0, "p", "d", "", text, (0, 10))]
    assert evaluate_run({"1": hits}, [q], ["top@1"]).metrics["top@1"] == 0.0
    hits = [Hit(Unit.SENTENCE, 1.0, 0, "p", "d", "", text, (11, 23))]
    assert evaluate_run({"1": hits}, [q], ["top@1"]).metrics["top@1"] == 1.0


def test_qrels_take_precedence_over_answers() -> None:
    q = Question(id="1", text="?", answers=["cat"], qrels={"b": 1})
    hits = [passage("a", "the cat"), passage("b", "nothing here")]
    assert evaluate_run({"1": hits}, [q], ["mrr@5"]).metrics["mrr@5"] == 0.5


def test_em_f1_use_top1_and_chinese_rules() -> None:
    q = Question(id="1", text="首都?", answers=["北京"])
    text = "中国的首都是北京。"
    rep = evaluate_run({"1": [phrase("p", text, 6, 9), phrase("p", text, 6, 8)]}, [q], ["em", "f1"])
    assert rep.per_question["1"] == {"em": 1.0, "f1": 1.0}  # "北京。": CJK punctuation dropped
    rep = evaluate_run({"1": [phrase("p", text, 5, 8)]}, [q], ["em", "f1"])  # "是北京"
    assert rep.per_question["1"] == {"em": 0.0, "f1": pytest.approx(0.8)}  # LCS 2: P 2/3, R 1
    assert evaluate_run({"1": []}, [q], ["em", "f1"]).metrics == {"em": 0.0, "f1": 0.0}


def test_em_for_regex_answers_and_f1_not_defined() -> None:
    q = Question(
        id="1", text="?", answers=["After the Fall|Finishing the Play"], answers_are_regex=True
    )
    s = Question(id="2", text="?", answers=["cat"])
    hits = {"1": [phrase("p", "After the Fall (1964)", 0, 14)], "2": [phrase("p", "a cat", 2, 5)]}
    rep = evaluate_run(hits, [q, s], ["em", "f1"])
    assert rep.per_question == {"1": {"em": 1.0}, "2": {"em": 1.0, "f1": 1.0}}
    assert rep.n_evaluated == {"em": 2, "f1": 1}
    with pytest.raises(AnygrainError, match="f1 needs"):
        evaluate_run(hits, [q], ["f1"])


def test_metrics_needing_qrels_say_so() -> None:
    q = Question(id="1", text="?", answers=["cat"])
    with pytest.raises(AnygrainError, match="ndcg@10 needs graded qrels"):
        evaluate_run({}, [q], ["ndcg@10"])
    with pytest.raises(AnygrainError, match="rprec needs qrels, or gold ids and answers"):
        evaluate_run({}, [q], ["rprec"])


# --- unanswerable questions ----------------------------------------------------------


def test_unanswerable_questions_are_counted_not_searched() -> None:
    qs = Questions(
        [
            Question(id="1", text="has answer", answers=["cat"]),
            Question(id="2", text="unanswerable"),  # SQuAD v2 style
            Question(id="3", text="also has answer", answers=["dog"]),
        ]
    )
    index = FakeIndex(
        {"has answer": [passage("a", "a cat")], "also has answer": [passage("b", "no")]}
    )
    rep = evaluate(index, qs, progress=False)
    assert isinstance(rep, EvalReport)
    assert rep.n_questions == 3
    assert rep.n_unanswerable_skipped == 1
    assert rep.n_evaluated == {"top@1": 2, "top@5": 2, "top@20": 2, "mrr@20": 2}
    assert rep.metrics["top@1"] == 0.5
    assert [q for call in index.calls for q in call[0]] == ["has answer", "also has answer"]
    assert rep.k == 20


def test_unanswerable_questions_are_searched_for_the_run_file(tmp_path: Path) -> None:
    qs = [Question(id="1", text="x", answers=["cat"]), Question(id="2", text="y")]
    index = FakeIndex({"x": [passage("a", "cat")], "y": [passage("b", "dog")]})
    rep = evaluate(index, qs, ["top@1"], run_out=tmp_path / "r.trec", progress=False)
    assert rep.n_unanswerable_skipped == 1 and rep.metrics["top@1"] == 1.0
    assert (tmp_path / "r.trec").read_text().splitlines() == [
        "1 Q0 a 1 1.0 fake",
        "2 Q0 b 1 1.0 fake",
    ]


def test_unanswerable_questions_with_gold_are_skipped_from_every_metric() -> None:
    # SQuAD v2 keeps the paragraph of an impossible question as its gold passage.
    ok = Question(id="1", text="a", answers=["cat"], gold=["p1"])
    impossible = Question(id="2", text="b", gold=["p2"], meta={"is_impossible": True})
    run = {"1": [passage("p1", "a cat")], "2": [passage("p2", "text")]}
    rep = evaluate_run(run, [ok, impossible], ["top@1", "rprec", "em"])
    assert rep.n_evaluated == {"top@1": 1, "rprec": 1, "em": 1}
    assert rep.n_unanswerable_skipped == 1
    assert set(rep.per_question) == {"1"}


# --- KILT R-precision -----------------------------------------------------------------

# KILT's own tests (tests/test_eval_retrieval.py on gold2/guess2_*.jsonl) expect Rprec
# 1/2 for the first guess and 1 for the second: provenance sets {1,2}, {5}, {7,9,11}.
KILT_SETS = [["1", "2"], ["5"], ["7", "9", "11"]]
GUESS_2_1 = ["2", "5", "7", "33", "1", "9", "44", "88"]


def kilt_hits(ids: list[str], per_doc: int = 1) -> list[Hit]:
    return [passage(f"{d}_{i}", "", doc=d) for d in ids for i in range(per_doc)]


def test_kilt_rprec_matches_kilt_tests() -> None:
    q = Question(
        id="1",
        text="?",
        answers=["test1", "test2", "test3"],
        gold=[g for s in KILT_SETS for g in s],
        meta={"gold_sets": KILT_SETS},
    )
    assert evaluate_run({"1": kilt_hits(GUESS_2_1)}, [q], ["rprec"]).metrics["rprec"] == 0.5
    assert evaluate_run({"1": kilt_hits(["5"])}, [q], ["rprec"]).metrics["rprec"] == 1.0
    # Passages are reduced to their pages first, as KILT de-duplicates provenance.
    rep = evaluate_run({"1": kilt_hits(GUESS_2_1, per_doc=3)}, [q], ["rprec"])
    assert rep.metrics["rprec"] == 0.5


def test_kilt_rprec_without_sets_uses_gold_as_one_set() -> None:
    q = Question(id="1", text="?", answers=["a"], gold=["1", "2", "5", "7", "9", "11"])
    # R = 6; top 6 pages 2,5,7,33,1,9 hold 5 gold pages.
    rep = evaluate_run({"1": kilt_hits(GUESS_2_1)}, [q], ["rprec"])
    assert rep.metrics["rprec"] == pytest.approx(5 / 6)


def test_kilt_rprec_matches_titles_and_default_k() -> None:
    q = Question(id="1", text="chen", answers=["suicide"], gold=["Chen Yi-hsiung"])
    hits = [passage("p1", "", doc="10287141", title="Chen Yi-hsiung")]
    index = FakeIndex({"chen": hits})
    rep = evaluate(index, [q], ["rprec"], progress=False)
    assert rep.metrics["rprec"] == 1.0 and rep.k == 1
    wrong = [passage("p1", "", doc="999", title="Other")]
    assert evaluate_run({"1": wrong}, [q], ["rprec"]).metrics["rprec"] == 0.0


def test_rprec_on_passage_gold_keeps_passage_grain() -> None:
    # SQuAD-style: gold is the passage id; passages of one document stay distinct.
    q = Question(id="1", text="?", answers=["x"], gold=["p1", "p3"])
    hits = [passage(p, "", doc="D") for p in ("p1", "p2", "p3")]
    assert evaluate_run({"1": hits}, [q], ["rprec"]).metrics["rprec"] == 0.5
    assert evaluate_run({"1": hits[::-1]}, [q], ["rprec"]).metrics["rprec"] == 0.5
    assert evaluate_run({"1": [hits[1]]}, [q], ["rprec"]).metrics["rprec"] == 0.0


def test_rprec_matches_kilt_titles_from_meta() -> None:
    q = Question(
        id="1",
        text="?",
        answers=["suicide"],
        gold=["10287141"],
        meta={"titles": ["Chen Yi-hsiung"]},
    )
    hits = [passage("p1", "", doc="Chen_Yi-hsiung", title="Chen Yi-hsiung")]
    assert evaluate_run({"1": hits}, [q], ["rprec"]).metrics["rprec"] == 1.0


# --- evaluate() contract ---------------------------------------------------------------


def test_k_defaults_and_checks() -> None:
    q = Question(id="1", text="t", qrels={f"d{i}": 1 for i in range(7)})
    index = FakeIndex({"t": [passage(f"d{i}", "") for i in range(50)]})
    assert evaluate(index, [q], ["top@1"], progress=False).k == 1
    assert evaluate(index, [q], ["rprec"], progress=False).k == 7
    assert evaluate(index, [q], ["p@3", "rprec"], progress=False).k == 7
    assert evaluate(index, [q], ["mrr@10", "recall@1000"], progress=False).k == 1000
    assert evaluate(index, [q], ["top@5"], k=30, progress=False).k == 30
    with pytest.raises(AnygrainError, match="smaller than the cutoff 20"):
        evaluate(index, [q], ["top@20"], k=10, progress=False)


def test_search_options_and_batches_are_passed() -> None:
    qs = [Question(id=str(i), text=f"q{i}", answers=["x"]) for i in range(5)]
    index = FakeIndex({})
    rep = evaluate(index, qs, ["top@3"], batch_size=2, search_options={"nprobe": 8}, progress=False)
    assert [len(c[0]) for c in index.calls] == [2, 2, 1]
    assert all(c[1] == 3 and c[2] == {"nprobe": 8} for c in index.calls)
    assert rep.n_empty == 5 and rep.metrics["top@3"] == 0.0
    assert rep.seconds is not None and rep.seconds >= 0


def test_report_to_dict_is_json() -> None:
    q = Question(id="1", text="t", answers=["cat"])
    rep = evaluate(FakeIndex({"t": [passage("a", "cat")]}), [q], ["top@1"], progress=False)
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["n_questions"] == 1 and d["metrics"] == {"top@1": 1.0}
    assert "per_question" not in d
    assert rep.to_dict(per_question=True)["per_question"] == {"1": {"top@1": 1.0}}


def test_bad_inputs_are_refused() -> None:
    q = Question(id="1", text="t", answers=["cat"])
    with pytest.raises(AnygrainError, match="more than once"):
        evaluate_run({}, [q, q], ["top@1"])

    class Short(FakeIndex):
        def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
            return []

    with pytest.raises(AnygrainError, match="0 result lists for 1"):
        evaluate(Short({}), [q], ["top@1"], progress=False)


def test_failed_search_leaves_no_run_file(tmp_path: Path) -> None:
    qs = [Question(id=str(i), text=f"q{i}", answers=["x"]) for i in range(4)]
    out = tmp_path / "run.trec"
    with pytest.raises(RuntimeError):
        evaluate(
            FakeIndex({}, fail_after=1), qs, ["top@1"], batch_size=2, run_out=out, progress=False
        )
    assert list(tmp_path.iterdir()) == []
