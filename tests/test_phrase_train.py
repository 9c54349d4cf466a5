"""Phrase training: data alignment, loss going down, exact resume, budget stop, teacher, CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from test_phrase_helpers import PARAGRAPHS, make_tiny_model, write_squad
from typer.testing import CliRunner

from anygrain.cli.train import train_phrase_cmd
from anygrain.errors import AnygrainError
from anygrain.phrase import PhraseEncoder
from anygrain.train.phrase.config import PhraseTrainConfig
from anygrain.train.phrase.data import load_phrase_data, plan_epoch
from anygrain.train.phrase.trainer import (
    NOT_USED_FILE,
    PhraseTrainer,
    init_model,
    train_phrase,
)
from anygrain.train.run_dir import LOG_FILE

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    paras = [*PARAGRAPHS]
    # One answer that cannot be a phrase (starts inside a word) and one long passage.
    paras.append(
        ("Nation", "The nation is international and old.", [("What part of nation?", "ation")])
    )
    long = " ".join(f"token{i}" for i in range(50)) + " ends with the answer here."
    paras.append(("Long", long, [("What is at the end?", "the answer")]))
    return write_squad(tmp_path_factory.mktemp("data") / "train.json", paras)


def _config(tiny: Path, squad: Path, out: Path, **kw: object) -> PhraseTrainConfig:
    base: dict[str, object] = {
        "train": [f"squad:{squad}"],
        "out": str(out),
        "model": str(tiny),
        "epochs": 3,
        "batch_size": 4,
        "lr": 2e-3,
        "warmup_ratio": 0.1,
        "max_passage_length": 40,
        "doc_stride": 10,
        "max_query_length": 24,
        "pre_batch": 2,
        "pre_batch_from": 0.3,
        "checkpoint_every": 2,
        "log_every": 1,
    }
    base.update(kw)
    return PhraseTrainConfig(**base)  # type: ignore[arg-type]


def test_training_data_aligns_answers_and_reports_failures(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny, squad, tmp_path)
    model = init_model(cfg)
    data = load_phrase_data(cfg.train, model)
    rep = data.report()
    assert rep["questions"] == 12 and rep["examples"] == 11
    assert rep["questions_dropped_unaligned"] == 1
    assert rep["answers"]["failed_by_reason"] == {"not_on_token_word_boundary": 1}
    # the question left out is named, with its file and reason, not only counted
    assert [(u["source"], u["reason"]) for u in data.not_used] == [
        (cfg.train[0], "unaligned: not_on_token_word_boundary")
    ]
    assert data.not_used[0]["id"] not in {e.qid.split(":", 1)[1] for e in data.examples}
    for e in data.examples:  # every example's span is exactly its answer text
        w = data.windows[e.window]
        _, _, text = data.passages[w.passage]
        span = text[w.cs[e.start] : w.ce[e.end]]
        assert span in {a for _, _, qas in PARAGRAPHS for _, a in qas} | {"the answer"}
    assert len(data.windows) > len(data.passages)  # the long passage has several windows
    batches = plan_epoch(data, 0, 1, 4)
    assert sorted(i for b in batches for i in b) == list(range(len(data.examples)))
    assert all(len(b) <= 4 for b in batches)
    for b in batches:  # a window's questions stay together
        wins = [data.examples[i].window for i in b]
        for w in set(wins):
            assert sum(1 for e in data.examples if e.window == w) == wins.count(w)
    assert plan_epoch(data, 0, 1, 4) == batches and plan_epoch(data, 1, 1, 4) != batches


def _eval_loss(trainer: PhraseTrainer) -> float:
    trainer.model.eval()
    with torch.no_grad():
        parts, _ = trainer.losses(list(range(len(trainer.data.examples))), prebatch=False)
    return float(parts["single"])


def test_training_steps_lower_the_loss(tiny: Path, squad: Path, tmp_path: Path) -> None:
    cfg = _config(tiny, squad, tmp_path, epochs=8, pre_batch=0)
    model = init_model(cfg)
    data = load_phrase_data(cfg.train, model)
    trainer = PhraseTrainer(cfg, model, data)
    before = _eval_loss(trainer)
    for _ in range(trainer.total_steps):
        trainer.step()
    after = _eval_loss(trainer)
    assert after < 0.7 * before, (before, after)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return PhraseEncoder.load(path).state_dict()


def test_resume_after_interrupt_gives_identical_weights(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    full = train_phrase(_config(tiny, squad, tmp_path / "full"), progress=False)
    log = [json.loads(x) for x in (full / LOG_FILE).read_text().splitlines()]
    assert log[-1]["event"] == "done" and any(r.get("prebatch") for r in log)
    assert "threshold" in log[-1]["filter_calibration"]
    assert not list((full / "checkpoints").glob("*.pt"))

    def stop_at_5(step: int) -> None:
        if step == 5:
            raise KeyboardInterrupt

    part = tmp_path / "part"
    with pytest.raises(KeyboardInterrupt):
        train_phrase(_config(tiny, squad, part), progress=False, on_step=stop_at_5)
    assert (part / "anygrain_phrase.json").exists()  # Ctrl-C saves the model too
    train_phrase(_config(tiny, squad, part), progress=False)
    a, b = _weights(full), _weights(part)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # A finished run is not repeated; other settings refuse the old checkpoints.
    assert train_phrase(_config(tiny, squad, part), progress=False) == part


def test_step_and_time_budgets_stop_cleanly_and_resume(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    out = tmp_path / "budget"
    train_phrase(_config(tiny, squad, out, max_steps=3), progress=False)
    last = json.loads((out / LOG_FILE).read_text().splitlines()[-1])
    assert last["event"] == "stopped" and last["step"] == 3
    assert (out / "anygrain_phrase.json").exists() and list((out / "checkpoints").glob("*.pt"))
    train_phrase(_config(tiny, squad, out, max_minutes=1e-6), progress=False)
    last = json.loads((out / LOG_FILE).read_text().splitlines()[-1])
    assert last["event"] == "stopped" and last["step"] == 4 and "time budget" in last["reason"]
    with pytest.raises(AnygrainError, match="different settings"):
        train_phrase(_config(tiny, squad, out, lr=1e-4), progress=False)


def test_schedule_fits_a_time_budget_and_survives_resume(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny, squad, tmp_path, epochs=10)
    model = init_model(cfg)
    data = load_phrase_data(cfg.train, model)
    trainer = PhraseTrainer(cfg, model, data)
    planned = trainer.total_steps
    trainer.step()
    trainer.step()
    assert trainer.fit_to_budget(seconds_per_step=1.0, seconds_left=10.3)  # 0.97 * 10.3 -> 9 more
    assert trainer.total_steps == 11 < planned
    assert trainer.prebatch_step == int(cfg.pre_batch_from * 11) and trainer.warmup_steps == 1
    state = trainer.state("fp")
    while trainer.global_step < trainer.total_steps:
        trainer.step()
    assert trainer.scheduler.get_last_lr()[0] == 0.0  # decayed to 0 at the fitted end
    again = PhraseTrainer(cfg, init_model(cfg), data)
    again.restore(state, "fp", tmp_path)
    assert again.total_steps == 11 and again.fitted
    assert again.fit_to_budget(seconds_per_step=1.0, seconds_left=1e6)  # faster: back to the plan
    assert again.total_steps == planned


class FakeTeacher:
    """A uniform distribution over the passage tokens: far from the student, so KL > 0."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self,
        questions: Sequence[str],
        titles: Sequence[str],
        passages: Sequence[str],
        offsets: Sequence[np.ndarray],
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        self.calls += 1
        out = []
        for off in offsets:
            p = (off[:, 0] >= 0).astype(np.float64)
            out.append((p / p.sum(), p / p.sum()))
        return out


