"""Packed phrase models: a trained model stored as a small difference from its backbone.

A phrase model trained with frozen embeddings differs from its backbone only in the
transformer layers and the heads; packing stores those as :mod:`anygrain.models.delta`'s
quantised differences (the heads in float16).  A packed model directory holds::

    anygrain_packed.json   format, version, settings, backbone and weight fingerprints
    anygrain_phrase.json   the phrase model config (as a full model's)
    packed.safetensors     codes, scales and kept tensors

It is a second saved form of :class:`~anygrain.phrase.model.PhraseEncoder`
(``ModelType.PACKED_PHRASE``).  Loading refuses a backbone whose weights differ from those
packed against and checks the rebuilt weights against the recorded fingerprints, so a
packed model loads exactly or not at all.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from anygrain.models.delta import (
    CARD_FILE,
    PACKED_FILE,
    PackSettings,
    apply_delta_tensors,
    delta_tensors,
    rebuild_packed,
    write_packed,
)
from anygrain.models.delta import PackedInfo as PackedConfig
from anygrain.models.hf import load_hf_dir
from anygrain.phrase.model import MODEL_CONFIG, PhraseConfig, PhraseEncoder

PACKED_CONFIG = config_file(ModelType.PACKED_PHRASE)
FORMAT = "anygrain.packed-phrase-model"
FORMAT_VERSION = 2  # 2: float32 scales
PACKED_NAMES = (PACKED_CONFIG, PACKED_FILE)  # a full save over a packed model removes these


@dataclass
class PackedInfo(PackedConfig):
    """``anygrain_packed.json``: what a packed model needs besides its tensors."""

    format = FORMAT
    format_version = FORMAT_VERSION
    model_type = ModelType.PACKED_PHRASE
    noun = "packed model"

    # the names of the encoders packed: the phrase encoder, then the question encoders
    encoders: list[str] = field(kw_only=True)


def is_packed(path: str | Path) -> bool:
    return (Path(path) / PACKED_CONFIG).exists()


def full_fingerprint(model: PhraseEncoder) -> str:
    """Fingerprint of every weight of a phrase model, both sides and heads."""
    return fingerprint_modules([*model.encoders(), model.head_modules()])


def _backbone(name: str, cache_dir: Path | None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the backbone a phrase model started from."""
    from anygrain.models.resolve import resolve_model

    path, _ = resolve_model(name, cache_dir=cache_dir)
    return load_hf_dir(path)


def pack_phrase_model(
    model: PhraseEncoder,
    out: str | Path,
    *,
    settings: PackSettings | None = None,
    cache_dir: Path | None = None,
    card: str | None = None,
    source: str | Path | None = None,
    inputs: Sequence[str | Path | None] = (),
) -> Path:
    """Write ``model`` (a :class:`~anygrain.phrase.model.PhraseEncoder`) packed into ``out``.

    Tensors equal to the backbone's (frozen embeddings, buffers) are not stored at all.
    The written model is what :func:`load_packed` rebuilds: its fingerprints are those of
    the rebuilt weights, not of ``model``'s (they differ by the quantisation).

    Refused before any work: an ``out`` that is, or contains, the model's directory
    (``source``, or the packed directory it was loaded from) or another of ``inputs``, or
    that lies inside an index or model (:func:`anygrain.utils.targets.check_output_dir`);
    and a model that is already packed (loaded from a packed directory, weights unchanged):
    packing it again would quantise the quantised weights, so it is refused too."""
    from anygrain.utils.targets import check_output_dir

    s = settings or PackSettings()
    out = Path(out)
    packed: PackedSource | None = getattr(model, "packed", None)
    check_output_dir(
        out,
        [source, packed.path if packed is not None else None, *inputs],
        what="the packed model",
        may_be=("model",),
        replaces=True,
    )
    if packed is not None and full_fingerprint(model) == packed.full_fingerprint:
        raise AnygrainError(
            f"{packed.path}: is already a packed model; packing it again would quantise its "
            "weights a second time. Pack the full (unpacked) model it was made from"
        )
    base, tok = _backbone(model.config.base_model, cache_dir)
    base_fp = fingerprint_modules([base])
    base_state = base.state_dict()
    names = model.question_dirs()
    tensors: dict[str, torch.Tensor] = {}
    for enc_name, enc in zip(["phrase", *names], model.encoders(), strict=True):
        tensors.update(
            delta_tensors(enc.state_dict(), base_state, s, enc_name, model.config.base_model)
        )
    for k, t in model.head_modules().state_dict().items():
        tensors[f"heads/{k}"] = t.detach().to(torch.float16).contiguous()
    if out.is_dir() and any(out.iterdir()) and not is_packed(out):
        raise AnygrainError(
            f"{out}: not empty and not a packed phrase model; refusing to replace what it holds"
        )
    rebuilt = _rebuild(model.config, tensors, s, names, base, tok)
    rebuilt.config.phrase_fingerprint = rebuilt.phrase_fingerprint()
    info = PackedInfo(
        base_model=model.config.base_model,
        base_fingerprint=base_fp,
        full_fingerprint=full_fingerprint(rebuilt),
        encoders=["phrase", *names],
        bits=s.bits,
        group=s.group,
    )
    write_packed(out, tensors, (MODEL_CONFIG, rebuilt.saved_config()), info, card)
    return out


