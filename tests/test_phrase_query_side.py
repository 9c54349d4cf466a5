"""Query-side fine-tuning of a phrase model against its index: loss, positives, training, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from test_phrase_helpers import make_tiny_model
from typer.testing import CliRunner

from anygrain.api import load_questions
from anygrain.cli.main import app as main_app
from anygrain.cli.train import train_query_side_cmd
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.search import Phrases
from anygrain.train.phrase.config import PhraseQuerySideConfig, QuerySideLoss
from anygrain.train.phrase.query_side import (
    candidate_loss,
    load_query_side_data,
    positives,
    question_modules,
    train_phrase_query_side,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def index(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> PhraseIndex:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    model_dir = m.save(tmp_path_factory.mktemp("phrase-model") / "m")
    out = tmp_path_factory.mktemp("idx") / "phrase"
    # half the vectors: the answers' tokens ("1991") must be stored for the positives
    idx = PhraseIndex.build_from(
        f"squad:{squad}", out, model=model_dir, compress="sq8", keep=0.5, progress=False
    )
    return idx


def _config(index: PhraseIndex, squad: Path, out: Path, **kw: object) -> PhraseQuerySideConfig:
    settings: dict[str, object] = {
        "epochs": 6,
        "batch_size": 4,
        "lr": 1e-3,
        "top_k": 50,
        "loss": "both",
        "log_every": 1,
        "checkpoint_every": 3,
    }
    settings.update(kw)
    return PhraseQuerySideConfig(
        index=str(index.path),
        train=[f"squad:{squad}"],
        out=str(out),
        **settings,  # type: ignore[arg-type]
    )


def test_candidate_loss_matches_a_hand_computation() -> None:
    qs, qe = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    sv = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    ev = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    pos = torch.tensor([True, False, True])
    scores = np.array([1.0 + 2.0, 0.0, 2.0])  # start.q_start + end.q_end
    want = np.log(np.exp(scores).sum()) - np.log(np.exp(scores[[0, 2]]).sum())
    got = candidate_loss(qs, qe, sv, ev, pos)
    assert float(got) == pytest.approx(want, abs=1e-6)


def test_positives_by_answer_text_and_by_gold_passage(index: PhraseIndex, squad: Path) -> None:
    q = next(q for q in load_questions(f"squad:{squad}") if q.answers == ["1991"])
    row = index.corpus.row_of(q.gold[0])
    t = index.table
    lo, hi = int(index.table.passage_ptr[row]), int(index.table.passage_ptr[row + 1])
    text = index.store.column("text", [row])[0]
    # The token whose characters are "1991" is a one-word phrase; another token is not the answer.
    tok = next(i for i in range(lo, hi) if text[t.cs[i] : t.ce[i]] == "1991")
    other = next(i for i in range(lo, hi) if text[t.cs[i] : t.ce[i]] == "Python")
    elsewhere = 0 if row != 0 else int(index.table.passage_ptr[1])
    ph = Phrases(
        np.array([tok, other, elsewhere]),
        np.array([tok, other, elsewhere]),
        np.zeros(3, np.float32),
    )
    gold = np.array([row])
    assert positives(index, ph, q, gold, QuerySideLoss.PHRASE).tolist() == [True, False, False]
    assert positives(index, ph, q, gold, QuerySideLoss.PASSAGE).tolist() == [True, True, False]
    assert positives(index, ph, q, gold, QuerySideLoss.BOTH).tolist() == [True, True, False]


def _mean_loss(index: PhraseIndex, model: PhraseEncoder, squad: Path) -> float:
    """Mean query-side loss over the training questions with a positive (fixed candidates)."""
    qs = load_query_side_data([f"squad:{squad}"], index)
    s, e = model.encode_questions([q.text for q in qs.questions])
    found = index.search_phrases(s, e, top_k=50)
    losses = []
    for i, (q, ph) in enumerate(zip(qs.questions, found, strict=True)):
        pos = positives(index, ph, q, qs.gold_rows[i], QuerySideLoss.BOTH)
        if pos.any():
            sv = torch.from_numpy(np.asarray(index.table.start[ph.start], dtype=np.float32))
            ev = torch.from_numpy(np.asarray(index.table.end[ph.end], dtype=np.float32))
            args = (torch.from_numpy(s[i]), torch.from_numpy(e[i]), sv, ev)
            losses.append(float(candidate_loss(*args, torch.from_numpy(pos))))
    return float(np.mean(losses))


def test_training_lowers_the_loss_and_keeps_the_phrase_side(
    index: PhraseIndex, squad: Path, tmp_path: Path
) -> None:
    before = _mean_loss(index, index.model, squad)
    q_before = {k: v.clone() for k, v in question_modules(index.model).state_dict().items()}
    out = train_phrase_query_side(_config(index, squad, tmp_path / "qs"), progress=False)
    tuned = Index.load(index.path, model=out)  # the index accepts it: same phrase encoder
    assert isinstance(tuned, PhraseIndex)
    assert tuned.model.phrase_fingerprint() == index.manifest["model"]["fingerprint"]
    after = _mean_loss(tuned, tuned.model, squad)
    assert after < before
    q_after = question_modules(tuned.model).state_dict()
    assert any(not torch.equal(q_before[k], q_after[k]) for k in q_before)
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["event"] == "start" and log[-1]["event"] == "done"
    # A rerun of a finished run does nothing.
    assert train_phrase_query_side(_config(index, squad, tmp_path / "qs"), progress=False) == out


def test_resume_after_interrupt_gives_identical_weights(
    index: PhraseIndex, squad: Path, tmp_path: Path
) -> None:
    full = train_phrase_query_side(_config(index, squad, tmp_path / "full"), progress=False)

    def stop_at_4(step: int) -> None:
        if step == 4:
            raise KeyboardInterrupt

    part = tmp_path / "part"
    fresh = Index.load(index.path)  # a clean copy of the base model (training mutates it)
    assert isinstance(fresh, PhraseIndex)
    with pytest.raises(KeyboardInterrupt):
        train_phrase_query_side(_config(fresh, squad, part), progress=False, on_step=stop_at_4)
    train_phrase_query_side(_config(index, squad, part), progress=False)
    a = question_modules(PhraseEncoder.load(full)).state_dict()
    b = question_modules(PhraseEncoder.load(part)).state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_errors_are_clear(index: PhraseIndex, squad: Path, tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="loss must be one of"):
        train_phrase_query_side(_config(index, squad, tmp_path / "x", loss="nope"))
    other = tmp_path / "other.json"
    data = json.loads(squad.read_text())
    data["data"][0]["title"] = "An article the index has never seen"
    other.write_text(json.dumps(data))
    with pytest.raises(AnygrainError, match="not in the index's corpus"):
        load_query_side_data([f"squad:{other}"], index)


def test_cli_trains_and_eval_uses_the_model(
    index: PhraseIndex, squad: Path, tmp_path: Path
) -> None:
    app = typer.Typer()
    app.command("phrase-query-side")(train_query_side_cmd)
    app.command("other")(lambda: None)
    runner = CliRunner()
    out = tmp_path / "qs"
    args = ["phrase-query-side", str(index.path), "--train", f"squad:{squad}", "--out", str(out)]
    r = runner.invoke(app, [*args, "--epochs", "1", "--batch-size", "4", "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        main_app,
        ["eval", str(index.path), "--questions", f"squad:{squad}", "--model", str(out), "--json"],
    )
    assert r.exit_code == 0, r.output
    assert "em" in json.loads(r.stdout)["metrics"]