def test_distillation_uses_the_teacher(tiny: Path, squad: Path, tmp_path: Path) -> None:
    cfg = _config(tiny, squad, tmp_path, epochs=1)
    model = init_model(cfg)
    data = load_phrase_data(cfg.train, model)
    teacher = FakeTeacher()
    trainer = PhraseTrainer(cfg, model, data, teacher=teacher)
    parts, _ = trainer.step()
    assert teacher.calls == 1 and parts["distill"] > 0
    total = (
        cfg.lambda_single * parts["single"]
        + cfg.lambda_distill * parts["distill"]
        + cfg.lambda_neg * parts["neg"]
        + cfg.lambda_filter * parts["filter"]
    )
    assert abs(parts["total"] - total) < 1e-4
    no_teacher = PhraseTrainer(cfg, init_model(cfg), data).step()[0]
    assert no_teacher["distill"] == 0.0


def test_separate_question_encoders_and_bf16_train(tiny: Path, squad: Path, tmp_path: Path) -> None:
    cfg = _config(
        tiny,
        squad,
        tmp_path,
        epochs=1,
        question_encoder="separate",
        bf16=True,
        in_batch=False,
        pre_batch=0,
    )
    model = init_model(cfg)
    assert len(model.questions) == 2
    trainer = PhraseTrainer(cfg, model, load_phrase_data(cfg.train, model))
    parts, n = trainer.step()
    assert n > 0 and np.isfinite(parts["total"]) and parts["neg"] == 0.0


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="question_encoder"):
        PhraseTrainConfig(train=["x"], out=str(tmp_path), question_encoder="both").validate()
    with pytest.raises(AnygrainError, match="doc_stride"):
        PhraseTrainConfig(train=["x"], out=str(tmp_path), doc_stride=300).validate()
    with pytest.raises(AnygrainError, match="threads"):
        PhraseTrainConfig(train=["x"], out=str(tmp_path), threads=0).validate()
    with pytest.raises(AnygrainError, match="grad_clip must be global or per-side"):
        PhraseTrainConfig(train=["x"], out=str(tmp_path), grad_clip="each").validate()
    # Bookkeeping settings may change on resume; the rest may not.
    base = PhraseTrainConfig(train=["x"], out="a")
    assert (
        PhraseTrainConfig(train=["x"], out="b", threads=1, max_minutes=5).trajectory()
        == base.trajectory()
    )
    assert PhraseTrainConfig(train=["x"], out="a", lr=1.0).trajectory() != base.trajectory()
    # grad_clip came later: at its old behaviour it stays out of the trajectory, so runs
    # made before it (their checkpoints and logs) still resume and match.
    assert "grad_clip" not in base.trajectory()
    per_side = PhraseTrainConfig(train=["x"], out="a", grad_clip="per-side").trajectory()
    assert per_side["grad_clip"] == "per-side"
    cfg = PhraseTrainConfig(train=["x"], out=str(tmp_path))
    cfg.save(tmp_path)
    assert PhraseTrainConfig.load(tmp_path) == cfg


