"""What a model does once opened, whichever runtime runs it: one protocol per role, so that
callers ask for what they use (``encode_questions``, ``runtime``) rather than test a model's
type or its attributes.  Torch models (:class:`~anygrain.models.base.Model` subclasses) and
their ONNX Runtime runners (:mod:`anygrain.dense.onnx`, :mod:`anygrain.phrase.onnx`,
:mod:`anygrain.reader.onnx`) both satisfy them; the reader's is
:class:`~anygrain.reader.runtime.ReadingModel`.  Importing this module imports neither torch
nor NumPy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PhraseQuestionEncoder", "QuestionEncoder", "Runs"]


class Runs(Protocol):
    """Says what runs it: ``"torch"`` or ``"onnx"`` (:class:`~anygrain.encode.runtime.Runtime`
    values), decided when it was opened (:func:`anygrain.models.runtime.choose_runtime`)."""

    @property
    def runtime(self) -> str: ...


class QuestionEncoder(Runs, Protocol):
    """A bi-encoder's question side: one float32 vector per question."""

    def encode_questions(self, texts: list[str], **kw: Any) -> np.ndarray: ...


class PhraseQuestionEncoder(Runs, Protocol):
    """A phrase model's question side: ``(start, end)`` float32 vectors per question."""

    def encode_questions(
        self, texts: Sequence[str], *, batch_size: int = ..., bf16: bool = ...
    ) -> tuple[np.ndarray, np.ndarray]: ...
