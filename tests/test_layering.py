"""The package's layers, checked from the source: who may import whom.

Every module under ``src/anygrain`` is parsed with :mod:`ast`, and every import it
makes is collected -- at the top, inside functions and under ``TYPE_CHECKING`` alike,
``from . import x`` resolved, and ``importlib.import_module("...")`` with a literal
name.  The rules (docs/design.md, "Layers"):

(a) library modules -- everything but ``anygrain/__init__.py``, ``anygrain/api.py``,
    ``anygrain/cli/`` and ``anygrain/serve/`` -- never import ``anygrain.api``,
    ``anygrain.cli`` or ``anygrain.serve``: those are the top layers built on them;
(b) ``anygrain/serve/`` never imports ``anygrain.cli``;
(c) the floors: ``anygrain/index/`` (the base every kind stands on: base, manifest,
    registry, settings, model_ref, scope, tombstones, updater) imports no index kind
    (``sparse``, ``dense``, ``phrase``) and nothing that stands on the kinds (``composite``, ``train``, ``reader``):
    it finds a kind's module by name in ``anygrain.index.registry`` and runs its updates
    through the kind's class; and the kinds import nothing that stands on them;
(d) the model base ``anygrain/models/base.py`` imports no model type's module: it finds
    one by name in its ``MODEL_FORMS`` table;
(e) the encode engine ``anygrain/encode/`` imports no model, index or method package: what
    a shard holds is the caller's ``ShardEncoder``, so the engine and its executors (local,
    Ray) serve dense vectors, phrase dumps and training caches alike;
(f) the command line ``anygrain/cli/`` imports ``anygrain.api``, ``anygrain.serve``,
    ``anygrain.errors`` and itself; any other anygrain name it imports is an option type
    (an Enum or a dataclass, checked by importing it): the commands make no domain decisions;
(g) no private name (``_x``) is imported from another module: what a module shares is public;
(h) ``anygrain/integrations/`` (MCP, framework retrievers: optional extras) is a top layer
    too: no library module, nor ``serve/``, imports it (so ``import anygrain`` imports no
    framework; nor the package's ``__init__`` or ``api.py``), and it never imports
    ``anygrain.cli``; ``cli/`` may import it;
(i) ``anygrain/api.py`` is a facade: at most 650 lines, and no function in it longer than
    40 lines after its docstring -- the work lives in the package that owns it (``eval/``,
    ``reader/``, ``corpus/``, ``anygrain/search.py``, ``anygrain/demo.py``), and api.py
    imports it or delegates to it;
(j) the vector-search floor ``anygrain/vectors/`` (the FAISS wrapper, the factory policy,
    the on-disk blocks) imports no index kind and nothing that stands on the kinds: dense
    and phrase indexes stand on it side by side (the top layers it never imports, by (a));
(k) an index kind imports no other kind -- dense and phrase are siblings -- except that a
    phrase index's lexical part is a BM25 index (``phrase`` may import ``sparse``);
(l) the developer tools ``anygrain/tools/`` stand on the whole library (they export every
    model type's graphs): no other module imports them;
(m) ``anygrain/models/`` (the model base, the encoders, the shipped models) imports no model
    type it does not define (``phrase``, ``reader``), no index kind and nothing above them.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "anygrain"

# the top layers: built on the library, never imported by it
TOP = ("anygrain.api", "anygrain.serve", "anygrain.integrations")
INTEGRATIONS = "anygrain.integrations"
CLI = "anygrain.cli"
INDEX_BASE = "anygrain.index.base"
INDEX_UPDATER = "anygrain.index.updater"
# the floors: index/ (the base every kind stands on) < the kinds < what stands on the kinds
INDEX_FLOOR = "anygrain.index"
KINDS = ("anygrain.sparse", "anygrain.dense", "anygrain.phrase")
ABOVE_KINDS = ("anygrain.composite", "anygrain.train", "anygrain.reader")
# the floor under the kinds for vector search (dense and phrase)
VECTOR_FLOOR = "anygrain.vectors"
# (kind, kind it may import): a phrase index's lexical part is a BM25 index
KIND_MAY_IMPORT = frozenset({("anygrain.phrase", "anygrain.sparse")})
# the modules defining model types, which the model base knows by name only
MODEL_TYPE_MODULES = ("anygrain.models.biencoder", "anygrain.phrase", "anygrain.reader")
MODEL_BASE = "anygrain.models.base"
# the developer tools: above every library module, imported by none
TOOLS = "anygrain.tools"
# the model floor and what stands on it: the model types defined elsewhere, the index kinds
MODELS = "anygrain.models"
ABOVE_MODELS = (
    "anygrain.phrase",
    "anygrain.reader",
    "anygrain.index",
    "anygrain.sparse",
    "anygrain.dense",
    "anygrain.composite",
    "anygrain.train",
)
# what the encode engine runs for, never imports: models, index kinds and trainers
ENCODE_BELOW = (
    "anygrain.models",
    "anygrain.index",
    "anygrain.sparse",
    "anygrain.dense",
    "anygrain.phrase",
    "anygrain.train",
    "anygrain.reader",
)


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported} ({self.rule})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _is_cli(name: str) -> bool:
    # the anygrain.cli package and its modules (not anygrain.client, say)
    return _within(name, CLI)


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in ``source``, wherever it sits.  ``from A import b``
    gives both ``A`` and ``A.b`` (``b`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            arg = node.args[0]
            if (
                fname in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
            ):
                found.append((node.lineno, arg.value))
    return [(line, name) for line, name in found if _within(name, "anygrain")]


def is_library(module: str) -> bool:
    return not (
        module == "anygrain"
        or _within(module, "anygrain.api")
        or _is_cli(module)
        or _within(module, "anygrain.serve")
        or _within(module, INTEGRATIONS)
    )


def check_source(source: str, module: str, *, is_package: bool = False) -> list[Violation]:
    """The layering rules broken by ``source``, the text of ``module``."""
    out: list[Violation] = []
    for line, name in imports_of(source, module, is_package=is_package):
        if is_library(module) and (any(_within(name, t) for t in TOP) or _is_cli(name)):
            out.append(Violation(module, line, name, "library imports a top layer"))
        if _within(module, "anygrain.serve") and _is_cli(name):
            out.append(Violation(module, line, name, "serve imports the CLI"))
        if (
            not is_library(module)
            and not (_is_cli(module) or _within(module, INTEGRATIONS))
            and _within(name, INTEGRATIONS)
        ):  # the package, api.py, serve/: `import anygrain` imports no framework
            out.append(Violation(module, line, name, "imports an integration"))
        if _within(module, INTEGRATIONS) and _is_cli(name):
            out.append(Violation(module, line, name, "an integration imports the CLI"))
        if _within(module, INDEX_FLOOR) and any(_within(name, k) for k in KINDS + ABOVE_KINDS):
            out.append(
                Violation(
                    module, line, name, "index/ imports an index kind or what stands on the kinds"
                )
            )
        if any(_within(module, k) for k in KINDS) and any(_within(name, k) for k in ABOVE_KINDS):
            out.append(Violation(module, line, name, "a kind imports what stands on the kinds"))
        if _within(module, VECTOR_FLOOR) and any(_within(name, k) for k in KINDS + ABOVE_KINDS):
            out.append(
                Violation(
                    module, line, name, "vectors/ imports an index kind or what stands on them"
                )
            )
        mine, theirs = _kind_of(module), _kind_of(name)
        if mine and theirs and mine != theirs and (mine, theirs) not in KIND_MAY_IMPORT:
            out.append(Violation(module, line, name, "a kind imports another kind"))
        if _is_private_name(name) and name.rpartition(".")[0] != module:
            out.append(Violation(module, line, name, "private name imported across modules"))
        if module == MODEL_BASE and any(_within(name, k) for k in MODEL_TYPE_MODULES):
            out.append(Violation(module, line, name, "model base imports a model type"))
        if _within(module, "anygrain.encode") and any(_within(name, k) for k in ENCODE_BELOW):
            out.append(Violation(module, line, name, "encode engine imports what it encodes"))
        if _within(name, TOOLS) and not _within(module, TOOLS):
            out.append(Violation(module, line, name, "imports a developer tool"))
        model_base_rule = module == MODEL_BASE and any(
            _within(name, k) for k in MODEL_TYPE_MODULES
        )  # (d) says it
        if (
            _within(module, MODELS)
            and not model_base_rule
            and any(_within(name, k) for k in ABOVE_MODELS)
        ):
            out.append(Violation(module, line, name, "models/ imports what stands on it"))
    return out


def _kind_of(name: str) -> str | None:
    """The index kind package ``name`` is in, if any."""
    return next((k for k in KINDS if _within(name, k)), None)


def _is_private_name(name: str) -> bool:
    """``anygrain.x._y`` where ``_y`` is a name inside module ``x``, not a private module file
    (``corpus/readers/_io.py`` is a module its package's siblings share)."""
    last = name.rpartition(".")[2]
    if not last.startswith("_") or last.startswith("__"):
        return False
    rel = Path(*name.split("."))
    return not ((SRC / rel).with_suffix(".py").exists() or (SRC / rel).is_dir())


def all_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_found() -> None:
    names = {module_name(p) for p in all_modules()}
    assert {"anygrain", "anygrain.api", "anygrain.cli", "anygrain.cli.main", INDEX_BASE} <= names
    assert "anygrain.serve.app" in names
    assert len(names) > 50


def test_layers() -> None:
    bad: list[Violation] = []
    for p in all_modules():
        bad += check_source(
            p.read_text(encoding="utf-8"), module_name(p), is_package=p.name == "__init__.py"
        )
    assert not bad, "layering violations:\n" + "\n".join(map(str, bad))


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        # (a) at the top, inside a function, relative, as a submodule, by importlib
        ("anygrain.eval.x", "from anygrain.api import search_index", "top layer"),
        ("anygrain.eval.x", "def f():\n    import anygrain.cli.train\n", "top layer"),
        ("anygrain.hits.x", "from anygrain.cli.search import print_phrase_hits", "top layer"),
        ("anygrain.hits.x", "from anygrain import cli", "top layer"),
        ("anygrain.train.x", "from .. import api", "top layer"),
        ("anygrain.train.x", "from anygrain import serve", "top layer"),
        ("anygrain.models.x", "from anygrain.serve.app import create_app", "top layer"),
        ("anygrain.models.x", "import importlib\nimportlib.import_module('anygrain.cli')", "top"),
        # (b)
        ("anygrain.serve.app", "def f():\n    from anygrain.cli.common import X\n", "CLI"),
        # (h)
        ("anygrain.hits.x", "from anygrain.integrations.mcp import create_server", "top layer"),
        ("anygrain", "import anygrain.integrations.langchain", "an integration"),
        ("anygrain.api", "def f():\n    from anygrain.integrations import mcp\n", "integration"),
        ("anygrain.serve.app", "from anygrain.integrations import mcp", "an integration"),
        ("anygrain.integrations.mcp", "from anygrain.cli.common import fail", "the CLI"),
        # (c)
        (INDEX_BASE, "from anygrain.dense.index import DenseIndex", "index kind"),
        (INDEX_BASE, "from anygrain.composite import hybrid", "index kind"),
        (INDEX_UPDATER, "def f():\n    from anygrain.phrase.update import X\n", "index kind"),
        # index/ floor, kinds, private names
        ("anygrain.index.tombstones", "from anygrain.phrase.index import PhraseIndex", "index/"),
        ("anygrain.index.updater", "def f():\n    import anygrain.composite.hybrid\n", "index/"),
        ("anygrain.index.scope", "from anygrain.train.loop import run_loop", "index/"),
        ("anygrain.dense.index", "from anygrain.composite.hybrid import HybridIndex", "a kind"),
        ("anygrain.phrase.build", "def f():\n    from anygrain.train import phrase\n", "a kind"),
        ("anygrain.api", "from anygrain.index.manifest import _warn_unchecked", "private"),
        ("anygrain.phrase.packed", "from anygrain.phrase.model import _x", "private"),
        # (d)
        (MODEL_BASE, "def f():\n    from anygrain.phrase.packed import X\n", "model type"),
        (MODEL_BASE, "from anygrain.models import biencoder", "model type"),
        # (e)
        ("anygrain.encode.engine", "from anygrain.dense.index import DenseIndex", "encode"),
        ("anygrain.encode.ray_executor", "def f():\n    import anygrain.models\n", "encode"),
        # (j)
        ("anygrain.vectors.faiss_index", "from anygrain.dense.shards import ShardSet", "vectors/"),
        ("anygrain.vectors.disk", "def f():\n    from anygrain.phrase import build\n", "vectors/"),
        ("anygrain.vectors", "from anygrain.sparse.bm25 import BM25Index", "vectors/"),
        ("anygrain.vectors.factory", "import anygrain.composite.sharded", "vectors/"),
        ("anygrain.vectors.adding", "from anygrain.train.loop import run_loop", "vectors/"),
        ("anygrain.vectors.disk", "from anygrain.serve.app import create_app", "top layer"),
        # (k)
        ("anygrain.phrase.build", "from anygrain.dense.index import model_reference", "another"),
        ("anygrain.phrase.compress", "from ..dense import faiss_index", "another kind"),
        ("anygrain.dense.index", "def f():\n    from anygrain.phrase.index import X\n", "another"),
        ("anygrain.sparse.bm25", "from anygrain.dense.shards import ShardSet", "another kind"),
        ("anygrain.dense.update", "import anygrain.sparse.update", "another kind"),
        # (l)
        ("anygrain.models.shipped", "from anygrain.tools.ship_graphs import main", "a developer"),
        ("anygrain.api", "def f():\n    import anygrain.tools\n", "developer tool"),
        ("anygrain.cli.main", "from anygrain.tools import ship_graphs", "developer tool"),
        # (m)
        ("anygrain.models.x", "def f():\n    from anygrain.phrase.onnx import K\n", "models/"),
        ("anygrain.models.shipped", "from anygrain.reader.model import Reader", "models/"),
        ("anygrain.models.biencoder", "from anygrain.index.base import Index", "models/"),
    ],
)
def test_the_checker_flags_violations(module: str, source: str, rule: str) -> None:
    bad = check_source(source, module)
    assert bad and all(rule in v.rule for v in bad), bad


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("anygrain.api", "from anygrain.index.base import Index"),
        ("anygrain.cli", "from anygrain.api import search_index\nimport anygrain.serve"),
        ("anygrain.cli.search", "from anygrain.api import search_index"),
        ("anygrain.cli.main", "from anygrain.cli import index, search"),
        ("anygrain.serve.app", "from anygrain.api import search_index"),
        ("anygrain.integrations.mcp", "from anygrain.serve.schemas import HitOut"),
        ("anygrain.cli.mcp", "def f():\n    from anygrain.integrations.mcp import run_server\n"),
        ("anygrain.eval.x", "import anygrain.client\nfrom anygrain.index.base import Index"),
        (INDEX_BASE, "from anygrain.index.registry import KIND_MODULES"),
        (INDEX_BASE, "from anygrain.index.settings import IndexSettings"),
        ("anygrain.composite.hybrid", "from anygrain.dense.index import DenseIndex"),
        ("anygrain.phrase.index", "from anygrain.index.base import Index"),
        ("anygrain.corpus.readers.json", "from anygrain.corpus.readers import _io"),
        ("anygrain.x", "from __future__ import annotations\nfrom anygrain import __version__"),
        (MODEL_BASE, "from anygrain.models.shipped import SHIPPED"),
        ("anygrain.dense.index", "from anygrain.vectors.faiss_index import FaissIndex"),
        ("anygrain.phrase.build", "from anygrain.vectors.factory import plan_training"),
        ("anygrain.vectors.faiss_index", "from anygrain.vectors.disk import read_index"),
        ("anygrain.vectors.disk", "from anygrain.utils.atomic import atomic_path"),
        ("anygrain.phrase.lexical", "from anygrain.sparse.bm25 import BM25Index"),
        ("anygrain.dense.sharded", "from anygrain.index.shard_view import ShardView"),
        ("anygrain.tools.ship_graphs", "from anygrain.phrase.onnx import export_questions"),
        ("anygrain.tools.ship_graphs", "from anygrain.reader.onnx import export_reader"),
        ("anygrain.models.shipped", "from anygrain.models.packed_state import PackedState"),
        ("anygrain.phrase.packed", "from anygrain.models.delta import PackSettings"),
        ("anygrain.reader.packed", "from anygrain.models.delta import PackSettings"),
    ],
)
def test_the_checker_allows_the_layers(module: str, source: str) -> None:
    assert check_source(source, module) == []


