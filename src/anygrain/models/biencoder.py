"""The DPR bi-encoder: a question encoder and a passage encoder (shared or separate weights).

Saved through the model base (:mod:`anygrain.models.base`) as Hugging Face
directories (``question/`` and, when not shared, ``passage/``) plus
``anygrain_model.json``: format version, per-side encoder settings, the base model and
a fingerprint of the passage encoder's weights.
An index records that fingerprint, so loading refuses a model whose passage side
differs from the one the vectors were made with (query-side fine-tuning leaves it
unchanged, so a fine-tuned question encoder still fits its index).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anygrain.models.base import Model, ModelType, config_file, register_model
from anygrain.models.encoder import EncoderConfig, Pooling, TextEncoder
from anygrain.models.hf import load_hf_dir
from anygrain.models.resolve import resolve_model
from anygrain.models.text_encoding import BiEncoding
from anygrain.utils.device import module_device

MODEL_CONFIG = config_file(ModelType.BIENCODER)
FORMAT = "anygrain.biencoder"
FORMAT_VERSION = 1


@dataclass
class BiEncoderConfig:
    base_model: str
    shared: bool = True
    question: EncoderConfig = field(default_factory=EncoderConfig)
    passage: EncoderConfig = field(default_factory=EncoderConfig)
    lang: str = "en"
    passage_fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_model": self.base_model,
            "shared": self.shared,
            "question": self.question.to_dict(),
            "passage": self.passage.to_dict(),
            "lang": self.lang,
            "passage_fingerprint": self.passage_fingerprint,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BiEncoderConfig:
        """From the saved config (its format and version checked by the model base)."""
        return cls(
            base_model=d["base_model"],
            shared=bool(d["shared"]),
            question=EncoderConfig.from_dict(d["question"]),
            passage=EncoderConfig.from_dict(d["passage"]),
            lang=d.get("lang", "en"),
            passage_fingerprint=d.get("passage_fingerprint", ""),
        )


@register_model(ModelType.BIENCODER)
class BiEncoder(Model, BiEncoding):
    format = FORMAT
    format_version = FORMAT_VERSION
    noun = "an anygrain bi-encoder"
    fingerprint_field = "passage_fingerprint"
    # a dense index checks the recorded fingerprint on open: hashing again costs a second
    verify_on_load = False
    # one module, names unnumbered: what indexes have recorded since format 1
    numbered_fingerprint = False
    config: BiEncoderConfig
    question: TextEncoder  # encode_questions / encode_passages: BiEncoding's
    passage: TextEncoder

    def __init__(
        self, question: TextEncoder, passage: TextEncoder, config: BiEncoderConfig
    ) -> None:
        super().__init__()
        self.question = question
        self.passage = passage
        self.config = config
        for enc, side in ((question, "question"), (passage, "passage")):
            enc.name, enc.side = enc.name or config.base_model, side

    @property
    def dim(self) -> int:
        return self.question.dim

    @property
    def device(self) -> torch.device:
        """Where the weights are: ``model.to(device)`` moves both sides (a shared model's
        one transformer once); encoding sends its inputs there and returns CPU arrays."""
        return module_device(self)

    # --- construction --------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        name: str | Path,
        *,
        shared: bool = True,
        pooling: Pooling | str | None = None,
        normalize: bool | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        max_query_length: int = 64,
        max_passage_length: int = 256,
        cache_dir: Path | None = None,
    ) -> BiEncoder:
        """An anygrain model directory, or any encoder by alias / hub name / path."""
        p = Path(str(name)).expanduser()
        if (p / MODEL_CONFIG).exists():
            return cls.load(p)
        path, defaults = resolve_model(name, cache_dir=cache_dir)
        pool_v = Pooling(pooling) if pooling is not None else Pooling(defaults.pooling)
        norm = defaults.normalize if normalize is None else normalize
        qcfg = EncoderConfig(
            pool_v,
            norm,
            defaults.query_prefix if query_prefix is None else query_prefix,
            max_query_length,
        )
        pcfg = EncoderConfig(
            pool_v,
            norm,
            defaults.passage_prefix if passage_prefix is None else passage_prefix,
            max_passage_length,
        )
        model, tok = load_hf_dir(path)
        q = TextEncoder(model, tok, qcfg)
        pm = model if shared else copy.deepcopy(model)
        pe = TextEncoder(pm, tok, pcfg)
        cfg = BiEncoderConfig(
            base_model=str(name), shared=shared, question=qcfg, passage=pcfg, lang=defaults.lang
        )
        return cls(q, pe, cfg)

    @classmethod
    def from_saved(cls, path: Path, config: dict[str, Any]) -> BiEncoder:
        cfg = BiEncoderConfig.from_dict(config)
        qm, tok = load_hf_dir(path / "question")
        q = TextEncoder(qm, tok, cfg.question)
        if cfg.shared:
            pe = TextEncoder(qm, tok, cfg.passage)
        else:
            pm, ptok = load_hf_dir(path / "passage")
            pe = TextEncoder(pm, ptok, cfg.passage)
        return cls(q, pe, cfg)

    def write_weights(self, directory: Path) -> None:
        self.question.model.save_pretrained(str(directory / "question"))  # type: ignore[operator]
        self.question.tokenizer.save_pretrained(str(directory / "question"))
        if not self.config.shared:
            self.passage.model.save_pretrained(str(directory / "passage"))  # type: ignore[operator]
            self.passage.tokenizer.save_pretrained(str(directory / "passage"))

    def owned_names(self) -> Sequence[str]:
        return ("question", "passage")

    def fingerprinted_modules(self) -> Sequence[nn.Module]:
        return [self.passage.model]

    def passage_fingerprint(self) -> str:
        """The fingerprint a dense index records (the passage side's weights)."""
        return self.fingerprint()
