"""Packed phrase models: a trained model stored as a small difference from its backbone.

A phrase model trained with frozen embeddings (``--freeze-embeddings``) differs from
its pre-trained backbone only in the transformer layers and the heads.  Packing
stores, for every weight matrix, the *difference* from the backbone quantised to
``bits`` (4 by default) in groups of ``group`` values with one float32 scale each;
vectors (biases, norms) are kept in float32 and the heads in float16.  Quantising the
difference rather than the weight keeps the error small: fine-tuning moves a weight by
a few percent, so a 4-bit code of the move is far finer than a 4-bit code of the weight.

A packed model directory holds::

    anygrain_packed.json   format, version, settings, backbone and weight fingerprints
    anygrain_phrase.json   the phrase model config (as a full model's)
    packed.safetensors     codes, scales and kept tensors

It is a second saved form of :class:`~anygrain.phrase.model.PhraseEncoder`, registered
with the model base (:class:`~anygrain.models.base.ModelType` ``PACKED_PHRASE``), so
``PhraseEncoder.load`` and ``load_model`` read it like the full form.  Loading resolves
the backbone (an offline alias such as ``minilm``), refuses one whose
weights differ from those packed against, rebuilds the weights, and checks the result
against the recorded fingerprints, so a packed model either loads exactly or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
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
from anygrain.models.hf import load_hf_dir
from anygrain.phrase.model import MODEL_CONFIG, PhraseConfig, PhraseEncoder
from anygrain.utils.atomic import atomic_dir

PACKED_CONFIG = config_file(ModelType.PACKED_PHRASE)
PACKED_FILE = "packed.safetensors"
FORMAT = "anygrain.packed-phrase-model"
FORMAT_VERSION = 2  # 2: float32 scales
CARD_FILE = "MODEL_CARD.md"
PACKED_NAMES = (PACKED_CONFIG, PACKED_FILE)  # a full save over a packed model removes these


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
    """``anygrain_packed.json``: what a packed model needs besides its tensors."""

    base_model: str
    base_fingerprint: str  # the backbone's weights, so another backbone version is refused
    full_fingerprint: str  # every weight of the unpacked model (phrase and question sides)
    encoders: list[str]
    bits: int
    group: int
    size_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> PackedInfo:
        """From the saved config (format and version checked by the model base)."""
        try:
            return cls(**{k: v for k, v in d.items() if k not in ("format", "format_version")})
        except TypeError as e:
            raise AnygrainError(f"{where}: invalid packed model config ({e})") from None

    @classmethod
    def read(cls, path: Path) -> PackedInfo:
        return cls.from_dict(read_config(path, ModelType.PACKED_PHRASE), str(path / PACKED_CONFIG))


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
    from safetensors.torch import save_file

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
    names = model._question_dirs()
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
    with atomic_dir(out) as staging:
        save_file(tensors, str(staging / PACKED_FILE))
        cfg = rebuilt.saved_config()
        (staging / MODEL_CONFIG).write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
        info = PackedInfo(
            base_model=model.config.base_model,
            base_fingerprint=base_fp,
            full_fingerprint=full_fingerprint(rebuilt),
            encoders=["phrase", *names],
            bits=s.bits,
            group=s.group,
            size_bytes=(staging / PACKED_FILE).stat().st_size,
        )
        if card is not None:
            (staging / CARD_FILE).write_text(card, encoding="utf-8")
        (staging / PACKED_CONFIG).write_text(json.dumps(info.to_dict(), indent=2))
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
    # table: 384 MB of me5-small's 250k-token vocabulary) instead of holding its own.
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
    from safetensors.torch import load_file

    info = PackedInfo.from_dict(config, str(path / PACKED_CONFIG))
    s = PackSettings(info.bits, info.group)
    f = path / MODEL_CONFIG
    if not f.exists():
        raise AnygrainError(f"{path}: packed model without {MODEL_CONFIG}")
    cfg = PhraseConfig.from_dict(read_config(path, ModelType.PHRASE), str(f))
    base, tok = _backbone(info.base_model, cache_dir)
    try:
        tensors = load_file(str(path / PACKED_FILE))
    except Exception as e:  # safetensors raises its own error types for damaged headers
        raise AnygrainError(f"{path / PACKED_FILE}: unreadable packed tensors ({e})") from None
    try:
        model = _rebuild(cfg, tensors, s, info.encoders[1:], base, tok)
    except (RuntimeError, KeyError) as e:
        raise AnygrainError(
            f"{path / PACKED_FILE}: tensors do not fit the backbone ({e})"
        ) from None
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