def test_every_index_kind_has_a_home() -> None:
    """Each IndexKind names a module in the registry, and importing it registers the kind."""
    from anygrain.index.registry import _REGISTRY, IndexKind
    from anygrain.index.registry import KIND_MODULES as HOMES

    assert set(HOMES) == {k.value for k in IndexKind}
    for kind in IndexKind:
        importlib.import_module(HOMES[kind.value])
        assert _REGISTRY[kind].kind is kind


def test_every_model_type_has_a_home() -> None:
    """Each ModelType names a module, and importing it registers the type."""
    from anygrain.models.base import _REGISTRY, MODEL_FORMS, ModelType

    assert set(MODEL_FORMS) == set(ModelType)
    for kind in ModelType:
        importlib.import_module(MODEL_FORMS[kind].module)
        assert kind in _REGISTRY


# (f) the command line makes no domain decisions: modules under ``anygrain.cli`` import the
# top layers (``anygrain.api``, ``anygrain.serve``), each other, ``anygrain.errors`` and the
# package's version; any other anygrain name they import must be an option type -- an Enum
# (``IndexKind``, ``Unit``, ``Verify``, ...) or a dataclass (a trainer's config), checked by
# importing it.  A helper a command needs from the library goes behind ``anygrain.api``.
CLI_MAY_IMPORT = (
    "anygrain.api",
    "anygrain.serve",
    "anygrain.integrations",
    "anygrain.cli",
    "anygrain.errors",
)
# help texts taken from the modules that own them: through the API they would cost
# ``anygrain --help`` the API's imports (~60 ms)
CLI_MAY_IMPORT_NAMES = (
    "anygrain.__version__",
    "anygrain.corpus.splitters.split_help",
    "anygrain.train.saved_config.BF16_HELP",
)


