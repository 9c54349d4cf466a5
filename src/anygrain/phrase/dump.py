"""Dumping phrase vectors: every passage encoded once, filtered tokens kept as float16.

Encoding a corpus takes hours, so it runs on the resumable shard engine
(:mod:`anygrain.encode.engine`) in shards of passages that are written atomically
and recorded in ``dump.json`` as they finish; a rerun skips finished shards and,
because a shard is always encoded as one unit, ends with the same arrays as an
uninterrupted run.  A dump started by another model, corpus, threshold or precision
(bf16, int8) is never resumed (it is started again): mixing vectors from two encoders would
silently corrupt the index.

Once all shards exist they are concatenated into the final memory-mappable arrays:

    start.npy        (N, d) float16   start vector of each kept token
    end.npy          (N, d) float16   end vector of each kept token
    tokens.npy       (N, 6) int32     passage row, char start, char end, flags, first word, last word
    filter.npy       (N, 2) float16   start / end filter logits
    passage_ptr.npy  (P+1,) int64     tokens of passage row r are [ptr[r], ptr[r+1])

``flags`` bit 0: the token may start a phrase (a word start whose start logit passes
tau); bit 1: it may end one (a word end whose end logit passes tau).  A token is kept
when either bit is set.  Tokens are in passage order, then text order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.encode.engine import EncodeSpec, OnMismatch, ShardedEncode
from anygrain.encode.executor import Executor, ExecutorKind, is_remote
from anygrain.encode.jobs import ShardJob
from anygrain.encode.manifest import DoneMapManifest
from anygrain.encode.npy import concatenate_npy
from anygrain.encode.runtime import runs_on_onnx
from anygrain.utils.atomic import atomic_path
from anygrain.utils.device import place, resolve_device
from anygrain.utils.memory import trim_heap

if TYPE_CHECKING:
    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.encode.runtime import Runtime
    from anygrain.index.settings import BuildOptions
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.passages import EncodedPassage, PassageEncoding

DUMP_MANIFEST = "dump.json"
FORMAT = "anygrain.phrase-dump"
FORMAT_VERSION = 1
START_OK, END_OK = 1, 2
ARRAYS = ("start", "end", "tokens", "filter", "counts")


@dataclass
class DumpStats:
    n_passages: int
    n_tokens_seen: int  # passage tokens the encoder produced
    n_kept: int  # tokens stored (start- or end-capable)
    n_start: int
    n_end: int
    shards_done_before: int  # finished shards found from an earlier run


def keep_flags(p: EncodedPassage, threshold: float | None) -> np.ndarray:
    """Per-token flags (START_OK | END_OK) after the word-boundary rule and the filter."""
    s_ok = p.start_ok.copy()
    e_ok = p.end_ok.copy()
    if threshold is not None:
        s_ok &= p.filter_logits[:, 0] >= threshold
        e_ok &= p.filter_logits[:, 1] >= threshold
    return s_ok.astype(np.int32) * START_OK + e_ok.astype(np.int32) * END_OK


def kept_tokens(
    p: EncodedPassage, row: int, threshold: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(keep, start, end, tokens)`` of passage ``row``'s tokens that pass
    (:func:`keep_flags`): which tokens, and as a dump stores them (module docstring):
    their start and end vectors (float16) and ``tokens`` rows (int32)."""
    flags = keep_flags(p, threshold)
    keep = flags > 0
    tokens = np.stack(
        [
            np.full(int(keep.sum()), row, dtype=np.int64),
            p.cs[keep],
            p.ce[keep],
            flags[keep],
            p.wfirst[keep],
            p.wlast[keep],
        ],
        axis=1,
    ).astype(np.int32)
    return keep, p.start[keep].astype(np.float16), p.end[keep].astype(np.float16), tokens


def _shard_file(i: int, name: str) -> str:
    return f"shard-{i:05d}.{name}.npy"


