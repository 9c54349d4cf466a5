"""The delta packer: a fine-tuned model's weights stored as small differences from its backbone.

Every weight matrix is stored as the *difference* from the backbone, quantised to ``bits``
(4 by default) in groups of ``group`` values with one float32 scale each; other changed
tensors are kept in float32.  Quantising the difference rather than the weight keeps the
error small: fine-tuning moves a weight by a few percent.  Packed phrase models
(:mod:`anygrain.phrase.packed`) and readers (:mod:`anygrain.reader.packed`) share it;
:mod:`anygrain.models.packed_state` rebuilds the same tensors with NumPy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

from anygrain.errors import AnygrainError
from anygrain.models.base import ModelType, config_file, read_config
from anygrain.models.forms import PACKED_FILE
from anygrain.utils.atomic import atomic_dir

CARD_FILE = "MODEL_CARD.md"  # a packed model's card, when its packer wrote one

_Info = TypeVar("_Info", bound="PackedInfo")
_Model = TypeVar("_Model")


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


@dataclass
class PackedInfo:
    """A packed model's own config file (``config_file(model_type)``): what it needs
    besides its tensors.  Each packed form subclasses it, naming its format and model type."""

    format: ClassVar[str]
    format_version: ClassVar[int]
    model_type: ClassVar[ModelType]
    noun: ClassVar[str]  # what errors call a model of this form

    base_model: str
    base_fingerprint: str  # the backbone's weights, so another backbone version is refused
    full_fingerprint: str  # every weight of the rebuilt model
    bits: int
    group: int
    size_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "format_version": self.format_version, **asdict(self)}

    @classmethod
    def from_dict(cls: type[_Info], d: dict[str, Any], where: str = "") -> _Info:
        """From the saved config (format and version checked by the model base)."""
        try:
            return cls(**{k: v for k, v in d.items() if k not in ("format", "format_version")})
        except TypeError as e:
            raise AnygrainError(f"{where}: invalid {cls.noun} config ({e})") from None

    @classmethod
    def read(cls: type[_Info], path: Path) -> _Info:
        return cls.from_dict(read_config(path, cls.model_type), str(path / cls.file_name()))

    @classmethod
    def file_name(cls) -> str:
        return config_file(cls.model_type)


def write_packed(
    out: Path,
    tensors: dict[str, torch.Tensor],
    config: tuple[str, Mapping[str, Any]],
    info: PackedInfo,
    card: str | None,
) -> None:
    """Write a packed model into ``out``, replacing it whole: its ``tensors``, its model
    config (``(file name, config)``), ``card`` (a model card, when given) and, last,
    ``info`` with the tensors' size."""
    from safetensors.torch import save_file

    with atomic_dir(out) as staging:
        save_file(tensors, str(staging / PACKED_FILE))
        name, cfg = config
        (staging / name).write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
        info.size_bytes = (staging / PACKED_FILE).stat().st_size
        if card is not None:
            (staging / CARD_FILE).write_text(card, encoding="utf-8")
        (staging / info.file_name()).write_text(json.dumps(info.to_dict(), indent=2))


def rebuild_packed(path: Path, rebuild: Callable[[dict[str, torch.Tensor]], _Model]) -> _Model:
    """What ``rebuild`` makes of the packed tensors saved in ``path``; unreadable tensors,
    or tensors that do not fit the backbone, are a one-line error naming the file."""
    from safetensors.torch import load_file

    f = path / PACKED_FILE
    try:
        tensors = load_file(str(f))
    except Exception as e:  # safetensors raises its own error types for damaged headers
        raise AnygrainError(f"{f}: unreadable packed tensors ({e})") from None
    try:
        return rebuild(tensors)
    except (RuntimeError, KeyError) as e:
        raise AnygrainError(f"{f}: tensors do not fit the backbone ({e})") from None
