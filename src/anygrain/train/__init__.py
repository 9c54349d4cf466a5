"""Fine-tuning retrievers: DPR training (full, or query-side against a frozen passage index)."""

from anygrain.train.config import DprTrainConfig, TrainMode
from anygrain.train.dpr import train_dpr

__all__ = ["DprTrainConfig", "TrainMode", "train_dpr"]
