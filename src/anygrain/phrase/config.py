"""The phrase model's config: plain settings, importable without torch, so that a build or
a search with a shipped phrase model on ONNX Runtime reads it without the model's runtime
(:mod:`anygrain.phrase.graph_model`).  :class:`~anygrain.phrase.model.PhraseEncoder` saves
it as ``anygrain_phrase.json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.models.encoder_config import Pooling
from anygrain.models.forms import PHRASE_CONFIG
from anygrain.phrase.options import QuestionEncoderKind

#: the phrase model's config file (:mod:`anygrain.models.forms`: no torch to read it)
MODEL_CONFIG = PHRASE_CONFIG


@dataclass
class PhraseConfig:
    """Everything needed to rebuild the model and tokenize as it was trained."""

    base_model: str
    hidden_size: int
    question_encoder: QuestionEncoderKind = QuestionEncoderKind.SHARED
    question_pooling: Pooling = Pooling.MEAN  # shared encoder only; separate uses [CLS]
    max_phrase_words: int = 20
    max_passage_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    include_title: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""
    lang: str = "en"
    filter_threshold: float | None = None  # index-time default for tau (None: keep all)
    phrase_fingerprint: str = ""

    def __post_init__(self) -> None:
        self.question_encoder = QuestionEncoderKind(self.question_encoder)
        self.question_pooling = Pooling(self.question_pooling)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["question_encoder"] = self.question_encoder.value
        d["question_pooling"] = self.question_pooling.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> PhraseConfig:
        """From a config dict (a saved one's format and version are checked by the model
        base, which reads it); an unknown field is an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known - {"format", "format_version"})
        if unknown:
            raise AnygrainError(f"{where}: unknown phrase model field(s) {', '.join(unknown)}")
        try:
            return cls(**{k: v for k, v in d.items() if k in known})
        except (TypeError, ValueError) as e:
            raise AnygrainError(f"{where}: invalid phrase model config ({e})") from None
