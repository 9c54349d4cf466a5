"""A run directory's lifecycle: start, finish, recognise a finished run on every rerun."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from anygrain.errors import AnygrainError
from anygrain.train.checkpoint import checkpoint_dir, list_checkpoints, save_checkpoint
from anygrain.train.run_dir import LOG_FILE, RunDir
from anygrain.train.saved_config import SavedConfig


@dataclass
class ToyConfig(SavedConfig):
    FILE: ClassVar[str] = "toy_config.json"
    BOOKKEEPING: ClassVar[frozenset[str]] = frozenset({"log_every"})
    lr: float = 0.1
    log_every: int = 10


def _finish(run: RunDir, fingerprint: str = "data-1") -> None:
    (run.out / "model.json").write_text("{}")
    run.finish(7, fingerprint, keep_checkpoints=False, loss=0.5)


def test_finished_run_is_recognised_on_every_rerun(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    assert run.open(resume=True) is None
    run.start(examples=3)
    _finish(run)
    before = (tmp_path / LOG_FILE).read_text()
    for _ in range(3):  # the third call once found its own message and retrained
        again = RunDir(tmp_path, ToyConfig(log_every=99), progress=True)
        assert again.already_trained("model.json", "data-1", resume=True)
    assert (tmp_path / LOG_FILE).read_text() == before


def test_finished_model_from_other_settings_or_data_is_not_trained_over(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    run.open(resume=True)
    run.start()
    _finish(run)
    with pytest.raises(AnygrainError, match=r"other settings \(lr\).*--no-resume"):
        RunDir(tmp_path, ToyConfig(lr=0.2), progress=False).already_trained(
            "model.json", "data-1", resume=True
        )
    with pytest.raises(AnygrainError, match="other training data"):
        run.already_trained("model.json", "data-2", resume=True)
    # --no-resume asks to train over it; without the model file there is nothing to keep
    assert not run.already_trained("model.json", "data-2", resume=False)
    assert not run.already_trained("other.json", "data-2", resume=True)


def test_info_after_done_does_not_hide_it(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    run.open(resume=True)
    run.start()
    _finish(run)
    run.log.say("a note written later", -1)
    assert run.already_trained("model.json", "data-1", resume=True)
    run.log.write({"step": 8, "loss": 0.1})  # a later log step: the run is not done any more
    assert not run.already_trained("model.json", "data-1", resume=True)


def test_open_resumes_latest_checkpoint_or_clears_the_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    run.start()
    for step in (2, 4):
        save_checkpoint(tmp_path, {"step": step}, global_step=step, keep=2)
    ckpt = run.open(resume=True)
    assert ckpt is not None and ckpt == list_checkpoints(tmp_path)[-1]
    assert json.loads((tmp_path / "toy_config.json").read_text())["lr"] == pytest.approx(0.1)
    assert (tmp_path / LOG_FILE).exists()
    assert run.open(resume=False) is None
    assert not checkpoint_dir(tmp_path).exists() and not (tmp_path / LOG_FILE).exists()


def test_finish_keeps_checkpoints_only_when_asked(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    save_checkpoint(tmp_path, {"step": 1}, global_step=1, keep=1)
    run.finish(1, "d", keep_checkpoints=True)
    assert list_checkpoints(tmp_path)
    run.finish(1, "d", keep_checkpoints=False)
    assert not list_checkpoints(tmp_path)
    done = json.loads((tmp_path / LOG_FILE).read_text().splitlines()[-1])
    assert done["event"] == "done" and done["trajectory"] == {"lr": 0.1}


def test_resumed_drops_later_records_and_says_where(tmp_path: Path) -> None:
    run = RunDir(tmp_path, ToyConfig(), progress=False)
    run.start()
    for step in (10, 20, 30):
        run.log.write({"step": step, "loss": 1.0})
    run.resumed(tmp_path / "step-000000020.pt", 20)
    records = run.log.records()
    assert [r["step"] for r in records] == [0, 10, 20, 20]
    assert records[-1]["message"] == "resumed from step-000000020.pt (step 20)"
