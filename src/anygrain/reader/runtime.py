"""The reader as the reading code sees it, whichever runtime runs it.

Reading (:mod:`anygrain.reader.read`, :mod:`anygrain.reader.answering`) needs of a reader
its settings, its tokenizer (to cut windows) and the logits of a batch of windows, as
NumPy arrays.  :class:`~anygrain.reader.model.Reader` gives them from torch and
:class:`~anygrain.reader.onnx.OnnxReader` from its exported graph on ONNX Runtime; which
one reads changes no answer (their logits agree to ~1e-6).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from anygrain.reader.config import ReaderConfig
    from anygrain.reader.features import Batch

__all__ = ["ReadingModel", "WindowLogits"]


@dataclass
class WindowLogits:
    """A batch's logits, float32: start and end ``(N, L)`` (padding included), selection ``(N,)``."""

    start: np.ndarray
    end: np.ndarray
    selection: np.ndarray


class ReadingModel(Protocol):
    """What reads: ``runtime`` names it (``torch`` or ``onnx``)."""

    config: ReaderConfig
    tokenizer: Any
    runtime: str

    def reading(self) -> AbstractContextManager[None]:
        """The block reading runs in (torch: eval mode, no autograd; restored after)."""
        ...

    def window_logits(self, batch: Batch, bf16: bool = False) -> WindowLogits:
        """Logits of ``batch`` (``bf16``: bfloat16 autocast where the runtime has it)."""
        ...
