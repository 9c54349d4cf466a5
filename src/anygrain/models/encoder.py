"""A text encoder: one transformer plus pooling, with length-bucketed batched encoding.

Encoding runs where the weights are (``encoder.to(device)`` moves them; the inputs
follow) and always returns float32 numpy arrays on the CPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from anygrain.encode.onnx_runtime import pad_batch

# the settings stand apart, without torch (anygrain.dense.onnx opens questions without it)
from anygrain.models.encoder_config import EncoderConfig as EncoderConfig
from anygrain.models.encoder_config import Pooling as Pooling
from anygrain.models.text_encoding import TextEncoding, TokenRows
from anygrain.utils.device import autocast, module_device
from anygrain.utils.finite import check_finite as check_finite


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    if pooling is Pooling.CLS:
        return hidden[:, 0]
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


class TextEncoder(nn.Module, TextEncoding):
    """Transformer + pooling; ``forward`` is differentiable, ``encode`` is batched inference."""

    def __init__(
        self, model: nn.Module, tokenizer: Any, config: EncoderConfig, name: str = ""
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        # what errors call this model (its hub name or directory) and its vectors
        self.name = name or str(getattr(getattr(model, "config", None), "_name_or_path", ""))
        self.side = "text"

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)  # type: ignore[union-attr, arg-type]

    @property
    def device(self) -> torch.device:
        """Where the weights are (``encoder.to(device)`` moves them; inputs follow)."""
        return module_device(self.model)

    def tokenize(
        self,
        texts: Sequence[str],
        titles: Sequence[str] | None = None,
        *,
        padding: bool | str = True,
    ) -> Any:
        texts = [self.config.prefix + t for t in texts]
        if titles is not None:
            # DPR encodes "title [SEP] text"; truncate the text, never the title.
            return self.tokenizer(
                list(titles),
                texts,
                truncation="only_second",
                max_length=self.config.max_length,
                padding=padding,
                return_tensors="pt" if padding else None,
            )
        return self.tokenizer(
            texts,
            truncation=True,
            max_length=self.config.max_length,
            padding=padding,
            return_tensors="pt" if padding else None,
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw: Any
    ) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kw)
        emb = pool(out.last_hidden_state, attention_mask, self.config.pooling)
        if self.config.normalize:
            emb = nn.functional.normalize(emb, dim=-1)
        return emb

    @torch.inference_mode()
    def encode(
        self, texts: Sequence[str], titles: Sequence[str] | None = None, **kw: Any
    ) -> np.ndarray:
        """:meth:`TextEncoding.encode <anygrain.models.text_encoding.TextEncoding.encode>`,
        in eval mode, where the weights are."""
        self.model.eval()
        return super().encode(texts, titles, **kw)

    def token_rows(
        self, texts: Sequence[str], titles: Sequence[str] | None
    ) -> tuple[TokenRows, TokenRows | None]:
        enc = self.tokenize(texts, titles, padding=False)
        return enc["input_ids"], enc.get("token_type_ids")

    def run_rows(self, ids: TokenRows, types: TokenRows | None, bf16: bool) -> np.ndarray:
        dev = self.device
        pad_id = self.tokenizer.pad_token_id or 0
        batch = {k: torch.from_numpy(v).to(dev) for k, v in pad_batch(ids, pad_id, types).items()}
        with autocast(dev, bf16):
            emb = self.forward(**batch)
        return emb.float().cpu().numpy()
