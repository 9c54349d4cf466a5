"""The model base: one way to save, load and fingerprint every anygrain model.

A saved model is a directory: its weights (Hugging Face directories, safetensors)
plus one JSON config, written last, that says what the directory holds::

    {"format": "anygrain.reader", "format_version": 1, ...the config's fields}

The config file's name tells the type (:class:`ModelType`; :data:`MODEL_FORMS` maps
each type to that name and to the module that defines it), so :func:`load_model`
needs no hint: it finds the type, imports its module on first use -- the module
registers the type with :func:`register_model` -- checks ``format`` and
``format_version`` and hands the directory to the type's loader.  The base imports no
model module (``tests/test_layering.py``), as the index base imports no index kind.

A new type (a compressed phrase model, another encoder) adds a member to
:class:`ModelType` and a line to :data:`MODEL_FORMS`, and registers either its
:class:`Model` subclass (``@register_model(ModelType.X)``) or, for another saved form
of an existing class, a loader (:func:`register_form`; the packed phrase model,
which is how the shipped default ships, loads this way into a ``PhraseEncoder``).

Encoders keep the method names their callers use -- ``encode_questions`` and
``encode_passages`` on both the bi-encoder and the phrase model (the query side and the
passage side), ``passage_fingerprint`` / ``phrase_fingerprint`` for what an index
records -- since the index kinds and trainers call them; ``fingerprint()`` is the one
implementation behind both.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from anygrain.errors import AnygrainError, IndexMismatchError

# the types, their forms and config file names: torch-free, re-exported for the model modules
from anygrain.models.forms import MODEL_FORMS as MODEL_FORMS
from anygrain.models.forms import ModelForm as ModelForm
from anygrain.models.forms import ModelType as ModelType
from anygrain.models.forms import config_file as config_file
from anygrain.utils.atomic import atomic_dir, atomic_write_text
from anygrain.utils.memory import file_mappings, release_mapped


class ModelConfig(Protocol):
    """A model's typed settings (a dataclass), saved in its config file."""

    def to_dict(self) -> dict[str, Any]: ...


_HASH_CHUNK = 16 << 20  # bytes hashed between two page releases


def fingerprint_modules(modules: Sequence[nn.Module], *, numbered: bool = True) -> str:
    """sha256 over parameter names and values: identifies weights, whatever the files.

    ``numbered`` prefixes each name with its module's position (``0.``, ``1.``...).  Both
    spellings are kept because indexes and packed models record fingerprints made
    each way (bi-encoders: one module, unnumbered; phrase models: numbered)."""
    h = hashlib.sha256()
    maps = file_mappings()
    for i, m in enumerate(modules):
        prefix = f"{i}." if numbered else ""
        for name, t in sorted(m.state_dict().items()):
            h.update(f"{prefix}{name}".encode())
            # the array's own buffer, not a bytes copy of it (a large embedding table's
            # copy would be a build's peak), a chunk at a time, giving back the
            # pages of a chunk mapped from its weights file once hashed: reading them all
            # would otherwise leave the whole table resident
            a = t.detach().to(torch.float32).contiguous().cpu().numpy().reshape(-1).view(np.uint8)
            for j in range(0, len(a), _HASH_CHUNK):
                part = a[j : j + _HASH_CHUNK]
                h.update(part.data)
                if maps:
                    release_mapped([(part.ctypes.data, part.nbytes)], maps)
    return h.hexdigest()[:16]


def release_weight_pages(module: nn.Module) -> int:
    """Give back the resident pages of ``module``'s weights that are still mapped from their
    file (:func:`~anygrain.utils.memory.release_mapped`); returns the bytes advised."""
    seen: dict[int, int] = {}
    for t in [*module.parameters(), *module.buffers()]:
        if t.device.type == "cpu":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return release_mapped(list(seen.items()))


def check_finite_weights(module: nn.Module, where: str) -> None:
    """Refuse weights holding NaN or infinity, naming the first such tensor: such a model
    gives NaN scores, which rank nothing, so every search or reading would come back empty
    without a word.  A sum per tensor (no copy; a float32 sum of finite weights stays
    finite) finds them; only a non-finite sum is looked at element by element."""
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if not t.is_floating_point() or not t.numel():
            continue
        total = t.detach().sum(dtype=torch.float32)
        if not bool(torch.isfinite(total)) and not bool(torch.isfinite(t.detach()).all()):
            raise AnygrainError(
                f"{where}: weight {name} holds NaN or infinite values; the model is damaged "
                "(reinstall or retrain it)"
            )


