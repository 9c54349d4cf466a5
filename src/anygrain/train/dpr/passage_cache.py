"""Passage vectors of the training corpus, encoded once for query-side training.

The frozen passage encoder never changes during query-side training, so its
vectors are computed once into ``OUT/cache/passages-KEY.npy`` and reused by every
epoch and every rerun.  The key covers the passages, the passage encoder's weights
and how texts are encoded, so a stale file is never picked up.  Encoding runs on the
resumable shard engine (:mod:`anygrain.encode.engine`), block by block into
``passages-KEY.parts/``, so an interrupted run resumes the encoding instead of starting
over; the blocks are then joined into the one file and the parts removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.encode.engine import EncodeSpec, OnMismatch, ShardedEncode
from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.encode.jobs import ShardJob
from anygrain.encode.manifest import ShardListManifest
from anygrain.encode.npy import concatenate_npy
from anygrain.models.biencoder import BiEncoder

BLOCK = 2048
FORMAT = "anygrain.passage-cache"
FORMAT_VERSION = 1


def cache_key(model: BiEncoder, pool_fingerprint: str, *, include_title: bool, bf16: bool) -> str:
    enc = model.passage.config.to_dict()
    spec = json.dumps(
        [pool_fingerprint, model.passage_fingerprint(), enc, include_title, bf16], sort_keys=True
    )
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


@dataclass
class _PassageBlocks:
    """Shard encoder: a block of (title, text) pairs through the passage encoder, float32."""

    model: BiEncoder
    titles: Sequence[str]
    texts: Sequence[str]
    include_title: bool
    batch_size: int
    bf16: bool

    def files(self, job: ShardJob) -> tuple[str, ...]:
        return (f"block-{job.index:05d}.npy",)

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        t = list(self.titles[job.start : job.end]) if self.include_title else None
        vecs = self.model.passage.encode(
            list(self.texts[job.start : job.end]), t, batch_size=self.batch_size, bf16=self.bf16
        )
        np.save(into / self.files(job)[0], np.asarray(vecs, dtype=np.float32))
        return {}


def cached_passage_vectors(
    model: BiEncoder,
    titles: Sequence[str],
    texts: Sequence[str],
    cache_dir: Path,
    key: str,
    *,
    include_title: bool = True,
    batch_size: int = 64,
    bf16: bool = False,
    progress: bool = True,
    executor: Executor | ExecutorKind | str | None = None,
) -> np.ndarray:
    """``(len(texts), dim)`` float32 vectors, memory-mapped from the cache (computed if missing)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / f"passages-{key}.npy"
    n, dim = len(texts), model.passage.dim
    if final.exists():
        arr = np.load(final, mmap_mode="r")
        if arr.shape == (n, dim):
            return arr
        final.unlink()
    parts = cache_dir / f"passages-{key}.parts"
    spec = EncodeSpec(
        identity={
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "key": key,
            "n": n,
            "dim": dim,
        },
        shard_size=BLOCK,
        layout=ShardListManifest(),
        on_mismatch=OnMismatch.RESTART,  # a cache: redo rather than refuse
        what="cached passage vectors",
        desc="caching passage vectors",
        progress=progress,
    )
    encoder = _PassageBlocks(model, titles, texts, include_title, batch_size, bf16)
    result = ShardedEncode(parts, n, encoder, spec, executor=executor).run()
    blocks = [parts / f for f in result.files()]
    concatenate_npy(blocks, final, dtype=np.float32, row_shape=(dim,))
    shutil.rmtree(parts)
    return np.load(final, mmap_mode="r")
