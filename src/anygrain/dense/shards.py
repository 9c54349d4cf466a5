"""Passage vectors on disk: a corpus encoded into fixed-size ``.npy`` shards.

Layout of a vectors directory::

    shards.json          dim, dtype, n, shard ranges, model fingerprint, corpus checksum
    vectors-00000.npy    rows [0, shard_size) of the corpus, float32 or float16
    vectors-00001.npy    ...

Encoding a large corpus takes hours, so it runs on the resumable shard engine
(:mod:`anygrain.encode.engine`): each shard is renamed into place only once complete,
and ``shards.json`` records the size of every finished shard.  Rerunning
:func:`encode_corpus` after an interrupt skips finished shards and ends with the same
vectors, because a shard is always encoded as one unit (the same texts in the same
length buckets).  A directory started by another model or corpus is never resumed:
mixing vectors from two encoders would silently corrupt the index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.dense.onnx import OnnxBiEncoder
from anygrain.encode.engine import EncodeSpec, OnMismatch, ShardedEncode
from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.encode.jobs import ShardJob
from anygrain.encode.manifest import ShardListManifest
from anygrain.errors import AnygrainError
from anygrain.utils.device import place, resolve_device

if TYPE_CHECKING:
    from anygrain.models.biencoder import BiEncoder

    #: what encodes passages: the torch model or its graphs on ONNX Runtime (the same vectors)
    PassageModel = BiEncoder | OnnxBiEncoder

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


def _encoder_settings(model: PassageModel) -> dict[str, Any]:
    return model.config.passage.to_dict()


def _expected(
    store: CorpusStore, model: PassageModel, shard_size: int, dtype: str, bf16: bool
) -> dict[str, Any]:
    """The manifest fields that must match for shards to belong to this corpus and model."""
    if dtype not in DTYPES:
        raise AnygrainError(f"vector dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
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


def _spec(expect: dict[str, Any]) -> EncodeSpec:
    # the bar is the encoder's, within each shard: an encode is a few large shards
    return EncodeSpec(
        identity=expect,
        shard_size=int(expect["shard_size"]),
        layout=ShardListManifest(SHARDS_MANIFEST),
        on_mismatch=OnMismatch.REFUSE,
        what="vectors",
        progress=False,
    )


@dataclass
class _PassageShards:
    """Shard encoder: the passages of a shard's rows, through the passage encoder."""

    store: CorpusStore
    model: PassageModel
    dtype: str
    batch_size: int
    progress: bool
    bf16: bool
    label: str
    device: str | None = None  # None: auto (in a Ray actor, the GPU it reserved)

    def files(self, job: ShardJob) -> tuple[str, ...]:
        return (shard_name(job.index),)

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        if not isinstance(self.model, OnnxBiEncoder):  # a graph runs on the CPU
            place(self.model, self.device)
        rows = np.arange(job.start, job.end)
        vecs = self.model.passage.encode(
            self.store.texts(rows),
            self.store.titles(rows),
            batch_size=self.batch_size,
            progress=self.progress,
            bf16=self.bf16,
            desc=f"encoding passages{' with ' + self.label if self.label else ''} "
            f"(shard {job.index + 1}/{job.n_shards})",
        )
        np.save(into / shard_name(job.index), vecs.astype(self.dtype, copy=False))
        return {}


@dataclass
class _GivenShards:
    """Shard encoder: rows of vectors already computed."""

    vectors: np.ndarray
    dtype: str

    def files(self, job: ShardJob) -> tuple[str, ...]:
        return (shard_name(job.index),)

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        np.save(into / shard_name(job.index), self.vectors[job.start : job.end].astype(self.dtype))
        return {}


def save_vectors(
    vectors: np.ndarray,
    store: CorpusStore,
    model: PassageModel,
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
    if (out / SHARDS_MANIFEST).exists():
        raise AnygrainError(f"{out}: already holds vectors; pick an empty directory")
    ShardedEncode(out, len(store), _GivenShards(vectors, dtype), _spec(expect)).run()
    return ShardSet.open(out)


def encode_corpus(
    store: CorpusStore,
    model: PassageModel,
    out_dir: str | Path,
    *,
    shard_size: int = 50_000,
    dtype: str = "float32",
    batch_size: int = 64,
    progress: bool = True,
    bf16: bool = False,
    on_shard: Callable[[int, int], None] | None = None,
    label: str = "",
    executor: Executor | ExecutorKind | str | None = None,
    device: str | None = None,
) -> ShardSet:
    """Encode every passage of ``store`` into shards under ``out_dir``; resumes an interrupted run.

    ``label`` names the model in the progress bar, so a long encoding says what it encodes with.

    ``on_shard(i, n_shards)`` is called after shard ``i`` is safely on disk (progress
    reporting, or tests simulating an interrupt).  ``executor`` runs the shards (default:
    in this process).  Raises :class:`IndexMismatchError` when ``out_dir`` holds shards
    from another model, corpus or setting.
    """
    expect = _expected(store, model, shard_size, dtype, bf16)
    resolve_device(device)  # a missing GPU is refused before any work
    encoder = _PassageShards(store, model, dtype, batch_size, progress, bf16, label, device)
    engine = ShardedEncode(out_dir, len(store), encoder, _spec(expect), executor=executor)
    engine.run(on_shard)
    return ShardSet.open(out_dir)