def encode_shard(
    store: CorpusStore,
    model: PassageEncoding,
    rows: range,
    threshold: float | None,
    *,
    batch_size: int,
    bf16: bool,
    progress: bool = False,
    desc: str = "dumping phrases",
) -> dict[str, np.ndarray]:
    """Encode passages ``rows`` with ``model`` (the phrase model, or its passage graph on
    ONNX Runtime) and keep the tokens that pass; arrays as in the module docstring.
    ``progress``: a bar (``desc``) over the shard's passages, with an ETA."""
    idx = np.arange(rows.start, rows.stop)
    texts = store.texts(idx)
    titles = store.titles(idx)
    enc = model.encode_passages(
        texts, titles, batch_size=batch_size, bf16=bf16, progress=progress, desc=desc
    )
    d = model.dim
    starts, ends, toks, filts, counts = [], [], [], [], []
    seen = 0
    for r, p in zip(idx, enc, strict=True):
        keep, start, end, tokens = kept_tokens(p, int(r), threshold)
        seen += len(p)
        counts.append(len(tokens))
        starts.append(start)
        ends.append(end)
        filts.append(p.filter_logits[keep].astype(np.float16))
        toks.append(tokens)
    return {
        "start": np.concatenate(starts) if starts else np.zeros((0, d), np.float16),
        "end": np.concatenate(ends) if ends else np.zeros((0, d), np.float16),
        "tokens": np.concatenate(toks) if toks else np.zeros((0, 6), np.int32),
        "filter": np.concatenate(filts) if filts else np.zeros((0, 2), np.float16),
        "counts": np.asarray(counts, dtype=np.int64),
        "seen": np.asarray([seen], dtype=np.int64),
    }


def _identity(
    store: CorpusStore,
    model: PhraseEncoder,
    threshold: float | None,
    shard_size: int,
    bf16: bool,
    int8: bool = False,
) -> dict[str, Any]:
    # int8 is named only when on, so a float32 dump begun before it existed still resumes
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_fingerprint": model.config.phrase_fingerprint or model.phrase_fingerprint(),
        "corpus_checksum": store.checksum,
        "n_passages": len(store),
        "threshold": threshold,
        "shard_size": shard_size,
        "dim": model.dim,
        # bfloat16 and float32 vectors differ in the third digit: never one dump of both
        "bf16": bf16,
        **({"int8": True} if int8 else {}),
    }


@dataclass
class _PhraseShards:
    """Shard encoder: the kept tokens of a shard's passages, one file per array.
    ``encoder``: what encodes them, the model (torch) or its passage graph (ONNX Runtime)."""

    store: CorpusStore
    encoder: PassageEncoding
    threshold: float | None
    batch_size: int
    bf16: bool
    device: str | None = None  # None: auto (in a Ray actor, the GPU it reserved)
    progress: bool = False  # a bar over each shard's passages

    def files(self, job: ShardJob) -> tuple[str, ...]:
        return tuple(_shard_file(job.index, a) for a in ARRAYS)

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        on_torch = not runs_on_onnx(self.encoder)
        if on_torch:
            place(self.encoder, self.device)  # type: ignore[arg-type]
        arrays = encode_shard(
            self.store,
            self.encoder,
            job.rows,
            self.threshold,
            batch_size=self.batch_size,
            bf16=self.bf16,
            progress=self.progress,
            desc=f"dumping phrases (shard {job.index + 1}/{job.n_shards})",
        )
        for a in ARRAYS:
            np.save(into / _shard_file(job.index, a), arrays[a])
        out = {"kept": len(arrays["tokens"]), "seen": int(arrays["seen"][0])}
        del arrays
        trim_heap()  # the shard's vectors are on disk: their memory back to the system
        # and the pages of the token table the shard's text touched: the kernel maps 64 KB
        # or more around each row read, so a Chinese corpus spread over a large vocabulary
        # would make most of the table resident
        if on_torch:
            from anygrain.models.base import release_weight_pages  # torch: on torch only

            release_weight_pages(self.encoder)  # type: ignore[arg-type]
        else:
            self.encoder.release()  # type: ignore[attr-defined]
        return out


def dump_encoding(
    model: PhraseEncoder, bf16: bool, options: BuildOptions, int8: bool = False
) -> dict[str, str]:
    """How a build's passages are encoded (``index.json``'s ``timings.encoding``, which the
    build's summary line prints): ``precision`` (int8, bf16 or float32, ``int8`` and
    ``bf16`` as the build resolved them), ``runtime`` (onnx or torch, as
    :func:`passage_encoder` picks it) and ``device`` (cpu, cuda, or ray for Ray actors)."""
    from anygrain.encode.onnx_runtime import parse_runtime
    from anygrain.encode.runtime import Runtime

    precision = "int8" if int8 else "bf16" if bf16 else "float32"
    if int8 or runs_on_onnx(model) or parse_runtime(options.runtime) is Runtime.ONNX:
        return {"precision": precision, "runtime": "onnx", "device": "cpu"}
    executor = options.executor
    on_ray = is_remote(executor)
    device = "ray" if on_ray else resolve_device(options.device).type
    return {"precision": precision, "runtime": "torch", "device": device}