def cli_imports_of(
    source: str, module: str, *, is_package: bool = False
) -> list[tuple[int, str, str | None]]:
    """(line, module, name) for every anygrain import in ``source``: ``name`` is what
    ``from module import name`` takes, None for ``import module`` (and ``import_module``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [(node.lineno, target, a.name) for a in node.names]
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            arg = node.args[0]
            if (
                fname in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
            ):
                found.append((node.lineno, arg.value, None))
    return [x for x in found if _within(x[1], "anygrain")]


def is_option_type(obj: object) -> bool:
    """An Enum subclass or a dataclass type: what a command's options are made of."""
    return isinstance(obj, type) and (issubclass(obj, enum.Enum) or dataclasses.is_dataclass(obj))


def check_cli_source(source: str, module: str, *, is_package: bool = False) -> list[Violation]:
    """Rule (f) for ``source``, the text of ``module`` (only modules under anygrain.cli)."""
    if not _is_cli(module):
        return []
    out: list[Violation] = []
    for line, target, name in cli_imports_of(source, module, is_package=is_package):
        full = target if name is None else f"{target}.{name}"
        # ``from anygrain import api`` as much as ``from anygrain.api import x``
        if any(_within(target, m) or _within(full, m) for m in CLI_MAY_IMPORT):
            continue
        if full in CLI_MAY_IMPORT_NAMES:
            continue
        if name is None or name == "*":
            out.append(Violation(module, line, full, "CLI imports a library module"))
            continue
        obj = getattr(importlib.import_module(target), name, None)
        if not is_option_type(obj):
            out.append(
                Violation(module, line, full, "CLI imports a library name that is no option type")
            )
    return out


