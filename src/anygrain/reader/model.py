"""The extractive reader of DPR (section 6): one cross-attention transformer over
``question [SEP] title [SEP] passage`` with three linear heads.

For the token vectors ``P`` of a window and its ``[CLS]`` vector ``P̂[CLS]``
(DPR Eq. 3-5)::

    P_start    = softmax(P w_start)          over the passage tokens
    P_end      = softmax(P w_end)            over the passage tokens
    P_selected = softmax(P̂[CLS] w_selected)  over the k passages read together

A span's score is ``start_logit + end_logit``; the answer is the best span of the
passage with the highest selection logit.

Saved through the model base (:mod:`anygrain.models.base`) as a Hugging Face
directory (encoder weights, its config and tokenizer) plus
``reader_heads.safetensors`` and ``anygrain_reader.json`` (written last, so a
directory with it is complete).  Any encoder anygrain resolves can be the
base: an alias (``minilm``), a hub name or a local path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from anygrain.errors import AnygrainError
from anygrain.models.base import Model, ModelType, config_file, register_model
from anygrain.models.hf import encoder_inputs, load_hf_dir, load_tensors
from anygrain.models.resolve import resolve_model
from anygrain.reader.config import ReaderConfig
from anygrain.reader.runtime import WindowLogits
from anygrain.utils.precision import cpu_autocast

if TYPE_CHECKING:
    from anygrain.reader.features import Batch

__all__ = ["HEADS_FILE", "READER_CONFIG", "Reader", "ReaderOutput", "evenly_spaced"]

READER_CONFIG = config_file(ModelType.READER)
HEADS_FILE = "reader_heads.safetensors"
FORMAT = "anygrain.reader"
FORMAT_VERSION = 1


@dataclass
class ReaderOutput:
    start_logits: torch.Tensor  # [N, L]
    end_logits: torch.Tensor  # [N, L]
    selection_logits: torch.Tensor  # [N]
    # with hidden_states: the embeddings' output, then each transformer layer's, [N, L, width]
    hidden: tuple[torch.Tensor, ...] | None = None


def evenly_spaced(n: int, total: int) -> list[int]:
    """``n`` of ``total`` layer indices, evenly spaced from the first to the last."""
    return [int(i * (total - 1) / (n - 1) + 0.5) for i in range(n)] if n > 1 else [0]


@register_model(ModelType.READER)
class Reader(Model):
    """Encoder + start/end/selection heads; ``tokenizer`` must be a fast tokenizer."""

    format = FORMAT
    format_version = FORMAT_VERSION
    noun = "an anygrain reader"
    runtime = "torch"  # what runs it (anygrain.reader.runtime.ReadingModel)
    config: ReaderConfig

    def __init__(self, encoder: nn.Module, tokenizer: Any, config: ReaderConfig) -> None:
        super().__init__()
        config.validate()
        if not getattr(tokenizer, "is_fast", False):
            raise AnygrainError("the reader needs a fast tokenizer (character offsets)")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.config = config
        hidden = int(encoder.config.hidden_size)  # type: ignore[union-attr, arg-type]
        self.qa = nn.Linear(hidden, 2)  # w_start, w_end
        self.selector = nn.Linear(hidden, 1)  # w_selected
        std = float(getattr(encoder.config, "initializer_range", 0.02))
        for head in (self.qa, self.selector):
            nn.init.normal_(head.weight, std=std)
            nn.init.zeros_(head.bias)

    @property
    def uses_token_types(self) -> bool:
        return "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())

    def forward(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        token_embeds: torch.Tensor | None = None,
        hidden_states: bool = False,
    ) -> ReaderOutput:
        """Logits of a batch of windows; ``token_embeds`` (B, L, width): the rows of the
        encoder's token-embedding table for the tokens, in place of ``input_ids``;
        ``hidden_states``: also every layer's token vectors (layer-wise distillation)."""
        types = token_type_ids if self.uses_token_types else None
        kw = encoder_inputs(input_ids, attention_mask, types, token_embeds)
        hidden = self.encoder(**kw, output_hidden_states=hidden_states)
        h = hidden.last_hidden_state
        logits = self.qa(h)
        return ReaderOutput(
            start_logits=logits[..., 0],
            end_logits=logits[..., 1],
            selection_logits=self.selector(h[:, 0]).squeeze(-1),
            hidden=tuple(hidden.hidden_states) if hidden_states else None,
        )

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Eval mode and no autograd for the block; the reader's mode is restored after."""
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.train(was_training)

    def window_logits(self, batch: Batch, bf16: bool = False) -> WindowLogits:
        """The logits of a batch of windows as float32 arrays (``bf16``: bfloat16 autocast)."""
        # reading collates NumPy arrays (the same for both runtimes); training, tensors
        inputs = {k: torch.as_tensor(v) for k, v in batch.model_inputs().items()}
        with cpu_autocast(bf16):
            o = self(**inputs)
        return WindowLogits(
            start=o.start_logits.float().cpu().numpy(),
            end=o.end_logits.float().cpu().numpy(),
            selection=o.selection_logits.float().cpu().numpy(),
        )

    def freeze_embeddings(self) -> None:
        """Stop training the encoder's embedding layer (token, position, type, norm)."""
        emb = getattr(self.encoder, "embeddings", None) or self.encoder.get_input_embeddings()  # type: ignore[operator]
        for p in emb.parameters():
            p.requires_grad_(False)

    def keep_layers(self, n: int) -> list[int]:
        """Keep ``n`` of the encoder's transformer layers, evenly spaced from the first to the
        last (how DistilBERT starts a smaller student from its teacher); returns the kept
        layers' former indices. The encoder's config says ``n`` layers, so the reader saves
        and loads as an ``n``-layer one."""
        stack = getattr(getattr(self.encoder, "encoder", None), "layer", None)
        if not isinstance(stack, nn.ModuleList):
            raise AnygrainError(
                f"cannot keep layers of a {type(self.encoder).__name__}: it has no "
                "encoder.layer stack"
            )
        total = len(stack)
        if not 1 <= n <= total:
            raise AnygrainError(f"layers must be in 1..{total} for this encoder, not {n}")
        kept = evenly_spaced(n, total)
        layers = [stack[i] for i in kept]
        for new, layer in enumerate(layers):
            for m in layer.modules():  # a layer's own index (its key-value cache slot)
                if hasattr(m, "layer_idx"):
                    m.layer_idx = new  # type: ignore[assignment]
        self.encoder.encoder.layer = nn.ModuleList(layers)  # type: ignore[union-attr]
        self.encoder.config.num_hidden_layers = n  # type: ignore[union-attr]
        return kept

    # --- construction and files -------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls, name: str | Path, *, cache_dir: Path | None = None, **settings: Any
    ) -> Reader:
        """A saved reader directory, or new heads on any encoder anygrain resolves.

        ``settings`` override :class:`ReaderConfig` fields for a new reader; the
        heads are initialised from torch's RNG (seed it for reproducible runs).
        """
        from anygrain.models.shipped import saved_model_dir

        p = saved_model_dir(name)  # a shipped reader's name continues that reader
        if (p / READER_CONFIG).exists():
            return cls.load(p)
        path, _ = resolve_model(name, cache_dir=cache_dir)
        encoder, tokenizer = load_hf_dir(path)
        return cls(encoder, tokenizer, ReaderConfig(base_model=str(name), **settings))

    @classmethod
    def from_saved(cls, path: Path, config: dict[str, Any]) -> Reader:
        cfg = ReaderConfig.from_dict(config, str(path / READER_CONFIG))
        encoder, tokenizer = load_hf_dir(path)
        reader = cls(encoder, tokenizer, cfg)
        heads = load_tensors(path / HEADS_FILE)
        reader.qa.load_state_dict({"weight": heads["qa.weight"], "bias": heads["qa.bias"]})
        reader.selector.load_state_dict(
            {"weight": heads["selector.weight"], "bias": heads["selector.bias"]}
        )
        reader.eval()
        return reader

    def write_weights(self, directory: Path) -> None:
        from safetensors.torch import save_file

        self.encoder.save_pretrained(str(directory))  # type: ignore[operator]
        self.tokenizer.save_pretrained(str(directory))
        heads = {
            "qa.weight": self.qa.weight,
            "qa.bias": self.qa.bias,
            "selector.weight": self.selector.weight,
            "selector.bias": self.selector.bias,
        }
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in heads.items()},
            str(directory / HEADS_FILE),
        )

    def fingerprinted_modules(self) -> Sequence[nn.Module]:
        return [self.encoder, self.qa, self.selector]
