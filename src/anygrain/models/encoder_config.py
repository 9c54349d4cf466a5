"""How one side of a bi-encoder turns text into a vector (pooling, normalisation, prefix,
maximum length): plain settings, importable without torch, so that a dense index can open
its questions on ONNX Runtime (:mod:`anygrain.dense.onnx`) without the model's runtime."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Pooling(str, enum.Enum):
    CLS = "cls"
    MEAN = "mean"


@dataclass
class EncoderConfig:
    """How one side (questions or passages) turns text into a vector."""

    pooling: Pooling = Pooling.MEAN
    normalize: bool = False
    prefix: str = ""
    max_length: int = 256

    def to_dict(self) -> dict[str, Any]:
        return {
            "pooling": self.pooling.value,
            "normalize": self.normalize,
            "prefix": self.prefix,
            "max_length": self.max_length,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        return cls(
            Pooling(d["pooling"]), bool(d["normalize"]), str(d["prefix"]), int(d["max_length"])
        )