M = TypeVar("M", bound="Model")


class Model(nn.Module):
    """What every anygrain model shares: its config file, atomic save, load, fingerprint.

    A subclass sets the class attributes, writes its weights in :meth:`write_weights`,
    rebuilds itself in :meth:`from_saved` and names the modules its :meth:`fingerprint`
    covers in :meth:`fingerprinted_modules`."""

    model_type: ClassVar[ModelType]
    format: ClassVar[str]  # the config's "format" value
    format_version: ClassVar[int]
    noun: ClassVar[str] = "an anygrain model"  # for errors: "not {noun}"
    #: what runs it (:class:`anygrain.models.roles.Runs`): a torch model; its graphs'
    #: runners say ``"onnx"``
    runtime: str = "torch"
    # the config field that records the fingerprint at save time ("" for none)
    fingerprint_field: ClassVar[str] = ""
    # whether ``load`` re-hashes the weights against that field unless told otherwise
    verify_on_load: ClassVar[bool] = False
    numbered_fingerprint: ClassVar[bool] = True

    config: Any  # a ModelConfig
    #: the directory it was loaded from (:meth:`load`), for messages; "" for one made here
    loaded_from: str = ""

    # --- supplied by each type ------------------------------------------------------------
    def write_weights(self, directory: Path) -> None:
        """Write everything but the config into the existing ``directory``."""
        raise NotImplementedError

    @classmethod
    def from_saved(cls: type[M], path: Path, config: dict[str, Any]) -> M:
        """Rebuild from ``path``; ``config`` is the config file's dict, format checked."""
        raise NotImplementedError

    def fingerprinted_modules(self) -> Sequence[nn.Module]:
        """The modules :meth:`fingerprint` covers: those that make what an index stores."""
        raise NotImplementedError

    def owned_names(self) -> Sequence[str]:
        """Files and directories of this type that :meth:`save_into` replaces (besides the
        config); other files in the directory are kept."""
        return ()

    # --- shared ---------------------------------------------------------------------------
    @classmethod
    def config_file(cls) -> str:
        return config_file(cls.model_type)

    def fingerprint(self) -> str:
        """Identifies the weights that make index-side vectors: equal fingerprints, equal
        vectors.  An index records it and refuses a model with another one."""
        return fingerprint_modules(self.fingerprinted_modules(), numbered=self.numbered_fingerprint)

    def saved_config(self) -> dict[str, Any]:
        """The config file's content: format, version, then the config's fields."""
        return {
            "format": self.format,
            "format_version": self.format_version,
            **self.config.to_dict(),
        }

    def write_files(self, directory: Path) -> None:
        """Write the model into the existing ``directory``, the config last: a directory
        with the config file holds a complete model."""
        if self.fingerprint_field:
            setattr(self.config, self.fingerprint_field, self.fingerprint())
        self.write_weights(directory)
        atomic_write_text(
            directory / self.config_file(),
            json.dumps(self.saved_config(), indent=2, ensure_ascii=False),
        )

    def save(self, path: str | Path) -> Path:
        """Write the model to ``path`` atomically: the directory is replaced whole, so a
        crash leaves the old model or the new one."""
        path = Path(path)
        with atomic_dir(path) as tmp:
            self.write_files(tmp)
        return path

    def save_into(self, directory: str | Path) -> Path:
        """Write the model into ``directory`` (created if needed), keeping the other files
        there (a training run's checkpoints and log).  The files are staged beside it and
        moved in with the config last; until then no config marks a half-written model."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".model.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            self.write_files(staging)
            cfg = self.config_file()
            (directory / cfg).unlink(missing_ok=True)
            for name in self.owned_names():
                target = directory / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
            for item in sorted(staging.iterdir(), key=lambda p: p.name == cfg):
                target = directory / item.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(item, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return directory

    def check_fingerprint(self, path: Path) -> None:
        """Refuse weights whose fingerprint differs from the one their config records."""
        want = getattr(self.config, self.fingerprint_field, "") if self.fingerprint_field else ""
        if want and self.fingerprint() != want:
            raise IndexMismatchError(
                f"{path}: weights do not match the fingerprint recorded in "
                f"{self.config_file()} (files changed or corrupt)"
            )

    @classmethod
    def load(cls: type[M], dir_or_name: str | Path, *, verify: bool | None = None) -> M:
        """A saved model of this class (or a subclass, or another saved form of it) from a
        directory or a shipped model's name.  ``verify`` re-hashes the weights against the
        recorded fingerprint; ``None`` is the type's default (``verify_on_load``)."""
        path = saved_model_dir(dir_or_name)
        kind = detect_model_type(path)
        if kind is None:
            raise AnygrainError(f"{path}: not {cls.noun} (no {_expected_files(cls)})")
        form = registered_form(kind)
        if not issubclass(form.cls, cls):
            raise AnygrainError(f"{path}: holds {form.cls.noun} ({kind.value}), not {cls.noun}")
        model = form.load(path, read_config(path, kind), verify)
        assert isinstance(model, cls)
        model.loaded_from = str(path)
        try:
            check_finite_weights(model, str(path))
        finally:  # the check read every page, as the fingerprint does
            release_weight_pages(model)
        return model


