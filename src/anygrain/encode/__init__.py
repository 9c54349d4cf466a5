"""Encoding a corpus to disk in resumable shards: one engine, pluggable executors.

:mod:`.engine` runs the loop (plan, resume, atomic shards, manifest, progress), a
per-kind :class:`~anygrain.encode.engine.ShardEncoder` writes one shard's files,
:mod:`.manifest` holds the on-disk manifest layouts and :mod:`.executor` decides
where shards are encoded.  Dense vectors (:mod:`anygrain.dense.shards`), phrase dumps
(:mod:`anygrain.phrase.dump`) and the training passage cache
(:mod:`anygrain.train.dpr.passage_cache`) are built on it.
"""

from anygrain.encode.engine import EncodeResult, EncodeSpec, OnMismatch, ShardedEncode, ShardEncoder
from anygrain.encode.executor import Executor, ExecutorKind, LocalExecutor, make_executor
from anygrain.encode.jobs import ShardJob, ShardRecord, plan_shards
from anygrain.encode.manifest import DoneMapManifest, ManifestLayout, ShardListManifest

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