def test_the_cli_imports_only_the_api_and_option_types() -> None:
    bad: list[Violation] = []
    for p in all_modules():
        name = module_name(p)
        if _is_cli(name):
            bad += check_cli_source(
                p.read_text(encoding="utf-8"), name, is_package=p.name == "__init__.py"
            )
    assert not bad, "the CLI imports the library:\n" + "\n".join(map(str, bad))


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("anygrain.cli.search", "from anygrain.index.manifest import read_manifest"),
        ("anygrain.cli.search", "def f():\n    from anygrain.index.base import Index\n"),
        ("anygrain.cli.eval", "from anygrain.eval.domains import evaluate_domains"),
        ("anygrain.cli.common", "from anygrain.train.saved_config import option"),
        ("anygrain.cli.train", "from anygrain.train import dpr"),  # a module, not a type
        ("anygrain.cli.index", "import anygrain.index.base"),
        ("anygrain.cli.index", "import importlib\nimportlib.import_module('anygrain.phrase')"),
        ("anygrain.cli", "from ..utils.threads import set_threads"),
        ("anygrain.cli.search", "from anygrain.hits.highlight import phrase_context"),
    ],
)
def test_the_checker_flags_the_cli_importing_the_library(module: str, source: str) -> None:
    bad = check_cli_source(source, module, is_package=module == "anygrain.cli")
    assert bad and all("CLI imports" in v.rule for v in bad), bad


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("anygrain.cli.search", "from anygrain.index.registry import IndexKind"),  # an Enum
        (
            "anygrain.cli.search",
            "from anygrain.hits.hit import Unit\nfrom anygrain.hits.hit import Hit",
        ),
        ("anygrain.cli.eval", "from anygrain.index.scope import Scope"),
        ("anygrain.cli.train", "from anygrain.train.dpr.config import DprTrainConfig"),  # dataclass
        (
            "anygrain.cli.search",
            "def f():\n    from anygrain.api import load_index, search_index\n",
        ),
        ("anygrain.cli.serve", "from anygrain.serve.app import create_app"),
        ("anygrain.cli.main", "from anygrain.cli import index\nfrom anygrain import __version__"),
        ("anygrain.cli.common", "from anygrain.errors import AnygrainError, ErrorLog"),
        ("anygrain.cli", "from .common import fail\nfrom ..api import ask"),
        ("anygrain.cli.index", "from anygrain import api, serve"),
        ("anygrain.api", "from anygrain.index.manifest import read_manifest"),  # not the CLI
    ],
)
def test_the_checker_allows_the_cli_its_imports(module: str, source: str) -> None:
    assert check_cli_source(source, module, is_package=module == "anygrain.cli") == []


