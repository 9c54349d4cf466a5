"""DensePhrases training (single-passage, in-batch, pre-batch and distillation losses, filter)
and query-side fine-tuning of a trained model against a built phrase index.

Entries: ``train(PhraseTrainConfig(...)) -> Path`` and
``train_query_side(PhraseQuerySideConfig(...)) -> Path`` (each a phrase model directory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig, QuerySideLoss

if TYPE_CHECKING:
    from anygrain.train.phrase.query_side import train_phrase_query_side as train_query_side
    from anygrain.train.phrase.trainer import train_phrase as train


def __getattr__(name: str) -> Any:
    # the trainers (torch, transformers) on first use: the configs need neither; query-side
    # training searches a phrase index (FAISS) too, plain training needs none
    if name == "train":
        from anygrain.train.phrase.trainer import train_phrase

        return train_phrase
    if name == "train_query_side":
        from anygrain.train.phrase.query_side import train_phrase_query_side

        return train_phrase_query_side
    raise AttributeError(f"module 'anygrain.train.phrase' has no attribute {name!r}")


__all__ = [
    "PhraseQuerySideConfig",
    "PhraseTrainConfig",
    "QuerySideLoss",
    "train",
    "train_query_side",
]
