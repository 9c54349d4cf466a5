"""Extractive reader training (DPR section 6): span marginal likelihood and passage selection,
negatives from the same file or from a retriever index.

Entry: ``train(ReaderTrainConfig(...), retriever_index=...) -> Path`` (the reader directory).
"""

from anygrain.train.reader.config import ReaderTrainConfig
from anygrain.train.reader.trainer import train_reader as train

__all__ = ["ReaderTrainConfig", "train"]
