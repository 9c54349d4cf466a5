"""Readers on the real files in ../shared/data (read in place; skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED

from anygrain.corpus.formats import parse_source
from anygrain.corpus.readers.dpr_train import read_dpr_training
from anygrain.corpus.readers.multicpr import read_multicpr_questions
from anygrain.errors import ErrorLog, InputError

DATA = SHARED


def data(rel: str) -> Path:
    p = DATA / rel
    if not p.exists():
        pytest.skip("../shared/data not present")
    return p


def _nonblank_lines(path: Path) -> list[str]:
    # Split on "\n" only, as the files are written (str.splitlines also splits on U+2028 etc.).
    return [ln for ln in path.read_text(encoding="utf-8").split("\n") if ln.strip()]


def test_dpr_psgs_tsv() -> None:
    path = data("dpr-train-samples/psgs_w100_subset_from_tiny.tsv")
    src = parse_source(path)
    assert src.format.name == "dpr-tsv"
    docs = list(src.documents())
    spans = [(d, sp) for d in docs for sp in d.passages or []]
    assert len(spans) == 2845 and len(docs) == 2304
    texts = {sp.id: d.text[sp.start : sp.end] for d, sp in spans}
    assert len(texts) == 2845
    # Passage texts equal DPR's own copies in the training file, quotes included.
    checked = 0
    for line in data("dpr-train-samples/nq3_tiny.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for ctx in rec["positive_ctxs"] + rec["negative_ctxs"] + rec["hard_negative_ctxs"]:
            pid = ctx.get("passage_id")
            if pid in texts:
                assert texts[pid] == ctx["text"], pid
                checked += 1
    assert checked > 1000


def test_nq_open_dev() -> None:
    src = parse_source(data("nq-open/NQ-open.dev.jsonl"), want="questions")
    assert src.format.name == "nq-open"
    qs = src.questions()
    assert len(qs) == 3610 and qs[0].id == "1"
    assert qs[0].text == "when was the last time anyone was on the moon"
    assert qs[0].answers == ["14 December 1972 UTC", "December 1972"]


TOPICS = [
    "topics.dpr.curated.test.txt",
    "topics.dpr.nq.dev.txt",
    "topics.dpr.nq.test.txt",
    "topics.dpr.squad.test.txt",
    "topics.dpr.trivia.dev.txt",
    "topics.dpr.trivia.test.txt",
    "topics.dpr.wq.test.txt",
]


@pytest.mark.parametrize("name", TOPICS)
def test_dpr_qas_topics(name: str) -> None:
    path = data(f"dpr-qas/{name}")
    src = parse_source(path, want="questions")
    assert src.format.name == "dpr-qas"
    qs = src.questions()
    lines = _nonblank_lines(path)
    assert len(qs) == len(lines)
    assert all(q.answers_are_regex == ("curated" in name) for q in qs)
    assert all(q.text and q.answers for q in qs)
    quoted = [q for q, line in zip(qs, lines, strict=True) if line.startswith('"')]
    if "trivia" in name:
        assert quoted, "the TriviaQA files hold CSV-quoted lines"
        # No CSV quoting is left over (questions may still start with a real quote).
        assert not any('""' in q.text for q in quoted)


def test_dpr_qas_quoted_example() -> None:
    qs = parse_source(data("dpr-qas/topics.dpr.trivia.dev.txt"), want="questions").questions()
    by_text = {q.text: q for q in qs}
    q = by_text['What was the name of the "girl with kaleidoscope eyes" in a Beatles song?']
    assert q.answers == ["Lucy Lucia", "Lucy", "LUCY"]


@pytest.mark.parametrize("domain", ["ecom", "video", "medical"])
def test_multicpr_dev(domain: str) -> None:
    root = data(f"multi-cpr/{domain}")
    src = parse_source(root, want="questions")
    assert src.format.name == "multicpr"
    qs = src.questions()
    assert len(qs) == 1000 and all(q.qrels and q.gold for q in qs)
    if domain == "ecom":
        assert qs[0].id == "200000" and qs[0].text == "大落地窗" and qs[0].qrels == {"260": 1}
    merged = read_multicpr_questions(root / "dev.query.txt", ErrorLog(), prefix=f"{domain}-")
    assert merged[0].id == f"{domain}-{qs[0].id}"


def test_kilt_fixtures() -> None:
    for name in ("gold1.jsonl", "guess1_1.jsonl"):
        src = parse_source(data(f"kilt-fixtures/{name}"), want="questions")
        assert src.format.name == "kilt"
        qs = src.questions()
        assert [q.id for q in qs] == ["1", "2", "3"]
        assert qs[0].text == "In one word, how did Chen Yi-hsiung die?"
        assert qs[0].meta["titles"] == ["Chen Yi-hsiung"]
    gold = parse_source(data("kilt-fixtures/gold1.jsonl"), want="questions").questions()
    assert [q.gold for q in gold] == [["10287141"]] * 3
    assert [q.answers for q in gold] == [["suicide"], ["suicide"], ["it was suicide"]]
    # The scorer fixtures without an input are KILT too, but hold no questions.
    for name in ("gold2.jsonl", "gold3.jsonl", "guess2_1.jsonl", "guess3_1.jsonl"):
        src = parse_source(data(f"kilt-fixtures/{name}"), want="questions")
        assert src.format.name == "kilt"
        with pytest.raises(InputError, match=r"line 1, field 'input': missing field"):
            src.questions()


def test_wikitext2() -> None:
    src = parse_source(data("wikitext2/wiki.test.raw.txt"))
    assert src.format.name == "wikitext"
    docs = list(src.documents())
    assert len(docs) == 62 and docs[0].doc_id == "Robert Boulter"
    spans = [d.text[sp.start : sp.end] for d in docs for sp in d.passages or []]
    assert len(spans) == 2185 and not any(s.startswith("= =") for s in spans)
    assert any(" @-@ " in s for s in spans)


def test_dpr_training_samples() -> None:
    nq = read_dpr_training(data("dpr-train-samples/nq3_tiny.jsonl"), ErrorLog())
    assert len(nq) == 10 and nq[0].answers == ["Linda Davis"]
    assert nq[0].positives[0][0] == "11828866" and len(nq[0].hard_negatives) == 96
    sq = read_dpr_training(data("dpr-train-samples/squad1_tiny.jsonl"), ErrorLog())
    assert all(pid is not None for ex in sq for pid, _, _ in ex.positives)  # psg_id
    src = parse_source(data("dpr-train-samples/nq3_tiny.jsonl"), want="questions")
    assert src.format.name == "dpr-train"
    gold = src.questions()[0].gold
    assert gold[0] == "11828866" and gold == list(dict.fromkeys(p for p, _, _ in nq[0].positives))


@pytest.mark.parametrize(
    ("name", "fmt", "count"),
    [
        ("questions.json", "qa-json", 3),
        ("nq_1000_dev_denspi.json", "qa-json", 1000),
        ("nq_1000_dev_dpr.csv", "dpr-qas", 1000),
        ("nq_1000_dev_orqa.jsonl", "nq-open", 1000),
        ("articles.json", "squad", None),
    ],
)
def test_densephrases_samples(name: str, fmt: str, count: int | None) -> None:
    src = parse_source(data(f"densephrases-samples/{name}"), want="questions")
    assert src.format.name == fmt
    if count is not None:
        assert len(src.questions()) == count
