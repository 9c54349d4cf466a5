"""The shared step loop: log means (NaN skipped), checkpoint cadence, stops, interrupts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from anygrain.train.loop import LoopSettings, StepResult, run_loop
from anygrain.train.runlog import TrainLog


class FakeTrainer:
    def __init__(self, total: int, per_epoch: int, losses: list[float]) -> None:
        self.global_step = 0
        self.total_steps = total
        self.per_epoch = per_epoch
        self.losses = losses
        self.checkpoints: list[int] = []

    def train_step(self) -> StepResult:
        loss = self.losses[self.global_step]
        self.global_step += 1
        return StepResult({"loss": loss}, 4, self.global_step % self.per_epoch == 0)

    def save_checkpoint(self) -> Path:
        self.checkpoints.append(self.global_step)
        return Path(f"ckpt-{self.global_step}")

    def log_fields(self) -> dict[str, Any]:
        return {"lr": 0.5}


def _records(log: TrainLog) -> list[dict[str, Any]]:
    return [r for r in log.records() if "loss" in r]


def test_log_means_skip_nan_and_checkpoints_follow_the_cadence(tmp_path: Path) -> None:
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    trainer = FakeTrainer(total=6, per_epoch=3, losses=[1.0, math.nan, 3.0, 4.0, 6.0, 8.0])
    seen: list[int] = []
    stats = run_loop(
        trainer,
        log,
        LoopSettings(log_every=2, checkpoint_every=0, progress=False),
        on_step=seen.append,
    )
    assert seen == [1, 2, 3, 4, 5, 6]
    recs = _records(log)
    # steps 2 (1, NaN), 3 (end of epoch: 3), 4 (4), 6 (6, 8)
    assert [(r["step"], r["loss"]) for r in recs] == [(2, 1.0), (3, 3.0), (4, 4.0), (6, 7.0)]
    assert all(r["lr"] == 0.5 and r["questions_per_s"] > 0 for r in recs)
    assert trainer.checkpoints == [3, 6]  # each epoch's end, the last one included
    assert stats.items == 24 and stats.stopped == ""
    assert stats.as_dict("questions")["questions"] == 24


def test_no_checkpoint_after_last_step_when_the_model_is_saved_next(tmp_path: Path) -> None:
    trainer = FakeTrainer(total=4, per_epoch=2, losses=[1.0] * 4)
    settings = LoopSettings(checkpoint_every=1, checkpoint_after_last=False, progress=False)
    run_loop(trainer, TrainLog(tmp_path / "log.jsonl", echo=False), settings)
    assert trainer.checkpoints == [1, 2, 3]


def test_should_stop_checkpoints_and_says_why(tmp_path: Path) -> None:
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    trainer = FakeTrainer(total=10, per_epoch=10, losses=[1.0] * 10)
    stats = run_loop(
        trainer,
        log,
        LoopSettings(progress=False),
        should_stop=lambda: "max_steps 3" if trainer.global_step >= 3 else "",
    )
    assert stats.stopped == "max_steps 3" and trainer.global_step == 3
    assert trainer.checkpoints == [3]
    said = [r["message"] for r in log.records() if r.get("event") == "info"]
    assert said == ["stopped after max_steps 3: checkpoint ckpt-3; rerun to resume"]


def test_interrupt_writes_a_checkpoint_then_propagates(tmp_path: Path) -> None:
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    trainer = FakeTrainer(total=10, per_epoch=10, losses=[1.0] * 10)

    def interrupt(step: int) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_loop(
            trainer,
            log,
            LoopSettings(progress=False),
            on_step=interrupt,
            on_interrupt=lambda: " and model saved",
        )
    assert trainer.checkpoints == [2]
    last = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert last["event_kind"] == "interrupted"
    assert last["message"] == "interrupted: checkpoint ckpt-2 and model saved (rerun to resume)"
