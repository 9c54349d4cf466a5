"""Encoding a corpus to disk in resumable shards: one engine, pluggable executors.

:mod:`.engine` runs the loop (plan, resume, atomic shards, manifest, progress), a
per-kind :class:`~anygrain.encode.engine.ShardEncoder` writes one shard's files,
:mod:`.manifest` holds the on-disk manifest layouts and :mod:`.executor` decides
where shards are encoded.  Dense vectors (:mod:`anygrain.dense.shards`), phrase dumps
(:mod:`anygrain.phrase.dump`) and the training passage cache
(:mod:`anygrain.train.dpr.passage_cache`) are built on it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anygrain.encode.engine import (
        EncodeResult,
        EncodeSpec,
        OnMismatch,
        ShardedEncode,
        ShardEncoder,
    )
    from anygrain.encode.executor import Executor, ExecutorKind, LocalExecutor, make_executor
    from anygrain.encode.jobs import ShardJob, ShardRecord, plan_shards
    from anygrain.encode.manifest import DoneMapManifest, ManifestLayout, ShardListManifest

# each name's module, imported on first use (PEP 562): a module of this package imported for
# itself (the runtime's names, which ``anygrain --help`` offers) does not load the engine
_HOMES = {
    **dict.fromkeys(
        ("EncodeResult", "EncodeSpec", "OnMismatch", "ShardedEncode", "ShardEncoder"), "engine"
    ),
    **dict.fromkeys(("Executor", "ExecutorKind", "LocalExecutor", "make_executor"), "executor"),
    **dict.fromkeys(("ShardJob", "ShardRecord", "plan_shards"), "jobs"),
    **dict.fromkeys(("DoneMapManifest", "ManifestLayout", "ShardListManifest"), "manifest"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "DoneMapManifest",
    "EncodeResult",
    "EncodeSpec",
    "Executor",
    "ExecutorKind",
    "LocalExecutor",
    "ManifestLayout",
    "OnMismatch",
    "ShardEncoder",
    "ShardJob",
    "ShardListManifest",
    "ShardRecord",
    "ShardedEncode",
    "make_executor",
    "plan_shards",
]
