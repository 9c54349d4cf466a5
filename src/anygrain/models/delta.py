"""The delta packer: a fine-tuned model's weights stored as small differences from its backbone.

Every weight matrix is stored as the *difference* from the backbone, quantised to ``bits``
(4 by default) in groups of ``group`` values with one float32 scale each; other changed
tensors are kept in float32.  Quantising the difference rather than the weight keeps the
error small: fine-tuning moves a weight by a few percent.  Packed phrase models
(:mod:`anygrain.phrase.packed`) and readers (:mod:`anygrain.reader.packed`) share it;
:mod:`anygrain.models.packed_state` rebuilds the same tensors with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from anygrain.errors import AnygrainError


@dataclass(frozen=True)
class PackSettings:
    """How differences are quantised: ``bits`` per value, one scale per ``group`` values."""

    bits: int = 4
    group: int = 64

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise AnygrainError(f"packing supports 4 or 8 bits, not {self.bits}")
        if self.group < 2 or self.group % 2:
            raise AnygrainError(f"pack group must be an even number >= 2, not {self.group}")

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1  # symmetric codes: -qmax..qmax


def quantize(delta: torch.Tensor, s: PackSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes, scales)`` of a float tensor whose size is a multiple of ``s.group``:
    uint8 codes (two 4-bit codes per byte at 4 bits) and one float32 scale per group."""
    g = delta.detach().to(torch.float32).reshape(-1, s.group)
    # float32 scales: fine-tuning moves many weights by less than float16's normal range
    # (6e-5), where float16 scales would lose their precision
    scale = g.abs().amax(dim=1) / s.qmax
    safe = scale.clamp_min(1e-30)  # an all-zero group: scale 0, codes 0
    q = torch.clamp(torch.round(g / safe[:, None]), -s.qmax, s.qmax).to(torch.int16) + s.qmax + 1
    codes = q.to(torch.uint8)
    if s.bits == 4:
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return codes.contiguous(), scale.contiguous()


def dequantize(
    codes: torch.Tensor, scale: torch.Tensor, shape: torch.Size | tuple[int, ...], s: PackSettings
) -> torch.Tensor:
    """The float32 tensor ``quantize`` encoded (exactly reproducible on any machine)."""
    c = codes.to(torch.int16)
    if s.bits == 4:
        c = torch.stack([c & 0xF, c >> 4], dim=2).reshape(c.shape[0], -1)
    q = (c - (s.qmax + 1)).to(torch.float32)
    return (q * scale.to(torch.float32)[:, None]).reshape(shape)


def delta_tensors(
    state: dict[str, torch.Tensor],
    base_state: dict[str, torch.Tensor],
    s: PackSettings,
    prefix: str,
    base_name: str,
) -> dict[str, torch.Tensor]:
    """The packed tensors of one encoder's ``state`` against its backbone's: weight matrices
    as quantised differences (``PREFIX/NAME:codes`` / ``:scale``), other changed tensors kept
    in float32 (``:value``), tensors equal to the backbone's not at all."""
    out: dict[str, torch.Tensor] = {}
    for k, t in state.items():
        b = base_state.get(k)
        if b is None or b.shape != t.shape:
            raise AnygrainError(
                f"cannot pack: {prefix}.{k} has no counterpart in the backbone {base_name}"
            )
        if torch.equal(t, b):
            continue
        key = f"{prefix}/{k}"
        if t.is_floating_point() and t.ndim == 2 and t.numel() % s.group == 0:
            codes, scale = quantize(t - b, s)
            out[key + ":codes"] = codes
            out[key + ":scale"] = scale
        else:
            out[key + ":value"] = t.detach().to(torch.float32).contiguous()
    return out


def apply_delta_tensors(
    encoder: Any, tensors: dict[str, torch.Tensor], s: PackSettings, prefix: str
) -> None:
    """Load into ``encoder`` (a copy of the backbone) what :func:`delta_tensors` stored."""
    state = encoder.state_dict()
    head = f"{prefix}/"
    for key in sorted({k.split(":")[0] for k in tensors if k.startswith(head)}):
        name = key[len(head) :]
        if name not in state:
            raise AnygrainError(f"packed tensor {key} has no place in the backbone")
        target = state[name]  # the encoder's own tensor: written in place, one at a time
        if key + ":value" in tensors:
            new = tensors[key + ":value"]
        else:
            new = target.to(torch.float32) + dequantize(
                tensors[key + ":codes"], tensors[key + ":scale"], target.shape, s
            )
        if new.shape != target.shape:
            raise AnygrainError(
                f"packed tensor {key} has shape {tuple(new.shape)}, the backbone's "
                f"{tuple(target.shape)}"
            )
        with torch.no_grad():
            target.copy_(new)
