"""Where each index kind lives: the module that defines its class and registers it.

The Index base (:mod:`anygrain.index.base`) knows kinds by name only.  The first time a
kind is built or loaded it imports that kind's module from this table, and the module's
``@register_index(IndexKind.X)`` puts the class in the registry.  A new kind adds a member
to ``IndexKind`` and a line here; nothing else in the base changes.
"""

from __future__ import annotations

# IndexKind value -> module that registers the kind's Index class on import
KIND_MODULES: dict[str, str] = {
    "bm25": "anygrain.sparse.bm25",
    "dense": "anygrain.dense.index",
    "hybrid": "anygrain.composite.hybrid",
    "phrase": "anygrain.phrase.index",
    "sharded": "anygrain.composite.sharded",
}