def passage_encoder(
    model: PhraseEncoder,
    runtime: Runtime | str | None = None,
    *,
    device: str | None = None,
    bf16: bool = False,
    executor: Executor | ExecutorKind | str | None = None,
    cache: GraphCache | None = None,
    int8: bool = False,
) -> PassageEncoding:
    """What encodes a dump's passages on ``runtime``: ``onnx``, the model's passage graph on
    ONNX Runtime (exported once per version of the passage-side weights; an error when it
    cannot); ``torch`` and ``auto`` (None), the model itself.  ``auto`` is torch because
    passages are where torch is faster: a dump's windows take more CPU time on ONNX Runtime
    float32 than on torch float32, and much less on torch bfloat16 (bench/passage_runtime.py,
    docs/benchmarks.md; short questions are the other way round).  The graph computes in float32 on this machine's CPU, so ``onnx``
    refuses a ``bf16`` dump (recorded in the index), a GPU ``device`` and an encode on Ray
    actors.  Both runtimes give the same vectors (to ~1e-5): the runtime is recorded
    nowhere.  ``int8`` (recorded: :func:`resolve_int8` decides it) runs the graph's int8
    sibling (:func:`~anygrain.encode.quantize.quantize_entry`) on ONNX Runtime whatever
    ``runtime`` says; :func:`resolve_int8` has refused what it cannot run on."""
    from anygrain.encode.onnx_runtime import GraphCache, parse_runtime, wants_onnx
    from anygrain.encode.runtime import Runtime
    from anygrain.errors import AnygrainError

    if parse_runtime(runtime) is not Runtime.ONNX and not int8:
        return model
    if bf16:
        raise AnygrainError("--runtime onnx encodes passages in float32; bf16 needs torch")
    if is_remote(executor):
        raise AnygrainError("--runtime onnx encodes in this process; --ray runs torch actors")
    wants_onnx(Runtime.ONNX, device)  # refused on a GPU or without onnxruntime
    from anygrain.phrase.onnx import onnx_passages

    cache = cache or GraphCache.default()
    try:
        passages = onnx_passages(model, cache)
    except (AnygrainError, ImportError, OSError, RuntimeError, ValueError) as e:
        raise AnygrainError(
            f"{model.config.base_model}: cannot encode passages on ONNX Runtime "
            f"({type(e).__name__}: {e}); build with --runtime torch"
        ) from e
    if not int8:
        return passages
    from anygrain.encode.quantize import quantize_entry
    from anygrain.phrase.onnx import OnnxPassageEncoder

    try:
        return OnnxPassageEncoder(quantize_entry(cache, passages.directory))
    except AnygrainError as e:  # one line naming the graph file, and the way around it
        raise AnygrainError(f"{e}; build with --no-int8") from None


def resolve_int8(int8: bool | None, bf16: bool, options: BuildOptions) -> bool:
    """Whether a build (or an add) with ``options`` encodes its passages on the passage
    graph's int8 sibling (:func:`passage_encoder`), ``bf16`` being the precision it
    resolved: ``int8`` when given -- True refused in one line with bf16, ``--runtime
    torch``, Ray actors or a GPU device --, else (auto) where the build runs here on the
    CPU, in float32 otherwise (no bf16, the runtime not torch), with onnxruntime, on a CPU
    with int8 dot-product instructions, when :func:`~anygrain.utils.precision.auto_int8`:
    there int8 encodes much faster at about the float32 index's quality."""
    from anygrain.encode.runtime import Runtime, on_cpu, onnxruntime_installed, parse_runtime
    from anygrain.errors import AnygrainError

    torch_asked = parse_runtime(options.runtime) is Runtime.TORCH
    remote = is_remote(options.executor)
    if int8:
        refused = (
            (bf16, "--int8 and --bf16 are two precisions of the passages: give one"),
            (torch_asked, "--int8 runs the passages' int8 graph on ONNX Runtime, not torch"),
            (remote, "--int8 encodes in this process on ONNX Runtime; --ray runs torch actors"),
            (
                not on_cpu(options.device),
                f"--int8 runs on the CPU; --device {options.device} needs --no-int8",
            ),
            (
                not onnxruntime_installed(),
                "--int8: onnxruntime is not installed (pip install onnxruntime)",
            ),
        )
        for bad, why in refused:
            if bad:
                raise AnygrainError(why)
        return True
    if int8 is False or bf16 or torch_asked or remote or not onnxruntime_installed():
        return False
    if resolve_device(options.device).type != "cpu":
        return False
    from anygrain.utils.precision import auto_int8

    return auto_int8()