def test_cli_trains_a_model(tiny: Path, squad: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(train_phrase_cmd)
    out = tmp_path / "cli"
    r = CliRunner().invoke(
        app,
        [
            "--train", f"squad:{squad}", "--model", str(tiny), "--out", str(out), "--epochs", "1",
            "--batch-size", "4", "--max-passage-length", "40", "--doc-stride", "10", "--no-prebatch",
            "--quiet",
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert PhraseEncoder.load(out).config.include_title
    assert json.loads((out / "train_config.json").read_text())["pre_batch"] == 0
    not_used = [json.loads(x) for x in (out / NOT_USED_FILE).read_text().splitlines()]
    assert [u["reason"] for u in not_used] == ["unaligned: not_on_token_word_boundary"]


def test_max_examples_takes_whole_passages() -> None:
    from anygrain.train.phrase.data import sample_by_passage

    owner = [p for p in range(20) for _ in range(5)]  # 20 passages x 5 questions
    pick = sample_by_passage(owner, 23, seed=3)
    assert len(pick) == 23 and len(set(pick.tolist())) == 23
    assert list(pick) == sorted(pick)
    counts: dict[int, int] = {}
    for i in pick:
        counts[owner[i]] = counts.get(owner[i], 0) + 1
    # four whole passages and three questions of a fifth, not 23 scattered questions
    assert sorted(counts.values()) == [3, 5, 5, 5, 5]
    assert list(sample_by_passage(owner, 23, seed=3)) == list(pick)
    assert list(sample_by_passage(owner, 23, seed=4)) != list(pick)


def test_per_side_clipping_trains_and_logs_each_sides_gradient_norm(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny, squad, tmp_path, pre_batch=0, grad_clip="per-side", max_grad_norm=1e-3)
    model = init_model(cfg)
    trainer = PhraseTrainer(cfg, model, load_phrase_data(cfg.train, model))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    parts, _ = trainer.step()
    assert parts["grad_norm_phrase"] > 1e-3 and parts["grad_norm_question"] > 1e-3
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("phrase.") for k in changed)
    assert any(k.startswith("questions.") for k in changed)


def test_token_negatives_add_every_other_passage_token(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    gold = _config(tiny, squad, tmp_path, pre_batch=0)
    tokens = _config(tiny, squad, tmp_path, pre_batch=0, in_batch_negatives="tokens")
    assert tokens.trajectory()["in_batch_negatives"] == "tokens"
    assert "in_batch_negatives" not in gold.trajectory()
    model = init_model(gold)
    model.eval()  # no dropout: both losses see the same vectors
    data = load_phrase_data(gold.train, model)
    batch = list(range(len(data.examples)))
    assert len({data.windows[e.window].passage for e in data.examples}) > 1
    with torch.no_grad():
        g, _ = PhraseTrainer(gold, model, data).losses(batch, prebatch=False)
        t, _ = PhraseTrainer(tokens, model, data).losses(batch, prebatch=False)
    # Other passages' golds are among their tokens: a superset of negatives, a larger loss;
    # the single-passage loss is untouched.
    assert float(t["neg"]) > float(g["neg"]) + 1e-3
    assert float(t["single"]) == pytest.approx(float(g["single"]))
    with pytest.raises(AnygrainError, match="in_batch_negatives must be gold or tokens"):
        PhraseTrainConfig(train=["x"], out="o", in_batch_negatives="all").validate()


def test_frozen_embeddings_stay_the_backbones(tiny: Path, squad: Path, tmp_path: Path) -> None:
    cfg = _config(tiny, squad, tmp_path / "m", epochs=1, pre_batch=0, freeze_embeddings=True)
    out = train_phrase(cfg, progress=False)
    trained = PhraseEncoder.load(out)
    base = PhraseEncoder.from_pretrained(tiny)
    moved = False
    for enc in trained.encoders():
        for k, v in enc.state_dict().items():
            b = base.phrase.state_dict()[k]
            if k.startswith("embeddings."):
                assert torch.equal(v, b), k
            else:
                moved |= not torch.equal(v, b)
    assert moved  # the layers did train
    # the setting is part of the run: a rerun without it is a different model
    cfg2 = _config(tiny, squad, tmp_path / "m", epochs=1, pre_batch=0)
    with pytest.raises(AnygrainError, match="freeze_embeddings"):
        train_phrase(cfg2, progress=False)


def test_bm25_hard_negatives_are_mined_and_join_the_softmax(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    from anygrain.train.phrase.hard_negatives import mine_hard_passages

    passages = [("A", "the cat sat on the mat"), ("B", "a cat and a mat"), ("C", "dogs bark")]
    qs = [("q1", 0, "where did the cat sit", "mat"), ("q2", 2, "which cat sat", "dogs")]
    mined = mine_hard_passages(passages, qs, n=2)
    # never the question's own passage, never one that holds the answer text
    assert mined == {"q2": [0, 1]}
    cfg = _config(tiny, squad, tmp_path, pre_batch=0)
    hard = _config(tiny, squad, tmp_path, pre_batch=0, hard_negatives=1)
    assert hard.trajectory()["hard_negatives"] == 1 and "hard_negatives" not in cfg.trajectory()
    model = init_model(cfg)
    model.eval()
    data = load_phrase_data(cfg.train, model)
    assert data.add_hard_negatives(1) > 0
    # one passage's questions: their hard negatives are other passages, not in the batch
    w0 = next(e.window for e in data.examples if e.qid in data.hard_windows)
    batch = [i for i, e in enumerate(data.examples) if e.window == w0]
    with torch.no_grad():
        g, _ = PhraseTrainer(cfg, model, data).losses(batch, prebatch=False)
        h, _ = PhraseTrainer(hard, model, data).losses(batch, prebatch=False)
    assert float(h["neg"]) > float(g["neg"]) + 1e-4  # more negatives in the softmax
    assert float(h["single"]) == pytest.approx(float(g["single"]))
    out = train_phrase(
        _config(tiny, squad, tmp_path / "h", epochs=1, hard_negatives=1), progress=False
    )
    log = (out / "train_log.jsonl").read_text(encoding="utf-8")
    assert "BM25 hard negatives for" in log


def test_training_continues_from_a_saved_or_packed_model(
    tiny: Path, squad: Path, tmp_path: Path
) -> None:
    first = train_phrase(
        _config(tiny, squad, tmp_path / "a", epochs=1, pre_batch=0, freeze_embeddings=True),
        progress=False,
    )
    m1 = PhraseEncoder.load(first)
    more = _config(tiny, squad, tmp_path / "b", epochs=1, pre_batch=0, model=str(first))
    second = PhraseEncoder.load(train_phrase(more, progress=False))
    # it starts where the first run ended (same heads' shapes, weights moved on from there)
    changed = any(
        not torch.equal(a, b)
        for a, b in zip(
            m1.phrase.state_dict().values(), second.phrase.state_dict().values(), strict=True
        )
    )
    assert changed and second.config.max_phrase_words == m1.config.max_phrase_words
    with pytest.raises(AnygrainError, match="other settings"):
        train_phrase(
            _config(tiny, squad, tmp_path / "c", epochs=1, model=str(first), max_phrase_words=3),
            progress=False,
        )
