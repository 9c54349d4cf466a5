"""DPR bi-encoder training: in-batch and BM25 hard negatives, answer or qrels positives,
gradient caching, saved recipes.

Entry: ``train(DprTrainConfig(...)) -> Path`` (the model directory).  The trainer (torch,
transformers) is imported on first use of ``train`` (PEP 562); the config needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anygrain.train.dpr.config import DprTrainConfig, TrainMode

if TYPE_CHECKING:
    from anygrain.train.dpr.trainer import train_dpr as train


def __getattr__(name: str) -> Any:
    if name == "train":
        from anygrain.train.dpr.trainer import train_dpr

        return train_dpr
    raise AttributeError(f"module 'anygrain.train.dpr' has no attribute {name!r}")


__all__ = ["DprTrainConfig", "TrainMode", "train"]
