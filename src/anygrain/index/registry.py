"""The index kinds and the registry of their classes.

``IndexKind`` names each kind; :data:`KIND_MODULES` says where each one lives: the module
that defines its class and registers it.  The Index base (:mod:`anygrain.index.base`)
knows kinds by name only.  The first time a kind is built or loaded,
:func:`registered_class` imports that kind's module from the table, and the module's
``@register_index(IndexKind.X)`` puts the class in the registry.  A new kind adds a member
to ``IndexKind`` and a line in the table; nothing else in the base changes.
"""

from __future__ import annotations

import enum
import importlib
from typing import TYPE_CHECKING

from anygrain.errors import AnygrainError, parse_enum

if TYPE_CHECKING:  # for annotations only: the kinds' classes register themselves here
    from anygrain.index.base import Index


class IndexKind(str, enum.Enum):
    BM25 = "bm25"
    DENSE = "dense"
    HYBRID = "hybrid"
    PHRASE = "phrase"
    SHARDED = "sharded"  # N indexes of one kind over row ranges of a corpus, merged exactly


# IndexKind value -> module that registers the kind's Index class on import
KIND_MODULES: dict[str, str] = {
    "bm25": "anygrain.sparse.bm25",
    "dense": "anygrain.dense.index",
    "hybrid": "anygrain.composite.hybrid",
    "phrase": "anygrain.phrase.index",
    "sharded": "anygrain.composite.sharded",
}


#: the kinds whose build encodes a corpus, which an executor (Ray) can spread over workers
ENCODING_KINDS = (IndexKind.DENSE, IndexKind.HYBRID, IndexKind.PHRASE)


_REGISTRY: dict[IndexKind, type[Index]] = {}


def register_index(kind: IndexKind):  # type: ignore[no-untyped-def]
    """Class decorator: make ``Index.load`` and ``Index.build`` dispatch to this class."""

    def deco(cls: type[Index]) -> type[Index]:
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls

    return deco


def registered_class(kind: IndexKind) -> type[Index] | None:
    """The class registered for ``kind``, importing the kind's module (named in
    :data:`KIND_MODULES`) on first use; None when it registers none."""
    if kind not in _REGISTRY:
        module = KIND_MODULES.get(kind.value)
        if module is not None:
            importlib.import_module(module)  # registers itself with @register_index
    return _REGISTRY.get(kind)


def index_class(kind: IndexKind | str) -> type[Index]:
    """The class of index ``kind``, for its per-kind defaults before any index is open."""
    k = parse_enum(IndexKind, kind)
    cls = registered_class(k)
    if cls is None:
        raise AnygrainError(f"index kind '{k.value}' is not available")
    return cls
