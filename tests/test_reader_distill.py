"""Distilling a smaller reader from a larger one: kept layers, the soft-target losses, a student
run that moves towards its teacher, exact resume, and the settings that are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from reader_helpers import tiny_bert, towns_squad, train_config
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.errors import AnygrainError
from anygrain.reader import Reader, ReaderConfig
from anygrain.reader.losses import (
    hidden_distillation,
    selection_distillation,
    span_distillation,
)
from anygrain.train.reader.config import ReaderTrainConfig
from anygrain.train.reader.data import load_reader_data
from anygrain.train.reader.trainer import (
    ReaderTrainer,
    check_same_tokenizer,
    check_same_width,
    load_teacher,
    train_reader,
)
from anygrain.train.run_dir import LOG_FILE
from anygrain.train.runlog import TrainLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _config(squad: Path, out: Path, model: str | Path, **kw: Any) -> ReaderTrainConfig:
    return train_config(squad, out, model, **{"negatives": 2, "lr": 3e-3, **kw})


def _trainer(config: ReaderTrainConfig, student: Reader, tmp: Path, teacher: Path) -> ReaderTrainer:
    """A trainer over ``config``'s data holding ``student`` and ``teacher`` (to score batches)."""
    data = load_reader_data(config.train)
    log = TrainLog(tmp / "log", echo=False)
    return ReaderTrainer(config, student, data, tmp, log, False, load_teacher(str(teacher)))


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return towns_squad(tmp_path_factory.mktemp("towns") / "towns.json")


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    encoder, tok = tiny_bert(layers=4)
    d = tmp_path_factory.mktemp("tiny-bert-4")
    encoder.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def teacher(squad: Path, four_layers: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-layer reader trained on the towns (the teacher)."""
    out = tmp_path_factory.mktemp("teacher") / "reader"
    return train_reader(_config(squad, out, four_layers, epochs=6, lr=5e-3), progress=False)


def test_keep_layers_makes_a_smaller_reader_that_saves_and_loads(tmp_path: Path) -> None:
    encoder, tok = tiny_bert(layers=4)
    reader = Reader(encoder, tok, ReaderConfig(max_length=64, stride=16, max_question_length=16))
    old = [layer.state_dict() for layer in encoder.encoder.layer]
    assert reader.keep_layers(2) == [0, 3]
    assert len(encoder.encoder.layer) == 2 and encoder.config.num_hidden_layers == 2
    for new, was in zip(encoder.encoder.layer, [old[0], old[3]], strict=True):
        assert all(torch.equal(new.state_dict()[k], was[k]) for k in was)
    reader.eval()
    inputs = tok(["Who founded Xalor?"], ["Xalor was founded by Mirena Vos."], return_tensors="pt")
    with torch.no_grad():
        before = reader(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    reader.save_into(tmp_path / "small")
    again = Reader.load(tmp_path / "small")
    assert len(again.encoder.encoder.layer) == 2  # type: ignore[union-attr,arg-type]
    with torch.no_grad():
        after = again(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    assert torch.allclose(before.start_logits, after.start_logits, atol=1e-6)
    assert torch.allclose(before.selection_logits, after.selection_logits, atol=1e-6)
    with pytest.raises(AnygrainError, match=r"layers must be in 1\.\.2"):
        again.keep_layers(3)


def test_the_distillation_losses() -> None:
    torch.manual_seed(0)
    start, end = torch.randn(3, 8), torch.randn(3, 8)
    passage = torch.zeros(3, 8, dtype=torch.bool)
    passage[:, 2:7] = True
    passage[2] = False  # a window with no passage tokens contributes nothing
    same = span_distillation(start, end, start, end, passage, 2.0)
    assert torch.allclose(same, torch.zeros(3), atol=1e-6)
    other = span_distillation(start, end, torch.randn(3, 8), torch.randn(3, 8), passage, 2.0)
    assert bool((other[:2] > 0).all()) and float(other[2]) == 0.0
    # scores outside the passage (question, padding) are not the student's to match
    moved = start.clone()
    moved[:, 0] += 5.0
    assert torch.allclose(span_distillation(moved, end, start, end, passage, 2.0), same, atol=1e-6)

    teacher = torch.tensor([[2.0, -1.0, 0.5]])
    present = torch.tensor([[True, True, False]])
    student = torch.zeros(1, 3, requires_grad=True)
    selection_distillation(student, teacher, present).sum().backward()
    assert student.grad is not None and float(student.grad[0, 2]) == 0.0  # absent passage
    at_teacher = teacher.clone().requires_grad_(True)
    selection_distillation(at_teacher, teacher, present).sum().backward()
    assert at_teacher.grad is not None
    assert torch.allclose(at_teacher.grad, torch.zeros(1, 3), atol=1e-6)  # its minimum


def test_the_hidden_state_loss() -> None:
    torch.manual_seed(0)
    teacher = tuple(torch.randn(2, 5, 4) for _ in range(5))  # embeddings + 4 layers
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    kept = [0, 3]
    student = (teacher[0], teacher[1], teacher[4])  # the layers the student was made of
    assert torch.allclose(hidden_distillation(student, teacher, mask, kept), torch.zeros(2))
    # matched to another teacher layer, the same vectors are far
    assert bool((hidden_distillation(student, teacher, mask, [0, 2]) > 0).all())
    # pads are not compared; a real token is, as the mean over tokens, widths and layers
    padded = list(student)
    padded[2] = padded[2].clone()
    padded[2][1, 4] += 100.0
    assert torch.allclose(hidden_distillation(tuple(padded), teacher, mask, kept), torch.zeros(2))
    padded[2][1, 0] += 2.0
    moved = hidden_distillation(tuple(padded), teacher, mask, kept)
    assert float(moved[0]) == 0.0
    assert float(moved[1]) == pytest.approx(4.0 * 4 / (3 * 4) / 2)
    with pytest.raises(ValueError, match="2 student layers"):
        hidden_distillation(student, teacher, mask, [0])


@pytest.fixture(scope="module")
def fresh_two_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    encoder, tok = tiny_bert(seed=1, layers=2)
    d = tmp_path_factory.mktemp("tiny-bert-2")
    encoder.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


def test_a_student_learns_its_teachers_scores(
    squad: Path, teacher: Path, fresh_two_layers: Path, tmp_path: Path
) -> None:
    """The same one-layer run with the teacher ends closer to the teacher's scores than
    without it, and its loss is the gold loss plus the weighted distillation."""
    with_teacher = _config(
        squad, tmp_path / "kd", fresh_two_layers, teacher=str(teacher), layers=1, epochs=2
    )
    alone = _config(squad, tmp_path / "alone", fresh_two_layers, layers=1, epochs=2)
    students = [Reader.load(train_reader(c, progress=False)) for c in (with_teacher, alone)]
    assert all(len(s.encoder.encoder.layer) == 1 for s in students)  # type: ignore[union-attr,arg-type]
    log = [json.loads(ln) for ln in (tmp_path / "kd" / LOG_FILE).read_text().splitlines()]
    assert len([r for r in log if "distill" in r]) == 8

    data = load_reader_data(with_teacher.train)
    trainer = _trainer(with_teacher, students[0], tmp_path, teacher)
    batches = [trainer.step_batch(0, s) for s in range(trainer.steps_per_epoch)]
    gaps = []
    with torch.no_grad():
        for student in students:
            student.eval()
            trainer.reader = student
            gaps.append(sum(float(trainer.distillation(b, trainer.forward(b))[0]) for b in batches))
        trainer.reader = students[0]
        loss, stats = trainer.loss(batches[0])
        plain = ReaderTrainer(
            alone, students[0], data, tmp_path, TrainLog(tmp_path / "log2", echo=False), False
        )
        assert plain.teacher is None
        base, _ = plain.loss(batches[0])
    assert gaps[0] < 0.95 * gaps[1], gaps
    assert float(loss) == pytest.approx(float(base) + stats["distill"], rel=1e-5)


def test_the_hidden_state_loss_pulls_a_students_layers_to_its_teachers(
    squad: Path, teacher: Path, tmp_path: Path
) -> None:
    """A two-layer student of the four-layer teacher trained with --hidden-distill ends with
    token vectors closer to the teacher layers it was kept from (0 and 3) than the same run
    without it, and its loss adds the weighted hidden-state term."""
    runs = {
        w: _config(
            squad, tmp_path / f"h{w}", teacher, teacher=str(teacher), layers=2, epochs=2,
            hidden_distill=w,
        )
        for w in (0.0, 2.0)
    }  # fmt: skip
    students = {w: Reader.load(train_reader(c, progress=False)) for w, c in runs.items()}
    log = [json.loads(ln) for ln in (tmp_path / "h2.0" / LOG_FILE).read_text().splitlines()]
    assert [r for r in log if "hidden_distill" in r and "loss" in r]
    trainer = _trainer(runs[2.0], students[2.0], tmp_path, teacher)
    assert trainer.teacher_layers == [0, 3]
    batches = [trainer.step_batch(0, s) for s in range(trainer.steps_per_epoch)]
    gaps = {}
    with torch.no_grad():
        for w, student in students.items():
            student.eval()
            trainer.reader = student
            gaps[w] = sum(float(trainer.distillation(b, trainer.forward(b, hidden=True))[1])
                          for b in batches)  # fmt: skip
        trainer.reader = students[2.0]
        loss, stats = trainer.loss(batches[0])
    assert gaps[2.0] < 0.9 * gaps[0.0], gaps
    expect = stats["span_loss"] + stats["selection_loss"] + stats["distill"]
    assert stats["hidden_distill"] > 0
    assert float(loss) == pytest.approx(expect + 2.0 * stats["hidden_distill"], rel=1e-5)


def test_a_distillation_run_resumes_to_the_same_weights(
    squad: Path, teacher: Path, tmp_path: Path
) -> None:
    def cfg(out: str) -> ReaderTrainConfig:
        return _config(squad, tmp_path / out, teacher, teacher=str(teacher), layers=1, epochs=2)

    straight = train_reader(cfg("a"), progress=False)

    def stop(step: int) -> None:
        if step == 3:  # after the checkpoint at step 2
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_reader(cfg("b"), progress=False, on_step=stop)
    resumed = train_reader(cfg("b"), progress=False)
    a, b = Reader.load(straight).state_dict(), Reader.load(resumed).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_another_teacher_does_not_resume_a_run(squad: Path, teacher: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-teacher"
    Reader.load(teacher).save_into(other)
    cfg = _config(squad, tmp_path / "s", teacher, teacher=str(other), layers=1, epochs=1)
    train_reader(cfg, progress=False)
    changed = Reader.load(other)
    with torch.no_grad():
        changed.qa.bias.add_(1.0)
    changed.save_into(other)
    with pytest.raises(AnygrainError, match="data"):
        train_reader(cfg, progress=False)


def test_old_runs_keep_their_trajectory(squad: Path, tmp_path: Path) -> None:
    """Runs made before distillation existed (reader v2's checkpoints) still resume."""
    t = _config(squad, tmp_path, "minilm").trajectory()
    assert not {"teacher", "distill", "temperature", "layers", "hidden_distill"} & t.keys()
    assert "layers" in _config(squad, tmp_path, "minilm", layers=3).trajectory()


def test_distillation_settings_that_cannot_work_are_refused(
    squad: Path, teacher: Path, four_layers: Path, tmp_path: Path
) -> None:
    cases = [
        (dict(distill=0.5), "need a teacher"),
        (dict(temperature=4.0), "need a teacher"),
        (dict(teacher=str(teacher), distill=0.0), "would not be used"),
        (dict(hidden_distill=1.0), "hidden_distill needs a teacher"),
        (dict(teacher=str(teacher), hidden_distill=-1.0), "hidden_distill must be in"),
        (dict(teacher=str(teacher), temperature=0.0), "temperature"),
        (dict(layers=0), "layers must be >= 1"),
    ]
    for kw, says in cases:
        with pytest.raises(AnygrainError, match=says):
            train_reader(_config(squad, tmp_path / "x", teacher, **kw), progress=False)
    # an encoder is not a reader: it has no scores to learn from
    with pytest.raises(AnygrainError, match="not a trained reader"):
        train_reader(
            _config(squad, tmp_path / "y", teacher, teacher=str(four_layers)), progress=False
        )
    with pytest.raises(AnygrainError, match=r"layers must be in 1\.\.4"):
        train_reader(_config(squad, tmp_path / "z", teacher, layers=5), progress=False)
    t = load_teacher(str(teacher))
    student = Reader.load(teacher)
    student.tokenizer.add_tokens(["zzqqx"])
    with pytest.raises(AnygrainError, match="tokenizer differs"):
        check_same_tokenizer(t, student, str(teacher))
    encoder, tok = tiny_bert(layers=2, hidden=48)
    narrow = Reader(encoder, tok, ReaderConfig(max_length=64, stride=16, max_question_length=16))
    with pytest.raises(AnygrainError, match="needs the same width"):
        check_same_width(t, narrow, str(teacher))


def test_the_cli_trains_a_student(squad: Path, teacher: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli-student"
    args = ["train", "reader", "--train", f"squad:{squad}", "--out", str(out)]
    args += ["--model", str(teacher), "--teacher", str(teacher), "--layers", "1"]
    args += ["--distill", "0.5", "--temperature", "3", "--epochs", "1", "--batch-size", "6"]
    args += ["--hidden-distill", "0.25"]
    args += ["--negatives", "1", "--max-length", "160", "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    saved = json.loads((out / "reader_train_config.json").read_text())
    got = [saved[k] for k in ("teacher", "distill", "temperature", "layers", "hidden_distill")]
    assert got == [str(teacher), 0.5, 3.0, 1, 0.25]
    assert len(Reader.load(out).encoder.encoder.layer) == 1  # type: ignore[union-attr,arg-type]
    alone = ["train", "reader", "--train", f"squad:{squad}", "--out", str(tmp_path / "n")]
    r = CliRunner().invoke(app, [*alone, "--distill", "0.5", "-q"])
    assert r.exit_code == 2 and "need a teacher" in r.output, r.output
