"""Shared trainer plumbing: checkpoint files and optimizer groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from anygrain.errors import AnygrainError
from anygrain.train.checkpoint import (
    check_compatible,
    checkpoint_format,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_checkpoints,
    save_checkpoint,
)
from anygrain.train.optim import param_groups


def _state(traj: dict[str, object]) -> dict[str, object]:
    return {"trajectory": json.dumps(traj, sort_keys=True), "data_fingerprint": "abc", "w": 1}


def test_save_keeps_newest_and_loads_its_own_kind(tmp_path: Path) -> None:
    fmt = checkpoint_format("phrase")
    for step in (3, 10, 7):
        save_checkpoint(tmp_path, _state({"lr": 1}), global_step=step, keep=2, fmt=fmt)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["step-000000007.pt", "step-000000010.pt"]  # ordered by step, oldest pruned
    last = latest_checkpoint(tmp_path)
    assert last is not None
    state = load_checkpoint(last, fmt=fmt)
    assert state["global_step"] == 10 and state["w"] == 1
    with pytest.raises(AnygrainError, match="not an anygrain reader training checkpoint"):
        load_checkpoint(last, fmt=checkpoint_format("reader"))
    remove_checkpoints(tmp_path)
    assert list_checkpoints(tmp_path) == []


def test_unreadable_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "checkpoints" / "step-000000001.pt"
    bad.parent.mkdir()
    bad.write_bytes(b"not a torch file")
    with pytest.raises(AnygrainError, match="unreadable checkpoint"):
        load_checkpoint(bad)


def test_resume_refuses_other_settings_or_data(tmp_path: Path) -> None:
    state = _state({"lr": 1, "epochs": 2})
    check_compatible(state, {"epochs": 2, "lr": 1}, "abc", tmp_path)  # key order is irrelevant
    with pytest.raises(AnygrainError, match=r"different settings \(lr\)"):
        check_compatible(state, {"lr": 2, "epochs": 2}, "abc", tmp_path)
    with pytest.raises(AnygrainError, match="different training data"):
        check_compatible(state, {"lr": 1, "epochs": 2}, "xyz", tmp_path)


def test_param_groups_exempt_biases_and_norms() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    model[2].weight.requires_grad_(False)
    decay, plain = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])]
    assert len(plain["params"]) == 4  # two biases, LayerNorm weight and bias; frozen one left out
