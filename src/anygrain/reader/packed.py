"""Packed readers: a trained reader stored as a small difference from its backbone.

The same scheme as packed phrase models (:mod:`anygrain.phrase.packed`; the quantiser is
:mod:`anygrain.models.delta`): a reader trained with ``--freeze-embeddings`` differs from
its backbone only in the transformer layers and its heads, so every changed weight matrix
is stored as a 4-bit (or 8-bit) code of its difference from the backbone, vectors in
float32 and the heads in float32 (they are tiny and set every span score).

A packed reader directory holds::

    anygrain_packed_reader.json   format, version, settings, backbone and weight fingerprints
    anygrain_reader.json          the reader config (as a full reader's)
    packed.safetensors            codes, scales and kept tensors

It is a second saved form of :class:`~anygrain.reader.model.Reader`, so ``Reader.load``
reads it like the full form; loading refuses another backbone and checks the rebuilt
weights against the recorded fingerprint.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.models.base import (
    ModelType,
    config_file,
    fingerprint_modules,
    read_config,
    register_form,
)
from anygrain.models.delta import PACKED_FILE as PACKED_FILE  # re-exported: read here too
from anygrain.models.delta import (
    PackedInfo,
    PackSettings,
    apply_delta_tensors,
    delta_tensors,
    rebuild_packed,
    write_packed,
)
from anygrain.models.hf import load_hf_dir
from anygrain.reader.config import ReaderConfig
from anygrain.reader.model import READER_CONFIG, Reader

__all__ = ["PACKED_READER_CONFIG", "PackedReaderInfo", "is_packed_reader", "pack_reader"]

PACKED_READER_CONFIG = config_file(ModelType.PACKED_READER)
FORMAT = "anygrain.packed-reader"
FORMAT_VERSION = 1


@dataclass
class PackedReaderInfo(PackedInfo):
    """``anygrain_packed_reader.json``: what a packed reader needs besides its tensors."""

    format = FORMAT
    format_version = FORMAT_VERSION
    model_type = ModelType.PACKED_READER
    noun = "packed reader"


def is_packed_reader(path: str | Path) -> bool:
    return (Path(path) / PACKED_READER_CONFIG).exists()


def _backbone(name: str) -> tuple[Any, Any]:
    from anygrain.models.resolve import resolve_model

    path, _ = resolve_model(name)
    return load_hf_dir(path)


def _heads(reader: Reader) -> dict[str, torch.Tensor]:
    return {
        "qa.weight": reader.qa.weight,
        "qa.bias": reader.qa.bias,
        "selector.weight": reader.selector.weight,
        "selector.bias": reader.selector.bias,
    }


def pack_reader(
    reader: Reader,
    out: str | Path,
    *,
    settings: PackSettings | None = None,
    card: str | None = None,
    source: str | Path | None = None,
    inputs: tuple[str | Path | None, ...] = (),
) -> Path:
    """Write ``reader`` packed into ``out`` (refused inside an index or model, or over its
    own source; a directory that is not a packed reader is never replaced)."""
    from anygrain.utils.targets import check_output_dir

    s = settings or PackSettings()
    out = Path(out)
    check_output_dir(
        out, [source, *inputs], what="the packed reader", may_be=("model",), replaces=True
    )
    if out.is_dir() and any(out.iterdir()) and not is_packed_reader(out):
        raise AnygrainError(
            f"{out}: not empty and not a packed reader; refusing to replace what it holds"
        )
    base, tok = _backbone(reader.config.base_model)
    base_state = base.state_dict()
    tensors = delta_tensors(
        reader.encoder.state_dict(), base_state, s, "encoder", reader.config.base_model
    )
    for k, t in _heads(reader).items():
        tensors[f"heads/{k}"] = t.detach().to(torch.float32).contiguous()
    rebuilt = _rebuild(reader.config, tensors, s, base, tok)
    info = PackedReaderInfo(
        base_model=reader.config.base_model,
        base_fingerprint=fingerprint_modules([base]),
        full_fingerprint=rebuilt.fingerprint(),
        bits=s.bits,
        group=s.group,
    )
    write_packed(out, tensors, (READER_CONFIG, rebuilt.saved_config()), info, card)
    return out


def _rebuild(
    config: ReaderConfig, tensors: dict[str, torch.Tensor], s: PackSettings, base: Any, tok: Any
) -> Reader:
    encoder = copy.deepcopy(base)
    apply_delta_tensors(encoder, tensors, s, "encoder")
    reader = Reader(encoder, tok, ReaderConfig.from_dict(config.to_dict()))
    heads = {k[len("heads/") :]: v for k, v in tensors.items() if k.startswith("heads/")}
    reader.qa.load_state_dict({"weight": heads["qa.weight"], "bias": heads["qa.bias"]})
    reader.selector.load_state_dict(
        {"weight": heads["selector.weight"], "bias": heads["selector.bias"]}
    )
    reader.eval()
    return reader


def load_packed_reader(path: Path, config: dict[str, Any], verify: bool | None) -> Reader:
    """Rebuild a packed reader; refuses another backbone or damaged tensors."""
    info = PackedReaderInfo.from_dict(config, str(path / PACKED_READER_CONFIG))
    s = PackSettings(info.bits, info.group)
    if not (path / READER_CONFIG).exists():
        raise AnygrainError(f"{path}: packed reader without {READER_CONFIG}")
    cfg = ReaderConfig.from_dict(read_config(path, ModelType.READER), str(path / READER_CONFIG))
    base, tok = _backbone(info.base_model)
    reader = rebuild_packed(path, lambda t: _rebuild(cfg, t, s, base, tok))
    if verify is not False and reader.fingerprint() != info.full_fingerprint:
        if fingerprint_modules([base]) != info.base_fingerprint:
            raise IndexMismatchError(
                f"{path}: packed against backbone {info.base_model} with weights "
                f"{info.base_fingerprint}, but the installed one differs; install the "
                "backbone it was packed against"
            )
        raise IndexMismatchError(
            f"{path}: rebuilt weights do not match the fingerprint recorded in "
            f"{PACKED_READER_CONFIG} (files changed or corrupt)"
        )
    return reader


register_form(
    ModelType.PACKED_READER, Reader, FORMAT, FORMAT_VERSION, "a packed reader", load_packed_reader
)
