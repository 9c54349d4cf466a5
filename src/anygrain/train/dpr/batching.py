"""Tokenised batches and chunked, length-sorted encoding with gradients.

Training batches mix short and long passages; encoding them in chunks of similar
length wastes little compute on padding (most of the cost on CPU), and the same
chunks are the unit of gradient caching.  Batches are built on the CPU and sent to
the encoder's device (:func:`forward_rows`); the vectors stay there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from anygrain.models.encoder import TextEncoder
from anygrain.utils.device import autocast, module_device


@dataclass
class Tokenized:
    """Unpadded token ids of one side of a batch (questions or passages), in input order."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    pad_id: int

    def __len__(self) -> int:
        return len(self.input_ids)

    def chunks(self, size: int) -> list[np.ndarray]:
        """Row groups of at most ``size``, longest first, so each chunk pads little."""
        order = np.argsort([-len(x) for x in self.input_ids], kind="stable")
        return [order[i : i + size] for i in range(0, len(order), size)]

    def tensors(self, rows: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """Padded ``input_ids`` / ``attention_mask`` (/ ``token_type_ids``) for ``rows``."""
        width = max(len(self.input_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        types = (
            torch.zeros((len(rows), width), dtype=torch.long)
            if self.token_type_ids is not None
            else None
        )
        for r, i in enumerate(rows):
            n = len(self.input_ids[i])
            ids[r, :n] = torch.tensor(self.input_ids[i])
            mask[r, :n] = 1
            if types is not None and self.token_type_ids is not None:
                types[r, :n] = torch.tensor(self.token_type_ids[i])
        out = {"input_ids": ids, "attention_mask": mask}
        if types is not None:
            out["token_type_ids"] = types
        return out


def tokenize(
    encoder: TextEncoder, texts: Sequence[str], titles: Sequence[str] | None = None
) -> Tokenized:
    enc = encoder.tokenize(list(texts), list(titles) if titles is not None else None, padding=False)
    tt = enc.get("token_type_ids")
    return Tokenized(
        list(enc["input_ids"]),
        list(tt) if tt is not None else None,
        int(encoder.tokenizer.pad_token_id or 0),
    )


def forward_rows(
    encoder: TextEncoder, tok: Tokenized, rows: Sequence[int] | np.ndarray, *, bf16: bool = False
) -> torch.Tensor:
    """Float32 vectors of ``rows`` on the encoder's device (grad follows the caller's mode)."""
    dev = module_device(encoder)
    with autocast(dev, bf16):
        emb = encoder(**{k: v.to(dev) for k, v in tok.tensors(rows).items()})
    return emb.float()


def encode_with_grad(
    encoder: TextEncoder, tok: Tokenized, chunk_size: int, *, bf16: bool = False
) -> torch.Tensor:
    """All rows of ``tok`` in input order, encoded in length-sorted chunks."""
    parts: list[torch.Tensor] = []
    order: list[np.ndarray] = []
    for rows in tok.chunks(chunk_size):
        parts.append(forward_rows(encoder, tok, rows, bf16=bf16))
        order.append(rows)
    reps = torch.cat(parts)
    inv = torch.empty(len(tok), dtype=torch.long)
    inv[torch.from_numpy(np.concatenate(order))] = torch.arange(len(tok))
    return reps[inv.to(reps.device)]