def _rebuild(
    config: PhraseConfig,
    tensors: dict[str, torch.Tensor],
    s: PackSettings,
    question_dirs: list[str],
    base: Any,
    tokenizer: Any,
) -> PhraseEncoder:
    """A PhraseEncoder from the backbone plus the packed tensors, with ``config``'s phrase
    fingerprint (the caller verifies or sets it)."""
    import copy

    cfg = PhraseConfig.from_dict(config.to_dict())
    # The backbone becomes the phrase encoder; each question encoder is a copy of it that
    # shares the tensors no encoder changed (with frozen embeddings, the token embedding
    # table, most of a multilingual model's weights) instead of holding its own.
    # Trainers give each encoder its own copy again first (:func:`untie`).
    changed = {k.split(":")[0].split("/", 1)[1] for k in tensors if not k.startswith("heads/")}
    unchanged = [
        t for name, t in [*base.named_parameters(), *base.named_buffers()] if name not in changed
    ]
    questions = [copy.deepcopy(base, memo={id(t): t for t in unchanged}) for _ in question_dirs]
    encoders = [base, *questions]
    for enc_name, enc in zip(["phrase", *question_dirs], encoders, strict=True):
        apply_delta_tensors(enc, tensors, s, enc_name)
    model = PhraseEncoder(cfg, encoders[0], tokenizer, encoders[1:])
    heads = {
        k[len("heads/") :]: v.to(torch.float32)
        for k, v in tensors.items()
        if k.startswith("heads/")
    }
    model.head_modules().load_state_dict(heads, strict=True)
    model.eval()
    return model


def load_packed(
    path: Path, config: dict[str, Any], verify: bool | None, *, cache_dir: Path | None = None
) -> PhraseEncoder:
    """Rebuild a packed phrase model from its directory and its packed config (format
    checked by the model base); refuses a different backbone or damaged tensors.
    ``verify`` (``None``: yes) checks the rebuilt weights against the recorded
    fingerprints."""
    info = PackedInfo.from_dict(config, str(path / PACKED_CONFIG))
    s = PackSettings(info.bits, info.group)
    f = path / MODEL_CONFIG
    if not f.exists():
        raise AnygrainError(f"{path}: packed model without {MODEL_CONFIG}")
    cfg = PhraseConfig.from_dict(read_config(path, ModelType.PHRASE), str(f))
    base, tok = _backbone(info.base_model, cache_dir)
    model = rebuild_packed(path, lambda t: _rebuild(cfg, t, s, info.encoders[1:], base, tok))
    # one hash of every rebuilt weight covers the phrase side too, so the phrase fingerprint
    # in the config can be trusted; the backbone is hashed only to explain a mismatch
    if verify is not False and full_fingerprint(model) != info.full_fingerprint:
        del model  # the backbone became its phrase encoder: load it again to explain
        base_fp = fingerprint_modules([_backbone(info.base_model, cache_dir)[0]])
        if base_fp != info.base_fingerprint:
            raise IndexMismatchError(
                f"{path}: packed against backbone {info.base_model} with weights "
                f"{info.base_fingerprint}, but the installed one has {base_fp}; install the "
                "backbone it was packed against"
            )
        raise IndexMismatchError(
            f"{path}: rebuilt weights do not match the fingerprints recorded in {PACKED_CONFIG} "
            "(files changed or corrupt)"
        )
    model.packed = PackedSource(path, info.full_fingerprint)
    return model


def untie(model: PhraseEncoder) -> None:
    """Give each encoder of ``model`` its own copy of every tensor it shares with an
    earlier one (what a packed load shares), so training one side leaves the others as
    they are; ties inside one encoder stay."""
    owned: set[int] = set()
    for enc in model.encoders():
        copies: dict[int, torch.Tensor] = {}
        for mod in enc.modules():
            for table in (mod._parameters, mod._buffers):
                for name, t in list(table.items()):
                    if t is None or id(t) not in owned:
                        continue
                    if id(t) not in copies:
                        c = t.detach().clone()
                        if isinstance(t, torch.nn.Parameter):
                            c = torch.nn.Parameter(c, requires_grad=t.requires_grad)
                        copies[id(t)] = c
                    table[name] = copies[id(t)]  # type: ignore[assignment]
        owned |= {id(t) for t in [*enc.parameters(), *enc.buffers()]}


register_form(
    ModelType.PACKED_PHRASE,
    PhraseEncoder,
    FORMAT,
    FORMAT_VERSION,
    "a packed phrase model",
    load_packed,
)


@dataclass(frozen=True)
class PackedSource:
    """Where a loaded model was unpacked from, so saving it unchanged writes the small form."""

    path: Path
    full_fingerprint: str


def copy_packed(source: PackedSource, out: Path) -> None:
    """Copy a packed model's files into ``out`` (other files there are kept)."""
    if out.exists() and out.resolve() == source.path.resolve():
        return
    out.mkdir(parents=True, exist_ok=True)
    # the graphs it ships without weights (anygrain.encode.shipped_graphs), so a copy in an
    # index searches without torch too; they are checked against the files they come from
    graphs = source.path / "graphs"
    if graphs.is_dir():
        shutil.copytree(graphs, out / "graphs", dirs_exist_ok=True)
    # the packed config last: until it exists the directory is not taken for a packed model
    for name in (PACKED_FILE, MODEL_CONFIG, CARD_FILE, PACKED_CONFIG):
        src = source.path / name
        if src.exists():
            tmp = out / f".{name}.{os.getpid()}.tmp"
            shutil.copyfile(src, tmp)
            os.replace(tmp, out / name)