# (i) api.py is a facade: each function one user-level operation, delegating the work
API = PACKAGE / "api.py"
API_MAX_LINES = 650
API_MAX_BODY = 40  # lines of a function after its docstring


def check_facade(source: str) -> list[str]:
    """What keeps ``source`` (the text of api.py) from being a facade."""
    out: list[str] = []
    n = len(source.splitlines())
    if n > API_MAX_LINES:
        out.append(f"api.py: {n} lines, over {API_MAX_LINES}: move the work to its package")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body[1:] if ast.get_docstring(node) and len(node.body) > 1 else node.body
            lines = (node.end_lineno or node.lineno) - body[0].lineno + 1
            if lines > API_MAX_BODY:
                out.append(
                    f"api.py:{node.lineno} {node.name}: {lines} lines after its docstring, "
                    f"over {API_MAX_BODY}: delegate to the package that owns the work"
                )
    return out


def test_api_is_a_facade() -> None:
    bad = check_facade(API.read_text(encoding="utf-8"))
    assert not bad, "api.py is no facade:\n" + "\n".join(bad)


def _function(body_lines: int, doc_lines: int = 1) -> str:
    doc = ['    """A docstring.', *(["    more"] * (doc_lines - 1)), '    """']
    return "\n".join(["def f(x):", *doc, *(["    x += 1"] * (body_lines - 1)), "    return x", ""])


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("x = 1\n" * (API_MAX_LINES + 1), "lines, over"),
        (_function(API_MAX_BODY + 1), "f: 41 lines"),
        ("class C:\n" + "\n".join("    " + x for x in _function(60).splitlines()), "f: 60"),
    ],
)
def test_the_checker_flags_a_facade_doing_the_work(source: str, what: str) -> None:
    bad = check_facade(source)
    assert bad and any(what in b for b in bad), bad


