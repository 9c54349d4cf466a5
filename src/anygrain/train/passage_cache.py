"""Passage vectors of the training corpus, encoded once for query-side training.

The frozen passage encoder never changes during query-side training, so its
vectors are computed once into ``OUT/cache/passages-KEY.npy`` and reused by every
epoch and every rerun.  The key covers the passages, the passage encoder's weights
and how texts are encoded, so a stale file is never picked up.  Encoding goes
block by block into a memory-mapped ``.partial.npy`` with a progress marker, so
an interrupted run resumes the encoding instead of starting over.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from anygrain.models.biencoder import BiEncoder
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.progress import progress_bar

BLOCK = 2048


def cache_key(model: BiEncoder, pool_fingerprint: str, *, include_title: bool, bf16: bool) -> str:
    enc = model.passage.config.to_dict()
    spec = json.dumps(
        [pool_fingerprint, model.passage_fingerprint(), enc, include_title, bf16], sort_keys=True
    )
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


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
    partial = cache_dir / f"passages-{key}.partial.npy"
    marker = cache_dir / f"passages-{key}.progress.json"
    done = 0
    if partial.exists() and marker.exists():
        done = int(json.loads(marker.read_text()).get("done", 0))
        mm = np.lib.format.open_memmap(partial, mode="r+")
        if mm.shape != (n, dim):
            done, mm = (
                0,
                np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(n, dim)),
            )
    else:
        mm = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(n, dim))
    bar = progress_bar(
        range(done, n, BLOCK),
        desc="caching passage vectors",
        unit="block",
        disable=not progress,
        total=len(range(done, n, BLOCK)),
    )
    for start in bar:
        end = min(start + BLOCK, n)
        t = list(titles[start:end]) if include_title else None
        mm[start:end] = model.passage.encode(
            list(texts[start:end]), t, batch_size=batch_size, bf16=bf16
        )
        mm.flush()
        atomic_write_text(marker, json.dumps({"done": end}))
    del mm
    os.replace(partial, final)
    marker.unlink(missing_ok=True)
    return np.load(final, mmap_mode="r")
