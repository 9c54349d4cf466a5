"""A reader's settings: how it turns a (question, passage) pair into windows and spans, and
the corpus languages it was trained for.

Saved as ``anygrain_reader.json`` beside the weights (:mod:`anygrain.reader.model`) and read
by every runtime that reads with it (:mod:`anygrain.reader.runtime`).  ``languages`` is
not among the settings an exported graph is keyed by (:meth:`ReaderConfig.reading_dict`): it
changes no answer, only which corpora the reader is offered
(:meth:`ReaderConfig.language_mismatch`), and is read from the reader's own directory
(:func:`saved_languages`), which a cached graph's record may predate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.models.forms import READER_CONFIG

__all__ = ["CONFIG_FILE", "ReaderConfig", "saved_config", "saved_languages"]

#: the config file of a saved reader (:mod:`anygrain.models.forms`: no torch to read it)
CONFIG_FILE = READER_CONFIG
#: base models that read many languages.  A reader over one still reads a language it was not
#: trained on (the shipped Chinese reader's English stage alone reads Chinese passably), so
#: there a corpus of another language is a warning; a reader over an English-only base reads
#: Chinese as noise, and is refused
MULTILINGUAL_MARKS = ("multilingual", "me5", "xlm", "mbert", "labse", "mt5", "bge-m3")


@dataclass
class ReaderConfig:
    """How a reader turns a (question, passage) pair into windows and spans."""

    base_model: str = "minilm"
    max_length: int = 256  # tokens per window, special tokens included
    max_question_length: int = 64  # tokens of "question [SEP] title"
    max_answer_length: int = 30  # tokens per answer span
    stride: int = 64  # tokens shared by neighbouring windows of a long passage
    include_title: bool = True
    # the corpus languages it was trained for (``Lang`` values); None: not recorded (a reader
    # saved before they were), so any corpus is read
    languages: list[str] | None = None

    def validate(self) -> None:
        problems = []
        if not _language_list(self.languages):
            problems.append(f"languages must be a list of language codes, not {self.languages!r}")
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

    def reading_dict(self) -> dict[str, Any]:
        """The settings the reader's answers depend on (all but ``languages``): what an
        exported graph is keyed by and records."""
        d = self.to_dict()
        d.pop("languages")
        return d

    @property
    def multilingual(self) -> bool:
        """Whether the base model reads many languages (by its name)."""
        name = str(self.base_model).lower()
        return any(mark in name for mark in MULTILINGUAL_MARKS)

    def language_mismatch(self, lang: str) -> str | None:
        """Why this reader should not read a corpus in ``lang``, in one line, or None when it
        was trained for it (or its languages are not recorded)."""
        if self.languages is None or lang in self.languages:
            return None
        return f"trained for {'/'.join(self.languages)} text, but the corpus is {lang}"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> ReaderConfig:
        """From the saved config (its format and version checked by the model base);
        fields this anygrain does not know are ignored."""
        known = {f.name for f in fields(cls)}
        try:
            cfg = cls(**{k: v for k, v in d.items() if k in known})
        except TypeError as e:
            raise AnygrainError(f"{where}: corrupt reader config ({e})") from None
        if not _language_list(cfg.languages):
            raise AnygrainError(
                f"{where}: corrupt reader config (languages: {cfg.languages!r}, not a list of "
                "language codes)"
            )
        return cfg


def saved_config(directory: str | Path) -> ReaderConfig | None:
    """The reader config saved in ``directory``, read without loading the reader; None when
    it cannot be read (loading the reader then says why)."""
    try:
        d = json.loads((Path(directory) / CONFIG_FILE).read_text(encoding="utf-8"))
        return ReaderConfig.from_dict(d, str(Path(directory) / CONFIG_FILE))
    except (OSError, ValueError, AttributeError, AnygrainError):
        return None


def saved_languages(directory: str | Path) -> list[str] | None:
    """The ``languages`` recorded by the reader saved in ``directory`` (None: none)."""
    cfg = saved_config(directory)
    return None if cfg is None else cfg.languages


def _language_list(langs: Any) -> bool:
    """Whether ``langs`` is None or a list of language codes."""
    return langs is None or (
        isinstance(langs, list) and all(isinstance(x, str) and x for x in langs)
    )