@pytest.mark.parametrize(
    "source",
    [
        "x = 1\n" * API_MAX_LINES,
        _function(API_MAX_BODY, doc_lines=30),  # a long docstring is no work
        "def f():\n    from anygrain.demo import run_demo\n\n    return run_demo()\n",
    ],
)
def test_the_checker_allows_a_facade(source: str) -> None:
    assert check_facade(source) == []


def test_import_anygrain_imports_no_framework() -> None:
    """The integrations are optional extras: ``import anygrain`` (and the HTTP API's
    schemas, which the MCP server shares) loads none of their frameworks."""
    import subprocess
    import sys

    frameworks = ("mcp", "langchain", "langchain_core", "llama_index", "haystack")
    code = (
        "import sys, anygrain, anygrain.serve.schemas\n"
        "from anygrain import Index\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {frameworks!r}])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


#: the torch-free homes of every model's config and config file names, and of the runtime
#: decision: torch modules import them, never the reverse
CONFIG_MODULES = (
    "anygrain.models.forms",
    "anygrain.models.encoder_config",
    "anygrain.models.runtime",
    "anygrain.encode.runtime",
    "anygrain.phrase.config",
    "anygrain.reader.config",
    "anygrain.utils.precision",
)


def config_imports(module: str) -> list[str]:
    """The heavy modules (torch, transformers) importing ``module`` loads, in a fresh
    interpreter."""
    import subprocess
    import sys

    code = (
        f"import sys, {module}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return list(ast.literal_eval(r.stdout.strip()))


@pytest.mark.parametrize("module", CONFIG_MODULES)
def test_config_modules_import_no_torch(module: str) -> None:
    assert config_imports(module) == [], f"{module} imports a model runtime"


def test_the_config_check_sees_torch() -> None:
    pytest.importorskip("torch")
    assert config_imports("anygrain.models.base") == ["torch"]


def test_every_config_file_name_has_one_home() -> None:
    """The models' config file names are the forms' (no module spells its own)."""
    from anygrain.models import forms
    from anygrain.models.base import MODEL_FORMS
    from anygrain.models.packed_state import PACKED_PHRASE_CONFIG, PACKED_READER_CONFIG
    from anygrain.phrase.config import MODEL_CONFIG
    from anygrain.reader.config import CONFIG_FILE
    from anygrain.utils.targets import MODEL_CONFIG_FILES

    assert MODEL_FORMS is forms.MODEL_FORMS
    assert MODEL_CONFIG == forms.PHRASE_CONFIG and CONFIG_FILE == forms.READER_CONFIG
    assert (PACKED_PHRASE_CONFIG, PACKED_READER_CONFIG) == (
        forms.PACKED_PHRASE_CONFIG,
        forms.PACKED_READER_CONFIG,
    )
    assert set(MODEL_CONFIG_FILES) == {f.config_file for f in forms.MODEL_FORMS.values()}
    names = set(MODEL_CONFIG_FILES)
    spelled = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "forms.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if any(f'"{name}"' in line for name in names)
    ]
    assert spelled == [], spelled
