"""Saved training recipes: a JSON file of :class:`DprTrainConfig` fields with ``${NAME}`` slots.

A recipe names what a documented run does (model, batch size, negatives, data layout)
and leaves the user's paths as variables, filled from ``--var NAME=VALUE`` (or the
environment).  ``anygrain train dpr --recipe NAME_OR_FILE`` runs one; the recipes that
ship with anygrain live in ``anygrain/recipes/`` (``anygrain train recipes`` lists them)::

    {
      "description": "...",
      "variables": {"MULTICPR": "directory with ecom/, video/, medical/"},
      "config": {"train": ["multicpr:${MULTICPR}/ecom/train.query.txt"], "model": "me5-small"}
    }
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.train.dpr.config import DprTrainConfig

_SLOT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SUFFIX = ".json"


@dataclass
class Recipe:
    name: str
    description: str
    variables: dict[str, str]  # name -> what it means
    config: dict[str, Any]


def builtin_recipes() -> list[str]:
    """Names of the recipes shipped in ``anygrain/recipes``."""
    root = resources.files("anygrain") / "recipes"
    return sorted(p.name[: -len(SUFFIX)] for p in root.iterdir() if p.name.endswith(SUFFIX))


def _read(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.is_file():
        return path.stem, path.read_text(encoding="utf-8")
    res = resources.files("anygrain") / "recipes" / f"{name_or_path}{SUFFIX}"
    if res.is_file():
        return name_or_path, res.read_text(encoding="utf-8")
    raise AnygrainError(
        f"no recipe {name_or_path!r}: not a file, nor one of {', '.join(builtin_recipes())}"
    )


def load_recipe(name_or_path: str) -> Recipe:
    name, text = _read(name_or_path)
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise AnygrainError(f"recipe {name}: invalid JSON at line {e.lineno}: {e.msg}") from None
    if not isinstance(d, dict) or not isinstance(d.get("config"), dict):
        raise AnygrainError(f"recipe {name}: expected an object with a 'config' object")
    known = {f.name for f in fields(DprTrainConfig)}
    unknown = sorted(set(d["config"]) - known)
    if unknown:
        raise AnygrainError(f"recipe {name}: unknown config field(s): {', '.join(unknown)}")
    return Recipe(
        name=name,
        description=str(d.get("description", "")),
        variables={str(k): str(v) for k, v in dict(d.get("variables", {})).items()},
        config=d["config"],
    )


def _fill(value: Any, values: Mapping[str, str], recipe: Recipe) -> Any:
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            key = m.group(1)
            if key not in values:
                what = recipe.variables.get(key, "")
                raise AnygrainError(
                    f"recipe {recipe.name} needs --var {key}=..." + (f" ({what})" if what else "")
                )
            return values[key]

        return _SLOT.sub(one, value)
    if isinstance(value, list):
        return [_fill(v, values, recipe) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values, recipe) for k, v in value.items()}
    return value


def recipe_config(
    recipe: Recipe,
    variables: Mapping[str, str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> DprTrainConfig:
    """The recipe's config with its variables filled (``variables`` first, then the
    environment) and ``overrides`` (explicit command-line settings) on top."""
    values = dict(os.environ if environ is None else environ)
    values.update(variables or {})
    d = _fill(recipe.config, values, recipe)
    d.update(overrides or {})
    if "out" not in d:
        raise AnygrainError(f"recipe {recipe.name}: give --out")
    return DprTrainConfig.from_dict(d)


def parse_vars(items: list[str]) -> dict[str, str]:
    """``["NAME=VALUE", ...]`` as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _SLOT.fullmatch("${" + key + "}"):
            raise AnygrainError(f"--var expects NAME=VALUE, got {item!r}")
        out[key] = value
    return out
