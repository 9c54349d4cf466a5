"""The answer grain: a reader reads the top passages of any index.

A tiny random BERT reader keeps this fast; what is checked is the decoding, the score
combination, the Hit shape, and the API, CLI and evaluation paths, not the reader's
quality (bench/read_answers.py measures that).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from reader_helpers import tiny_reader
from typer.testing import CliRunner

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.reader import Reader, ReaderConfig
from anygrain.reader.answering import ReadSettings, answer_hits, combine, span_candidates
from anygrain.reader.features import collate, make_windows
from anygrain.reader.spans import best_span_bruteforce, word_boundaries

pytestmark = pytest.mark.usefixtures("torch_one_thread")

PASSAGES = [
    (
        "Loops",
        "The break statement exits the nearest enclosing loop. The continue statement "
        "skips to the next iteration. " * 3,
    ),
    ("Operators", "The '@' (at) operator is used for matrix multiplication in Python."),
    ("Bowl", "The Denver Broncos represented the AFC at Super Bowl 50. They won it."),
]


@pytest.fixture(scope="module")
def reader() -> Reader:
    # short windows, so the first passage is read in several
    rc = ReaderConfig(base_model="tiny", max_length=48, max_question_length=16, stride=8)
    return tiny_reader(rc)


def _hits(scores: list[float]) -> list[Hit]:
    return [
        Hit(Unit.PASSAGE, s, i, f"p{i}", f"d{i}", t, x)
        for i, ((t, x), s) in enumerate(zip(PASSAGES, scores, strict=True))
    ]


FP32 = ReadSettings(passages=3, retriever_weight=0.0, bf16=False)


def _bruteforce(reader: Reader, question: str, hits: list[Hit]) -> tuple[int, int, int, float]:
    """The best (passage, char start, char end, score) over every window of every passage:
    every (start, end) pair of every window checked by hand."""
    best: tuple[int, int, int, float] | None = None
    cfg = reader.config
    for pi, h in enumerate(hits):
        windows = make_windows(
            reader.tokenizer, [question], [h.text], [h.title],
            max_length=cfg.max_length, max_question_length=cfg.max_question_length,
            stride=cfg.stride,
        )  # fmt: skip
        for w in windows:
            with torch.inference_mode():
                o = reader(**collate([w], reader.tokenizer.pad_token_id).model_inputs())
            found = best_span_bruteforce(
                o.start_logits[0].tolist(), o.end_logits[0].tolist(),
                w.start_ok.tolist(), w.end_ok.tolist(), cfg.max_answer_length,
            )  # fmt: skip
            if found is None:
                continue
            i, j, score = found
            cand = (pi, int(w.offsets[i, 0]), int(w.offsets[j, 1]), score)
            if best is None or score > best[3]:
                best = cand
    assert best is not None
    return best


@pytest.mark.parametrize(
    "question",
    ["Which statement exits the nearest enclosing loop?", "Who represented the AFC?"],
)
def test_the_read_span_is_the_bruteforce_argmax(reader: Reader, question: str) -> None:
    hits = _hits([3.0, 2.0, 1.0])
    got = answer_hits(reader, [question], [hits], 1, FP32)[0][0]
    pi, a, b, score = _bruteforce(reader, question, hits)
    assert (got.passage_row, got.span) == (pi, (a, b))
    assert math.isclose(got.reader_score or 0.0, score, abs_tol=1e-4)
    assert got.score == got.reader_score  # weight 0: the reader alone decides


def test_the_retriever_weight_moves_the_answer_to_the_best_retrieved_passage(
    reader: Reader,
) -> None:
    q = "Which statement exits the nearest enclosing loop?"
    hits = _hits([1.0, 2.0, 9.0])
    cands = span_candidates(reader, [q], [hits], FP32)[0]
    free = combine(cands, hits, 1, passages=3, retriever_weight=0.0)[0]
    pulled = combine(cands, hits, 1, passages=3, retriever_weight=1000.0)[0]
    assert pulled.passage_row == 2
    # the prior is the score normalised by the spread of the passages read: 0 for the best
    assert math.isclose(pulled.score, pulled.reader_score or 0.0, abs_tol=1e-9)
    assert free.score >= (pulled.reader_score or 0.0)
    # reading only the first passage confines the answer to it
    assert combine(cands, hits, 1, passages=1, retriever_weight=0.0)[0].passage_row == 0


def test_answer_hits_carry_span_sentence_scores_and_distinct_texts(reader: Reader) -> None:
    q = "What operator is used for matrix multiplication?"
    hits = _hits([1.0, 5.0, 0.5])
    sentences = {r: ([0], [len(PASSAGES[r][1])]) for r in range(3)}
    got = answer_hits(
        reader, [q], [hits], 5, FP32, sentences=lambda rows: [sentences[r] for r in rows]
    )[0]
    assert 1 < len(got) <= 5
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)
    texts = [h.answer_text.lower() for h in got]
    assert len(set(texts)) == len(texts)
    for h in got:
        assert h.unit is Unit.ANSWER and h.span is not None and h.sentence is not None
        a, b = h.span
        assert h.sentence[0] <= a < b <= h.sentence[1]
        assert h.retrieval_score == hits[h.passage_row].score
        assert h.text == PASSAGES[h.passage_row][1]
        # no answer begins or ends on a quote mark, bracket or sentence punctuation
        assert h.answer_text[0] not in "'\"(.," and h.answer_text[-1] not in "'\")(,"
        js = h.to_json(1)
        assert js["answer"] == h.text[a:b] and js["sentence"] == list(h.sentence)
        assert js["reader_score"] == h.reader_score and js["unit"] == "answer"


def test_quotes_and_brackets_stay_outside_answers(reader: Reader) -> None:
    text = "The '@' (at) operator, U.S. and __len__."
    enc = reader.tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    import numpy as np

    offs = np.asarray(enc["offset_mapping"], dtype=np.int64)
    start_ok, end_ok = word_boundaries(text, offs, np.ones(len(offs), dtype=bool))
    starts = {text[s:e] for (s, e), ok in zip(offs, start_ok, strict=True) if ok}
    ends = {text[s:e] for (s, e), ok in zip(offs, end_ok, strict=True) if ok}
    assert "'" not in starts and "(" not in starts and "'" not in ends and ")" not in ends
    assert "@" in starts and "@" in ends and "_" in starts  # __len__ and @ can be answers
    assert "," not in ends


@pytest.fixture
def bm25_and_reader(reader: Reader, tmp_path: Path) -> tuple[Path, Path]:
    from anygrain import Index

    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "\n".join(
            json.dumps({"id": f"d{i}", "title": t, "text": x}) for i, (t, x) in enumerate(PASSAGES)
        ),
        encoding="utf-8",
    )
    Index.build(str(docs), kind="bm25", out=tmp_path / "bm25", progress=False)
    reader.save(tmp_path / "reader")
    return tmp_path / "bm25", tmp_path / "reader"


def test_the_api_answers_on_any_index_and_refuses_misplaced_options(
    bm25_and_reader: tuple[Path, Path], reader: Reader
) -> None:
    from anygrain import Index
    from anygrain.api import search_index
    from anygrain.errors import UsageError

    index_dir, reader_dir = bm25_and_reader
    idx = Index.load(index_dir)
    q = "Which team represented the AFC at Super Bowl 50?"
    got = search_index(idx, [q], 3, unit="answer", reader=str(reader_dir), read=2)[0]
    assert got and all(h.unit is Unit.ANSWER for h in got)
    # --read alone implies the answer grain; the same answers as reading the hits by hand
    again = search_index(idx, [q], 3, read=2, reader=str(reader_dir))[0]
    assert [(h.passage_row, h.span) for h in again] == [(h.passage_row, h.span) for h in got]
    passages = idx.search([q], 2)
    direct = answer_hits(Reader.load(reader_dir), [q], passages, 3, ReadSettings(passages=2))[0]
    assert [(h.passage_row, h.span) for h in direct] == [(h.passage_row, h.span) for h in got]
    with pytest.raises(UsageError, match="answer grain"):
        search_index(idx, [q], 3, unit="passage", read=2)
    for bad in ({"read": 0}, {"retriever_weight": float("nan")}, {"retriever_weight": 1e308}):
        with pytest.raises(AnygrainError):
            search_index(idx, [q], 3, unit="answer", reader=str(reader_dir), **bad)  # type: ignore[arg-type]


def test_cli_search_and_eval_at_the_answer_grain(
    bm25_and_reader: tuple[Path, Path], tmp_path: Path
) -> None:
    from anygrain.cli.main import app

    index_dir, reader_dir = bm25_and_reader
    runner = CliRunner()
    q = "What operator is used for matrix multiplication?"
    args = ["search", str(index_dir), q, "--unit", "answer", "--reader", str(reader_dir)]
    r = runner.invoke(app, [*args, "--read", "2", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(rows) == 2 and all(x["unit"] == "answer" for x in rows)
    assert all(x["text"][x["span"][0] : x["span"][1]] == x["answer"] for x in rows)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and rows[0]["answer"] in r.stdout
    qfile = tmp_path / "q.txt"
    qfile.write_text(q + "\nWho represented the AFC?\n", encoding="utf-8")
    r = runner.invoke(
        app,
        ["search", str(index_dir), "--questions", str(qfile), "--read", "2", "--reader",
         str(reader_dir), "-k", "1", "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["hits"][0]["unit"] for x in lines] == ["answer", "answer"]
    r = runner.invoke(app, ["search", str(index_dir), q, "--unit", "passage", "--read", "2"])
    assert r.exit_code != 0 and "answer grain" in r.output


def test_eval_reader_reports_each_k_from_one_reading(
    bm25_and_reader: tuple[Path, Path], squad_file: Path, reader: Reader
) -> None:
    from anygrain import Index, load_questions
    from anygrain.reader.evaluate import evaluate_reader

    index_dir, _ = bm25_and_reader
    qs = list(load_questions(f"squad:{squad_file}"))
    idx = Index.load(index_dir)
    rep = evaluate_reader(idx, reader, qs, k=3, at=[1, 2], bf16=False)
    one = evaluate_reader(idx, reader, qs, k=1, bf16=False)
    assert rep["em@1"] == one["em"] and rep["f1@1"] == one["f1"]
    assert {"em", "f1", "em@2", "f1@2"} <= set(rep)