def _expected_files(cls: type[Model]) -> str:
    if cls is Model:
        return " or ".join(f.config_file for f in MODEL_FORMS.values())
    return cls.config_file()


# --- the registry --------------------------------------------------------------------------


Loader = Callable[[Path, dict[str, Any], "bool | None"], Model]


@dataclass(frozen=True)
class RegisteredForm:
    """How one saved form is read: its format, version, and the loader that rebuilds it."""

    cls: type[Model]  # what loading gives
    format: str
    format_version: int
    noun: str
    load: Loader


_REGISTRY: dict[ModelType, RegisteredForm] = {}


def _load_full(cls: type[Model]) -> Loader:
    def load(path: Path, config: dict[str, Any], verify: bool | None) -> Model:
        model = cls.from_saved(path, config)
        if cls.verify_on_load if verify is None else verify:
            model.check_fingerprint(path)
        return model

    return load


def register_model(kind: ModelType) -> Callable[[type[M]], type[M]]:
    """Class decorator: ``cls`` is the model saved as ``kind`` (its own attributes say the
    format and version)."""

    def deco(cls: type[M]) -> type[M]:
        cls.model_type = kind
        register_form(kind, cls, cls.format, cls.format_version, cls.noun, _load_full(cls))
        return cls

    return deco


def register_form(
    kind: ModelType, cls: type[Model], format: str, format_version: int, noun: str, load: Loader
) -> None:
    """Register ``kind`` as a saved form of ``cls`` read by ``load(path, config, verify)``."""
    _REGISTRY[kind] = RegisteredForm(cls, format, format_version, noun, load)


def registered_form(kind: ModelType) -> RegisteredForm:
    if kind not in _REGISTRY:
        importlib.import_module(MODEL_FORMS[kind].module)
    if kind not in _REGISTRY:
        raise AnygrainError(f"{MODEL_FORMS[kind].module} does not register model type {kind.value}")
    return _REGISTRY[kind]


def detect_model_type(path: str | Path) -> ModelType | None:
    """The type of the model saved in ``path`` by its config file, or ``None``."""
    p = Path(path)
    for kind in ModelType:
        if (p / MODEL_FORMS[kind].config_file).is_file():
            return kind
    return None


def saved_model_dir(dir_or_name: str | Path) -> Path:
    """A saved model's directory: ``dir_or_name`` itself, or the shipped model so named
    (:func:`anygrain.models.shipped.saved_model_dir`, which needs no torch)."""
    from anygrain.models.shipped import saved_model_dir as resolve

    return resolve(dir_or_name)


def read_config(path: Path, kind: ModelType) -> dict[str, Any]:
    """The config of the ``kind`` model saved in ``path``; an error unless it is readable
    JSON of that type's format and of the version this anygrain reads."""
    form = registered_form(kind)
    f = path / MODEL_FORMS[kind].config_file
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnygrainError(f"{path}: not {form.noun} (no {f.name})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AnygrainError(f"{f}: corrupt config ({e})") from None
    if not isinstance(d, dict) or d.get("format") != form.format:
        raise AnygrainError(f"{f}: not {form.noun} config")
    if d.get("format_version") != form.format_version:
        raise AnygrainError(
            f"{f}: {form.noun} format version {d.get('format_version')}, "
            f"this anygrain reads {form.format_version}"
        )
    return d


def load_model(dir_or_name: str | Path, *, verify: bool | None = None) -> Model:
    """Whatever model is saved in a directory (or shipped under a name), by its type."""
    return Model.load(dir_or_name, verify=verify)
