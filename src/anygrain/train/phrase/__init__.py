"""DensePhrases training (single-passage, in-batch, pre-batch and distillation losses, filter)
and query-side fine-tuning of a trained model against a built phrase index.

Entries: ``train(PhraseTrainConfig(...)) -> Path`` and
``train_query_side(PhraseQuerySideConfig(...)) -> Path`` (each a phrase model directory).
"""

from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig, QuerySideLoss
from anygrain.train.phrase.query_side import train_phrase_query_side as train_query_side
from anygrain.train.phrase.trainer import train_phrase as train

__all__ = [
    "PhraseQuerySideConfig",
    "PhraseTrainConfig",
    "QuerySideLoss",
    "train",
    "train_query_side",
]