#: passages per dump shard: a shard's vectors are held in memory until written, so this bounds
#: a build's (and an add's) peak, at the same speed as larger shards (docs/benchmarks.md)
DEFAULT_SHARD_SIZE = 500


def dump_phrases(
    store: CorpusStore,
    model: PhraseEncoder,
    work: Path,
    out: Path,
    *,
    threshold: float | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = 32,
    bf16: bool = False,
    progress: bool = True,
    on_shard: Callable[[int], None] | None = None,
    executor: Executor | ExecutorKind | str | None = None,
    device: str | None = None,
    runtime: Runtime | str | None = None,
    int8: bool = False,
) -> DumpStats:
    """Encode ``store`` into shards under ``work`` (resumable), then write the final arrays
    into ``out``.  ``on_shard(i)`` is called after shard ``i`` is saved (tests interrupt here);
    ``executor`` runs the shards (default: in this process); ``device`` is where the model
    encodes (None: auto); ``runtime`` what encodes (:func:`passage_encoder`: ``auto``,
    ``onnx`` or ``torch``; not recorded, and a resumed dump may take up on another);
    ``int8``: on the passage graph's int8 sibling (recorded, as ``bf16``)."""
    work, out = Path(work), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = EncodeSpec(
        identity=_identity(store, model, threshold, shard_size, bf16, int8),
        shard_size=shard_size,
        layout=DoneMapManifest(DUMP_MANIFEST),
        on_mismatch=OnMismatch.RESTART,  # the work directory is ours: start it again
        what="phrase shards",
        desc="dumping phrases",
        # one bar for the whole dump, by passages with an ETA (resumed shards counted from
        # the start), advanced as each shard is saved: not a bar per shard
        progress=progress,
    )
    resolve_device(device)  # a missing GPU is refused before any work
    trim_heap()  # what loading the model freed (a packed model's unpacking) back first
    from anygrain.utils.precision import cap_onednn_cache

    cap_onednn_cache()  # before the first encode: oneDNN reads it once
    passages = passage_encoder(
        model, runtime, device=device, bf16=bf16, executor=executor, int8=int8
    )
    encoder = _PhraseShards(store, passages, threshold, batch_size, bf16, device, False)
    result = ShardedEncode(work, len(store), encoder, spec, executor=executor).run(
        None if on_shard is None else lambda i, _n: on_shard(i)
    )
    seen = sum(int(r.info["seen"]) for r in result.records)
    return _merge(work, out, len(result.records), model.dim, len(store), seen, result.resumed)


def _merge(
    work: Path, out: Path, n_shards: int, dim: int, n_passages: int, seen: int, done_before: int
) -> DumpStats:
    """Concatenate shard arrays into the final files, streaming (never all in memory)."""
    total = 0
    for name, row_shape, dtype in (
        ("start", (dim,), np.float16),
        ("end", (dim,), np.float16),
        ("tokens", (6,), np.int32),
        ("filter", (2,), np.float16),
    ):
        shards = [work / _shard_file(i, name) for i in range(n_shards)]
        total = concatenate_npy(shards, out / f"{name}.npy", dtype=dtype, row_shape=row_shape)
    counts = np.concatenate([np.load(work / _shard_file(i, "counts")) for i in range(n_shards)])
    if len(counts) != n_passages:
        raise RuntimeError(f"dump covers {len(counts)} passages, corpus has {n_passages}")
    ptr = np.zeros(n_passages + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    with atomic_path(out / "passage_ptr.npy") as tmp, open(tmp, "wb") as f:
        np.save(f, ptr)  # a file object: np.save adds no ``.npy`` to the temporary name
    flags = np.load(out / "tokens.npy", mmap_mode="r")[:, 3]
    return DumpStats(
        n_passages=n_passages,
        n_tokens_seen=seen,
        n_kept=total,
        n_start=int(np.count_nonzero(flags & START_OK)),
        n_end=int(np.count_nonzero(flags & END_OK)),
        shards_done_before=done_before,
    )
