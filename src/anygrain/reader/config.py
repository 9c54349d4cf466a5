"""A reader's settings: how it turns a (question, passage) pair into windows and spans.

Saved as ``anygrain_reader.json`` beside the weights (:mod:`anygrain.reader.model`) and read
by every runtime that reads with it (:mod:`anygrain.reader.runtime`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from anygrain.errors import AnygrainError

__all__ = ["ReaderConfig"]


@dataclass
class ReaderConfig:
    """How a reader turns a (question, passage) pair into windows and spans."""

    base_model: str = "minilm"
    max_length: int = 256  # tokens per window, special tokens included
    max_question_length: int = 64  # tokens of "question [SEP] title"
    max_answer_length: int = 30  # tokens per answer span
    stride: int = 64  # tokens shared by neighbouring windows of a long passage
    include_title: bool = True

    def validate(self) -> None:
        problems = []
        if self.max_answer_length < 1:
            problems.append("max_answer_length must be >= 1")
        if self.max_question_length < 1:
            problems.append("max_question_length must be >= 1")
        if self.stride < 0:
            problems.append("stride must be >= 0")
        # Room for the passage: the question segment, three special tokens, and
        # more than ``stride`` passage tokens (the tokenizer needs it to advance).
        if self.max_length - self.max_question_length - 4 <= self.stride:
            problems.append(
                f"max_length ({self.max_length}) must exceed max_question_length "
                f"({self.max_question_length}) + stride ({self.stride}) + 4"
            )
        if problems:
            raise AnygrainError("invalid reader config: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> ReaderConfig:
        """From the saved config (its format and version checked by the model base);
        fields this anygrain does not know are ignored."""
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in known})
        except TypeError as e:
            raise AnygrainError(f"{where}: corrupt reader config ({e})") from None
