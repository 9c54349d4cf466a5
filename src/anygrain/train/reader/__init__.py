"""Extractive reader training (DPR section 6): span marginal likelihood and passage selection,
negatives from the same file or from a retriever index.

Entry: ``train(ReaderTrainConfig(...), retriever_index=...) -> Path`` (the reader directory).
The trainer (torch, transformers) is imported on first use of ``train`` (PEP 562); the
config needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anygrain.train.reader.config import ReaderTrainConfig

if TYPE_CHECKING:
    from anygrain.train.reader.trainer import train_reader as train


def __getattr__(name: str) -> Any:
    if name == "train":
        from anygrain.train.reader.trainer import train_reader

        return train_reader
    raise AttributeError(f"module 'anygrain.train.reader' has no attribute {name!r}")


__all__ = ["ReaderTrainConfig", "train"]
