"""Passage vectors on disk: a corpus encoded into fixed-size ``.npy`` shards.

Layout of a vectors directory::

    shards.json          dim, dtype, n, shard ranges, model fingerprint, corpus checksum
    vectors-00000.npy    rows [0, shard_size) of the corpus, float32 or float16
    vectors-00001.npy    ...

Encoding a large corpus takes hours, so it is resumable: each shard is written
under a temporary name and renamed only once complete, and ``shards.json``
records the size of every finished shard.  Rerunning :func:`encode_corpus` after
an interrupt skips finished shards and ends with the same vectors, because a
shard is always encoded as one unit (the same texts in the same length buckets).
A directory started by another model or corpus is never resumed: mixing vectors
from two encoders would silently corrupt the index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.utils.atomic import atomic_write_text, remove_stale_files

if TYPE_CHECKING:
    from anygrain.models.biencoder import BiEncoder

SHARDS_MANIFEST = "shards.json"
FORMAT = "anygrain.vectors"
FORMAT_VERSION = 1
DTYPES = ("float32", "float16")


def shard_name(i: int) -> str:
    return f"vectors-{i:05d}.npy"


@dataclass
class Shard:
    """One shard: rows ``[start, end)`` of the corpus; ``nbytes`` is set once it is complete."""

    file: str
    start: int
    end: int
    nbytes: int | None = None

    @property
    def n(self) -> int:
        return self.end - self.start


def _plan(n: int, shard_size: int) -> list[Shard]:
    return [
        Shard(shard_name(i), s, min(s + shard_size, n))
        for i, s in enumerate(range(0, n, shard_size))
    ]


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    atomic_write_text(path / SHARDS_MANIFEST, json.dumps(manifest, indent=2))


def _save_npy_atomic(path: Path, arr: np.ndarray) -> int:
    """Write ``arr`` to ``path`` via a temporary name, so a crash never leaves half a shard."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:  # a file object, so np.save adds no ``.npy`` suffix
            np.save(f, arr)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path.stat().st_size


