"""``threads`` is a config field of every trainer, applied once by the trainer before it
reads any data, and never part of the trajectory a resumed run must match."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dense_helpers import single_threaded

from anygrain.errors import AnygrainError
from anygrain.train import dpr, phrase, reader
from anygrain.train.saved_config import SavedConfig


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    with single_threaded():
        yield


def _trainers(tmp: Path) -> list[tuple[SavedConfig, Callable[..., Any]]]:
    missing = str(tmp / "missing.json")  # no such data: each run fails right after setup
    out = str(tmp / "out")
    return [
        (dpr.DprTrainConfig(train=[missing], out=out, threads=1), dpr.train),
        (phrase.PhraseTrainConfig(train=[missing], out=out, threads=1), phrase.train),
        (
            phrase.PhraseQuerySideConfig(index=missing, train=[missing], out=out, threads=1),
            phrase.train_query_side,
        ),
        (reader.ReaderTrainConfig(train=[missing], out=out, threads=1), reader.train),
    ]


@pytest.mark.parametrize("which", range(4), ids=["dpr", "phrase", "query-side", "reader"])
def test_every_trainer_applies_its_threads(which: int, tmp_path: Path) -> None:
    import faiss
    import torch

    config, train = _trainers(tmp_path)[which]
    torch.set_num_threads(2)
    faiss.omp_set_num_threads(2)
    with pytest.raises((AnygrainError, OSError)):
        train(config, progress=False)
    assert torch.get_num_threads() == 1 and faiss.omp_get_max_threads() == 1
    assert "threads" not in config.trajectory()  # resuming with other threads is fine
    config.threads = 0  # type: ignore[attr-defined]
    with pytest.raises(AnygrainError, match="threads must be >= 1"):
        train(config, progress=False)
