"""The extractive reader (DPR section 6): span extraction over retrieved passages,
and a start/end-distribution teacher for phrase distillation."""

from typing import TYPE_CHECKING

from anygrain.reader.config import ReaderConfig
from anygrain.reader.evaluate import evaluate_reader, gold_hits
from anygrain.reader.read import (
    Answer,
    SpanDistributions,
    read,
    read_many,
    start_end_distributions,
    start_end_distributions_many,
)
from anygrain.reader.spans import best_span_bruteforce, best_spans, word_boundaries

if TYPE_CHECKING:
    from anygrain.reader.model import Reader, ReaderOutput

__all__ = [
    "Answer",
    "Reader",
    "ReaderConfig",
    "ReaderOutput",
    "SpanDistributions",
    "best_span_bruteforce",
    "best_spans",
    "evaluate_reader",
    "gold_hits",
    "read",
    "read_many",
    "start_end_distributions",
    "start_end_distributions_many",
    "word_boundaries",
]


def __getattr__(name: str) -> object:
    # the torch reader, imported when asked for: reading on ONNX Runtime (the base install,
    # which has no torch) imports this package without it
    if name in ("Reader", "ReaderOutput"):
        from anygrain.reader import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
