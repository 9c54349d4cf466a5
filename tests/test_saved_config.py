"""Training configs share one save/load path: round trip, bookkeeping, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from anygrain.errors import AnygrainError
from anygrain.train.dpr.config import DprTrainConfig, TrainMode
from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig
from anygrain.train.reader.config import ReaderTrainConfig


@pytest.mark.parametrize(
    "cfg",
    [
        DprTrainConfig(train=["a.json"], out="o", mode=TrainMode.QUERY_SIDE),
        PhraseTrainConfig(train=["a.json"], out="o", pre_batch=0),
        ReaderTrainConfig(train=["a.json"], out="o"),
        PhraseQuerySideConfig(index="i", train=["a.json"], out="o"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_round_trip_and_trajectory(cfg: object, tmp_path: Path) -> None:
    path = cfg.save(tmp_path)  # type: ignore[attr-defined]
    assert path.name == type(cfg).FILE  # type: ignore[attr-defined]
    back = type(cfg).load(tmp_path)  # type: ignore[attr-defined]
    assert back == cfg
    traj = cfg.trajectory()  # type: ignore[attr-defined]
    assert "out" not in traj and "train" in traj
    assert not set(traj) & type(cfg).BOOKKEEPING  # type: ignore[attr-defined]


def test_errors_name_the_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="no train_config.json"):
        PhraseTrainConfig.load(tmp_path)
    (tmp_path / "train_config.json").write_text('{"train": ["a"],\n "out": "o",\n oops}')
    with pytest.raises(AnygrainError, match=r"train_config.json, line 3: invalid JSON"):
        PhraseTrainConfig.load(tmp_path)
    (tmp_path / "train_config.json").write_text('{"train": ["a"], "out": "o", "lr_typo": 1}')
    with pytest.raises(AnygrainError, match="unknown phrase training config field.*lr_typo"):
        PhraseTrainConfig.load(tmp_path)