class ShardSet:
    """A complete set of vector shards, memory-mapped: nothing is read until it is used."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self.shards = [Shard(**s) for s in manifest["shards"]]
        self._arrays: list[np.ndarray | None] = [None] * len(self.shards)

    @classmethod
    def open(cls, path: str | Path) -> ShardSet:
        path = Path(path)
        f = path / SHARDS_MANIFEST
        if not f.exists():
            raise AnygrainError(f"{path}: not a vectors directory (no {SHARDS_MANIFEST})")
        m = json.loads(f.read_text(encoding="utf-8"))
        if m.get("format") != FORMAT or m.get("format_version") != FORMAT_VERSION:
            raise AnygrainError(
                f"{f}: not an anygrain vectors manifest of version {FORMAT_VERSION}"
            )
        if not m.get("complete"):
            done = sum(1 for s in m["shards"] if s.get("nbytes") is not None)
            raise AnygrainError(
                f"{path}: encoding stopped after {done} of {len(m['shards'])} shards; "
                "rerun the build (or encode_corpus) to resume it"
            )
        return cls(path, m)

    # --- metadata ---------------------------------------------------------------
    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.manifest["dtype"])

    @property
    def model_fingerprint(self) -> str:
        return str(self.manifest["model_fingerprint"])

    @property
    def corpus_checksum(self) -> str:
        return str(self.manifest["corpus_checksum"])

    def __len__(self) -> int:
        return int(self.manifest["n"])

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes or 0 for s in self.shards)

    # --- access -----------------------------------------------------------------
    def shard(self, i: int) -> np.ndarray:
        """Shard ``i`` as a read-only memory map, in its stored dtype."""
        a = self._arrays[i]
        if a is None:
            a = np.load(self.path / self.shards[i].file, mmap_mode="r")
            s = self.shards[i]
            if a.shape != (s.n, self.dim):
                raise AnygrainError(
                    f"{self.path / s.file}: shape {a.shape}, expected {(s.n, self.dim)}"
                )
            self._arrays[i] = a
        return a

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, memory-mapped shard)`` in row order."""
        for i, s in enumerate(self.shards):
            yield s.start, self.shard(i)

    def iter_batches(self, batch_size: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, float32 array)`` chunks: bounded memory for adding to FAISS."""
        for start, arr in self:
            for j in range(0, len(arr), batch_size):
                yield start + j, np.ascontiguousarray(arr[j : j + batch_size], dtype=np.float32)

    def rows(self, rows: np.ndarray | list[int]) -> np.ndarray:
        """float32 vectors of arbitrary rows (any order), read from the maps without loading shards."""
        r = np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(r), self.dim), dtype=np.float32)
        if r.size and (r.min() < 0 or r.max() >= len(self)):
            raise IndexError(f"vector rows out of range (0..{len(self) - 1})")
        starts = np.array([s.start for s in self.shards], dtype=np.int64)
        which = np.searchsorted(starts, r, side="right") - 1
        for i in np.unique(which):
            sel = np.nonzero(which == i)[0]
            out[sel] = self.shard(int(i))[r[sel] - starts[i]]
        return out

    def concatenate(self, dtype: Any = np.float32) -> np.ndarray:
        """All vectors in one in-memory array (only for corpora that fit in RAM)."""
        if not self.shards:
            return np.zeros((0, self.dim), dtype=dtype)
        return np.concatenate([np.asarray(a, dtype=dtype) for _, a in self])

    def sample(self, n: int, *, seed: int = 0) -> np.ndarray:
        """``n`` distinct random rows (sorted, so reads stay sequential), as float32."""
        total = len(self)
        if n >= total:
            return self.concatenate()
        rows = np.sort(np.random.default_rng(seed).choice(total, size=n, replace=False))
        return self.rows(rows)


def _encoder_settings(model: BiEncoder) -> dict[str, Any]:
    return model.config.passage.to_dict()


def _expected(
    store: CorpusStore, model: BiEncoder, shard_size: int, dtype: str, bf16: bool
) -> dict[str, Any]:
    """The manifest fields that must match for shards to belong to this corpus and model."""
    if dtype not in DTYPES:
        raise AnygrainError(f"vector dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if shard_size <= 0:
        raise AnygrainError(f"shard_size must be positive, not {shard_size}")
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dim": model.dim,
        "dtype": dtype,
        "n": len(store),
        "shard_size": shard_size,
        "model_fingerprint": model.passage_fingerprint(),
        "encoder": _encoder_settings(model),
        "bf16": bf16,  # bf16 vectors differ slightly: never mix them with float32 ones
        "corpus_checksum": store.checksum,
    }


def save_vectors(
    vectors: np.ndarray,
    store: CorpusStore,
    model: BiEncoder,
    out_dir: str | Path,
    *,
    shard_size: int = 50_000,
    dtype: str = "float32",
    bf16: bool = False,
) -> ShardSet:
    """Write vectors already encoded by ``model`` (row ``i`` = passage ``i``) as a complete
    shard set, laid out as :func:`encode_corpus` would, which then finds nothing left to do."""
    expect = _expected(store, model, shard_size, dtype, bf16)
    if vectors.shape != (len(store), model.dim):
        raise AnygrainError(
            f"vectors have shape {vectors.shape}, expected {(len(store), model.dim)}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / SHARDS_MANIFEST).exists():
        raise AnygrainError(f"{out}: already holds vectors; pick an empty directory")
    shards = _plan(len(store), shard_size)
    for s in shards:
        s.nbytes = _save_npy_atomic(out / s.file, vectors[s.start : s.end].astype(dtype))
    _write_manifest(out, {**expect, "complete": True, "shards": [asdict(s) for s in shards]})
    return ShardSet.open(out)


def encode_corpus(
    store: CorpusStore,
    model: BiEncoder,
    out_dir: str | Path,
    *,
    shard_size: int = 50_000,
    dtype: str = "float32",
    batch_size: int = 64,
    progress: bool = True,
    bf16: bool = False,
    on_shard: Callable[[int, int], None] | None = None,
    label: str = "",
) -> ShardSet:
    """Encode every passage of ``store`` into shards under ``out_dir``; resumes an interrupted run.

    ``label`` names the model in the progress bar, so a long encoding says what it encodes with.

    ``on_shard(i, n_shards)`` is called after shard ``i`` is safely on disk (progress
    reporting, or tests simulating an interrupt).  Raises :class:`IndexMismatchError`
    when ``out_dir`` holds shards from another model, corpus or setting.
    """
    expect = _expected(store, model, shard_size, dtype, bf16)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_files(out)  # half-written shards of a killed run
    mf = out / SHARDS_MANIFEST
    if mf.exists():
        manifest = json.loads(mf.read_text(encoding="utf-8"))
        diff = [k for k, v in expect.items() if manifest.get(k) != v]
        if diff:
            details = ", ".join(f"{k}: {manifest.get(k)!r} there, {expect[k]!r} now" for k in diff)
            raise IndexMismatchError(
                f"{out}: holds vectors from a different run ({details}); refusing to mix them. "
                "Delete the directory or pick another one to start afresh."
            )
        shards = [Shard(**s) for s in manifest["shards"]]
    else:
        shards = _plan(len(store), shard_size)
        manifest = {**expect, "complete": False, "shards": [asdict(s) for s in shards]}
        _write_manifest(out, manifest)

    for i, s in enumerate(shards):
        f = out / s.file
        if s.nbytes is not None and f.exists() and f.stat().st_size == s.nbytes:
            continue  # finished in an earlier run
        rows = np.arange(s.start, s.end)
        vecs = model.passage.encode(
            store.texts(rows),
            store.titles(rows),
            batch_size=batch_size,
            progress=progress,
            bf16=bf16,
            desc=f"encoding passages{' with ' + label if label else ''} "
            f"(shard {i + 1}/{len(shards)})",
        )
        s.nbytes = _save_npy_atomic(f, vecs.astype(dtype, copy=False))
        manifest["shards"] = [asdict(x) for x in shards]
        _write_manifest(out, manifest)
        if on_shard is not None:
            on_shard(i, len(shards))
    if not manifest.get("complete"):
        manifest["complete"] = True
        _write_manifest(out, manifest)
    return ShardSet.open(out)
