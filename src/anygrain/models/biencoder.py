"""The DPR bi-encoder: a question encoder and a passage encoder (shared or separate weights).

Saved as Hugging Face directories (``question/`` and, when not shared,
``passage/``) plus ``anygrain_model.json``: format version, per-side encoder
settings, the base model and a fingerprint of the passage encoder's weights.
An index records that fingerprint, so loading refuses a model whose passage side
differs from the one the vectors were made with (query-side fine-tuning leaves it
unchanged, so a fine-tuned question encoder still fits its index).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from anygrain.errors import AnygrainError
from anygrain.models.encoder import EncoderConfig, Pooling, TextEncoder
from anygrain.models.resolve import resolve_model
from anygrain.utils.atomic import atomic_dir, atomic_write_text

MODEL_CONFIG = "anygrain_model.json"
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
            "format": "anygrain.biencoder",
            "format_version": FORMAT_VERSION,
            "base_model": self.base_model,
            "shared": self.shared,
            "question": self.question.to_dict(),
            "passage": self.passage.to_dict(),
            "lang": self.lang,
            "passage_fingerprint": self.passage_fingerprint,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BiEncoderConfig:
        if d.get("format_version") != FORMAT_VERSION:
            raise AnygrainError(
                f"model format version {d.get('format_version')}, expected {FORMAT_VERSION}"
            )
        return cls(
            base_model=d["base_model"],
            shared=bool(d["shared"]),
            question=EncoderConfig.from_dict(d["question"]),
            passage=EncoderConfig.from_dict(d["passage"]),
            lang=d.get("lang", "en"),
            passage_fingerprint=d.get("passage_fingerprint", ""),
        )


def weights_fingerprint(model: nn.Module) -> str:
    """sha256 over parameter names and bytes: identifies the weights, whatever the file."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _load_hf(path: Path) -> tuple[nn.Module, Any]:
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(path))
    tok = AutoTokenizer.from_pretrained(str(path))
    return model, tok


class BiEncoder(nn.Module):
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
        model, tok = _load_hf(path)
        q = TextEncoder(model, tok, qcfg)
        pm = model if shared else copy.deepcopy(model)
        pe = TextEncoder(pm, tok, pcfg)
        cfg = BiEncoderConfig(
            base_model=str(name), shared=shared, question=qcfg, passage=pcfg, lang=defaults.lang
        )
        return cls(q, pe, cfg)

    @classmethod
    def load(cls, path: str | Path) -> BiEncoder:
        path = Path(path)
        f = path / MODEL_CONFIG
        if not f.exists():
            raise AnygrainError(f"{path}: not an anygrain bi-encoder (no {MODEL_CONFIG})")
        cfg = BiEncoderConfig.from_dict(json.loads(f.read_text(encoding="utf-8")))
        qm, tok = _load_hf(path / "question")
        q = TextEncoder(qm, tok, cfg.question)
        if cfg.shared:
            pe = TextEncoder(qm, tok, cfg.passage)
        else:
            pm, ptok = _load_hf(path / "passage")
            pe = TextEncoder(pm, ptok, cfg.passage)
        return cls(q, pe, cfg)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        self.config.passage_fingerprint = self.passage_fingerprint()
        with atomic_dir(path) as tmp:
            self.question.model.save_pretrained(str(tmp / "question"))  # type: ignore[operator]
            self.question.tokenizer.save_pretrained(str(tmp / "question"))
            if not self.config.shared:
                self.passage.model.save_pretrained(str(tmp / "passage"))  # type: ignore[operator]
                self.passage.tokenizer.save_pretrained(str(tmp / "passage"))
            atomic_write_text(tmp / MODEL_CONFIG, json.dumps(self.config.to_dict(), indent=2))
        return path

    def passage_fingerprint(self) -> str:
        return weights_fingerprint(self.passage.model)

    # --- encoding -------------------------------------------------------------------
    def encode_questions(self, texts: list[str], **kw: Any) -> np.ndarray:
        return self.question.encode(texts, desc="encoding questions", **kw)

    def encode_passages(
        self, texts: list[str], titles: list[str] | None = None, **kw: Any
    ) -> np.ndarray:
        return self.passage.encode(texts, titles, desc="encoding passages", **kw)
