"""DPR bi-encoder training: in-batch and BM25 hard negatives, answer or qrels positives,
gradient caching, saved recipes.

Entry: ``train(DprTrainConfig(...)) -> Path`` (the model directory).
"""

from anygrain.train.dpr.config import DprTrainConfig, TrainMode
from anygrain.train.dpr.trainer import train_dpr as train

__all__ = ["DprTrainConfig", "TrainMode", "train"]
