"""ONNX Runtime under the query encoders: a search that imports neither torch nor transformers.

A one-shot search spends seconds importing torch and transformers and milliseconds
searching; ONNX Runtime starts in a fraction of a second and encodes a question about
twice as fast on one CPU thread.  torch stays the training runtime and the fallback.

Which runtime encodes queries (:class:`Runtime`, ``--runtime`` on search and serve):

* ``auto`` (the default): ONNX Runtime on a CPU where ``onnxruntime`` is installed and the
  encoder's graph is in the cache or can be exported (torch is then needed once);
  otherwise torch;
* ``onnx``: ONNX Runtime or an error saying why not;
* ``torch``: the model itself (the only runtime on a GPU, and for bfloat16).

The runtime is recorded nowhere in an index: both give the same vectors (to ~1e-6).

Graphs live in the user cache directory (``platformdirs.user_cache_dir("anygrain")/onnx``),
one directory per graph, named by the fingerprint of the weights and settings it computes
with (:class:`GraphCache`): a changed model has another fingerprint and is exported again,
never served by a stale graph.  Finding that fingerprint needs the weights (torch), so a
second, small table maps the *files* a model was loaded from (paths, sizes, modification
times: :func:`files_signature`) to the fingerprint they gave; a search that finds its
model's files unchanged since the export opens the graph without loading the model.

Each graph directory holds ``graph.onnx`` (opset :data:`OPSET`, dynamic batch and
sequence axes), ``tokenizer.json`` (run by the ``tokenizers`` library directly),
``meta.json`` (what the encoder needs besides: input names, truncation, padding, and
the model's settings) and the checksums of them all, written last and checked at each open
(:mod:`anygrain.encode.cache_checks`): a damaged entry is made again, never used.

This module is the engine's part and knows no model: each encoder exports its own
graph through :func:`export_encoder` (on :func:`export_graph`) and :func:`finish_export`,
and reads it back with :class:`OnnxGraph` (:func:`open_graph`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.encode.cache_checks import entry_problem, forget, report, write_checksums

# the runtime's names and probes (torch-free), re-exported for the callers that import them here
from anygrain.encode.runtime import RUNTIME_HELP as RUNTIME_HELP
from anygrain.encode.runtime import TRAIN_EXTRA as TRAIN_EXTRA
from anygrain.encode.runtime import Runtime as Runtime
from anygrain.encode.runtime import onnxruntime_installed as onnxruntime_installed
from anygrain.encode.runtime import parse_runtime as parse_runtime
from anygrain.encode.runtime import require_torch as require_torch
from anygrain.encode.runtime import torch_installed as torch_installed
from anygrain.encode.runtime import wants_onnx as wants_onnx
from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_dir, atomic_write_text

OPSET = 17
#: bumped when what an exported graph computes changes, so old graphs are not reused
# 2: the token-embedding table may stand outside the graph (TOKEN_TABLE_FILE)
EXPORT_VERSION = 2
GRAPH_FILE = "graph.onnx"
# a graph's token-embedding table, when kept outside it: float32 (vocabulary, width), read by
# memory map, so only the rows of tokens met are resident
TOKEN_TABLE_FILE = "token_embeddings.npy"
TOKEN_EMBEDS = "token_embeds"  # the graph input that takes the rows in place of input_ids
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "meta.json"
FILES_DIR = "files"
# what every graph directory holds
REQUIRED = (GRAPH_FILE, META_FILE)


def default_cache_root() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("anygrain")) / "onnx"


def digest(*parts: object) -> str:
    """A short hex digest of ``parts`` (JSON-encoded)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def files_signature(paths: Sequence[Path]) -> str:
    """Identifies the files ``paths`` (directories: every file below them) as they are now:
    path, size, modification time and inode of each.  Saving a model again changes it."""
    rows: list[tuple[str, int, int, int]] = []
    for p in paths:
        p = Path(p).resolve()
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            st = f.stat()
            rows.append((str(f), st.st_size, st.st_mtime_ns, st.st_ino))
    return digest(EXPORT_VERSION, rows)


def files_bytes(paths: Sequence[Path]) -> int:
    """The total size of the files ``paths`` (directories: every file below them)."""
    total = 0
    for p in paths:
        p = Path(p).resolve()
        files = (f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        total += sum(f.stat().st_size for f in files)
    return total


@dataclass(frozen=True)
class GraphCache:
    """Graph directories under ``root``, by key (the weights' fingerprint), and the table
    from model files to the key they gave."""

    root: Path

    @classmethod
    def default(cls, root: str | Path | None = None) -> GraphCache:
        return cls(Path(root) if root is not None else default_cache_root())

    def entry(self, key: str) -> Path:
        return self.root / key

    def has(self, key: str) -> bool:
        """Whether the graph ``key`` is cached, every file as it was made; a damaged one
        is reported (one warning line naming the file) and counts as missing, so the
        caller makes it again."""
        e = self.entry(key)
        if not e.exists():
            return False
        why = entry_problem(e, REQUIRED)
        if why is not None:
            report(why)
        return why is None

    def _files_entry(self, signature: str, kind: str | None) -> Path:
        # one record per (files, graph kind): a model with several graphs (the phrase
        # model's question and passage sides) records each; None: the model's first graph
        return (
            self.root
            / FILES_DIR
            / (f"{signature}.json" if not kind else f"{signature}.{kind}.json")
        )

    def files_record(self, signature: str, kind: str | None = None) -> dict[str, Any] | None:
        """What was recorded for model files with ``signature`` (its ``key`` and what the
        caller stored beside it), when that key's graph is still there, intact; ``kind``:
        which of the model's graphs (None: the one recorded without a kind)."""
        f = self._files_entry(signature, kind)
        try:
            record = json.loads(f.read_text())
            key = record["key"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return record if isinstance(key, str) and self.has(key) else None

    def remember_files(
        self, signature: str, key: str, *, kind: str | None = None, **extra: Any
    ) -> None:
        """Record that model files with ``signature`` give the graph ``key`` of ``kind``
        (with ``extra``, what the caller checked when it loaded them)."""
        f = self._files_entry(signature, kind)
        f.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(f, json.dumps({"key": key, **extra}))

    def write(self, key: str, fill: Callable[[Path], None]) -> Path:
        """The graph directory for ``key``, made by ``fill(staging_dir)`` when missing or
        damaged (atomically: a half-written graph is never found), its checksums last."""
        out = self.entry(key)
        if self.has(key):
            return out
        self.root.mkdir(parents=True, exist_ok=True)
        with atomic_dir(out) as staging:
            fill(staging)
            write_checksums(staging)
        forget(out)
        return out


def graph_module(model: Any, forward: Callable[..., Any]) -> Any:
    """A torch module holding ``model`` whose forward is ``forward(*inputs)``: the part of
    a model a graph computes, in the form :func:`export_graph` takes."""
    from torch import nn

    class Graph(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return forward(*inputs)

    return Graph().eval()


def export_graph(
    module: Any,
    inputs: Mapping[str, Any],
    output_names: Sequence[str],
    path: Path,
    *,
    sequence_outputs: Sequence[str] = (),
) -> None:
    """Export ``module`` (a torch module, put in eval mode) called with ``inputs`` (name ->
    tensor of shape (batch, sequence[, width])) to ``path``: opset :data:`OPSET`, batch and
    sequence axes dynamic (an output's axis 1 is the sequence for those named in
    ``sequence_outputs``: per-token logits).  The example inputs should hold padding, so
    that the traced attention masking is the general one."""
    import warnings

    import torch

    module.eval()
    axes: dict[str, dict[int, str]] = {n: {0: "batch", 1: "sequence"} for n in inputs}
    axes.update({n: {0: "batch"} for n in output_names})
    axes.update({n: {0: "batch", 1: "sequence"} for n in sequence_outputs})
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about Python branches
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(path),
            input_names=list(inputs),
            output_names=list(output_names),
            dynamic_axes=axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    module.eval()  # the exporter restores the mode it found; keep inference mode


def export_encoder(
    model: Any,
    d: Path,
    forward: Callable[..., Any],
    inputs: Mapping[str, Any],
    table: Any,
    outputs: Sequence[str],
    *,
    sequence_outputs: Sequence[str] = (),
) -> list[str]:
    """Export ``forward(input_ids, attention_mask[, token_type_ids], token_embeds=...)`` of
    ``model`` (a torch module, in eval mode, its mode restored after) called with ``inputs``
    into ``d``; returns the graph's input names.  With a token-embedding ``table``, the
    table is saved beside the graph (looked up with NumPy from a memory map: a multilingual
    model's is most of its weights, all but a few rows unused by any corpus) and the graph
    takes its rows (:data:`TOKEN_EMBEDS`) in place of ``input_ids``."""
    was_training = model.training
    model.eval()
    try:
        feeds = dict(inputs)
        if table is None:
            module = graph_module(model, forward)
        else:
            save_token_table(table, d / TOKEN_TABLE_FILE)
            feeds = {TOKEN_EMBEDS: table[feeds.pop("input_ids")].detach(), **feeds}

            def by_rows(embeds: Any, *rest: Any) -> Any:
                return forward(None, *rest, token_embeds=embeds)

            module = graph_module(model, by_rows)
        export_graph(module, feeds, outputs, d / GRAPH_FILE, sequence_outputs=sequence_outputs)
    finally:
        model.train(was_training)
    return list(feeds)


#: the attention a Hugging Face encoder is traced with: the plain one, whose pattern ONNX
#: Runtime's optimiser recognises (faster than the SDPA trace on passages; questions the
#: same: docs/benchmarks.md).  Not in a graph's key: both
#: compute the same vectors, so a graph exported before is still right
TRACED_ATTENTION = "eager"


@contextlib.contextmanager
def attention(encoder: Any, implementation: str = TRACED_ATTENTION) -> Iterator[None]:
    """``encoder`` (a Hugging Face model) computing attention with ``implementation`` within
    the block, as it did after."""
    config = getattr(encoder, "config", None)
    was = getattr(config, "_attn_implementation", None)
    setter = getattr(encoder, "set_attn_implementation", None)
    if setter is None or was is None or was == implementation:
        yield
        return
    setter(implementation)
    try:
        yield
    finally:
        setter(was)


def pad_batch(
    ids: Sequence[Any], pad_id: int, types: Sequence[Any] | None = None
) -> dict[str, np.ndarray]:
    """Rows of token ids, lists or arrays (and their token type ids, when given), padded to
    the longest into int64 ``input_ids``, ``attention_mask`` and ``token_type_ids``."""
    width = max((len(r) for r in ids), default=0)
    out = {
        "input_ids": np.full((len(ids), width), pad_id, dtype=np.int64),
        "attention_mask": np.zeros((len(ids), width), dtype=np.int64),
    }
    if types is not None:
        out["token_type_ids"] = np.zeros((len(ids), width), dtype=np.int64)
    for r, row in enumerate(ids):
        n = len(row)
        out["input_ids"][r, :n] = row
        out["attention_mask"][r, :n] = 1
        if types is not None:
            out["token_type_ids"][r, :n] = types[r]
    return out


def save_token_table(table: Any, path: Path, *, chunk_rows: int = 8192) -> None:
    """Write a (vocabulary, width) torch tensor as a float32 ``.npy`` file, a chunk at a
    time, giving back the pages each chunk read: a table mapped from its weights file
    (most of a small multilingual model's weights) never becomes resident as a whole.  A NaN or infinite value is
    refused: every question holding that token would have no vector."""
    from numpy.lib.format import open_memmap

    from anygrain.utils.memory import release_mapped

    rows, width = (int(n) for n in table.shape)
    out = open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, width))
    for i in range(0, rows, chunk_rows):
        part = table[i : i + chunk_rows].detach().float().contiguous().numpy()
        check_table_rows(part, i, path)
        written = out[i : i + len(part)]
        written[:] = part
        out.flush()
        release_mapped([(part.ctypes.data, part.nbytes), (written.ctypes.data, written.nbytes)])
    del out


def check_table_rows(part: np.ndarray, first: int, path: Path) -> None:
    """An error when rows ``first``... of a token table being written to ``path`` hold
    NaN or infinite values (the model's weights are damaged)."""
    bad = ~np.isfinite(part)
    if bad.any():
        row = first + int(np.flatnonzero(bad.reshape(len(part), -1).any(axis=1))[0])
        raise AnygrainError(
            f"{path.name}: the model's token-embedding table holds NaN or infinite values "
            f"(row {row}); its weights are damaged"
        )


def save_tokenizer(tokenizer: Any, path: Path) -> dict[str, Any]:
    """Write a Hugging Face fast tokenizer's ``tokenizers`` form to ``path``; returns the
    settings :class:`OnnxGraph` needs to tokenize as the model does (padding)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise AnygrainError(
            f"{getattr(tokenizer, 'name_or_path', 'this model')}: has no fast tokenizer, "
            "which the ONNX runtime needs; search with --runtime torch"
        )
    backend.save(str(path))
    return {
        "sep_token": str(getattr(tokenizer, "sep_token", None) or ""),
        "pad_id": int(tokenizer.pad_token_id or 0),
        "pad_token": str(tokenizer.pad_token or ""),
        "pad_type_id": int(getattr(tokenizer, "pad_token_type_id", 0) or 0),
        "padding_side": str(getattr(tokenizer, "padding_side", "right")),
        "truncation_side": str(getattr(tokenizer, "truncation_side", "right")),
    }


def write_meta(directory: Path, meta: Mapping[str, Any]) -> None:
    (directory / META_FILE).write_text(
        json.dumps({"export_version": EXPORT_VERSION, "opset": OPSET, **meta}, indent=2)
    )


def finish_export(
    d: Path, tokenizer: Any, meta: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str]
) -> None:
    """Complete the graph directory ``d`` after its export: ``tokenizer`` saved
    (:func:`save_tokenizer`) and ``meta.json`` written: ``meta``, then the graph's
    ``inputs``, its token table when it takes the rows in place of ids, its ``outputs`` and
    the tokenizer's settings."""
    tok = save_tokenizer(tokenizer, d / TOKENIZER_FILE)
    table = {"token_table": TOKEN_TABLE_FILE} if TOKEN_EMBEDS in inputs else {}
    write_meta(
        d, {**meta, "inputs": list(inputs), **table, "outputs": list(outputs), "tokenizer": tok}
    )


def open_graph(directory: Path, kind: str, what: str, *, threads: int | None = None) -> OnnxGraph:
    """The graph in ``directory``, its tokenizer read at first use (a caller that cuts its
    own inputs never reads it); a ValueError when it is not a ``kind`` graph (``what``
    names that kind)."""
    graph = OnnxGraph(directory, threads=threads, tokenize=False)
    if graph.meta.get("kind") != kind:
        raise ValueError(f"{directory}: not a {what} graph")
    return graph


class OnnxGraph:
    """One exported graph in an ONNX Runtime session, with its tokenizer.

    ``threads``: ONNX Runtime's intra-op threads (default: the count given to
    :func:`anygrain.utils.threads.set_threads` when the session starts, at the first run,
    else 1: a query is a small graph, and a pool's wake-ups cost more than they save on a
    busy CPU).

    ``tokenize``: read the tokenizer now (else on first use: a caller that cuts its own
    inputs, as the reader its windows, never pays for it)."""

    def __init__(
        self, directory: Path, *, threads: int | None = None, tokenize: bool = True
    ) -> None:
        self.directory = Path(directory)
        self.threads = threads
        why = entry_problem(self.directory, REQUIRED)
        if why is not None:
            raise AnygrainError(f"{why}; this ONNX graph is not used")
        self.meta: dict[str, Any] = json.loads((self.directory / META_FILE).read_text())
        if self.meta.get("export_version") != EXPORT_VERSION:
            raise AnygrainError(f"{self.directory}: a graph from another anygrain version")
        self._session: Any = None
        self._lock = threading.Lock()
        if tokenize:
            _ = self.tokenizer

    @functools.cached_property
    def tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.directory / TOKENIZER_FILE))
        t = self.meta["tokenizer"]
        tok.no_padding()
        tok.no_truncation()
        tok.enable_truncation(
            max_length=int(self.meta["max_length"]), direction=t.get("truncation_side", "right")
        )
        tok.enable_padding(
            direction=t.get("padding_side", "right"),
            pad_id=int(t["pad_id"]),
            pad_type_id=int(t["pad_type_id"]),
            pad_token=t["pad_token"],
        )
        return tok

    @property
    def session(self) -> Any:
        with self._lock:
            return self._session or self._start()

    def _start(self) -> Any:
        import onnxruntime as ort

        from anygrain.utils.threads import requested_threads

        so = ort.SessionOptions()
        so.intra_op_num_threads = int(self.threads or requested_threads() or 1)
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(self.directory / GRAPH_FILE), so, providers=["CPUExecutionProvider"]
        )
        return self._session

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    @functools.cached_property
    def token_table(self) -> np.ndarray:
        """The token-embedding rows of a graph exported without its table (memory-mapped)."""
        return np.load(self.directory / str(self.meta["token_table"]), mmap_mode="r")

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The graph's inputs for ``texts`` (int64, padded to the longest)."""
        enc = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        cols = {
            "input_ids": [e.ids for e in enc],
            "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc],
        }
        wanted = [*self.input_names, "input_ids"]
        return {n: np.asarray(cols[n], dtype=np.int64) for n in cols if n in wanted}

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs for ``feeds`` (``input_ids`` becomes the table's rows for a
        graph exported without its token table)."""
        inputs = dict(feeds)
        if TOKEN_EMBEDS in self.input_names and "input_ids" in inputs:
            ids = inputs.pop("input_ids")
            inputs[TOKEN_EMBEDS] = np.asarray(self.token_table[ids], dtype=np.float32)
        return [np.asarray(o) for o in self.session.run(None, inputs)]


class WindowTokenizer:
    """The calls anygrain makes of a Hugging Face fast tokenizer -- a batch of texts or of
    text pairs, with offsets, overflowing into windows of ``max_length`` tokens that overlap
    by ``stride`` -- answered by the ``tokenizers`` library from a saved ``tokenizer.json``.
    The fast tokenizer itself delegates these calls to the same library (truncation
    ``only_second`` or ``longest_first``, each encoding followed by its ``overflowing``
    ones), so the windows are the same, and no transformers is imported.

    ``token_types``: whether the encodings carry ``token_type_ids`` (the model takes them);
    ``sep_token``, ``pad_token_id``: as the fast tokenizer's attributes."""

    def __init__(
        self,
        path: Path,
        *,
        token_types: bool,
        sep_token: str = "",
        pad_token_id: int = 0,
        truncation_side: str = "right",
    ) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(path))
        self.tok.no_padding()
        self.token_types = token_types
        self.sep_token = sep_token
        self.pad_token_id = pad_token_id
        self.direction = truncation_side

    def __call__(
        self,
        first: Sequence[str],
        second: Sequence[str] | None = None,
        *,
        truncation: bool | str = False,
        max_length: int | None = None,
        stride: int = 0,
        add_special_tokens: bool = True,
        **_: Any,
    ) -> WindowEncodings:
        if truncation and max_length is not None:
            strategy = "only_second" if truncation == "only_second" else "longest_first"
            self.tok.enable_truncation(
                max_length, stride=stride, strategy=strategy, direction=self.direction
            )
        else:
            self.tok.no_truncation()
        texts: list[Any] = list(first) if second is None else list(zip(first, second, strict=True))
        encs: list[Any] = []
        mapping: list[int] = []
        for i, e in enumerate(self.tok.encode_batch(texts, add_special_tokens=add_special_tokens)):
            for part in (e, *e.overflowing):
                encs.append(part)
                mapping.append(i)
        return WindowEncodings(encs, mapping, self.token_types)


class WindowEncodings:
    """A batch of ``tokenizers`` encodings shown as the fast tokenizer's ``BatchEncoding``:
    ``input_ids``, ``offset_mapping``, ``overflow_to_sample_mapping``, ``token_type_ids``
    (when the model takes them) and ``sequence_ids(i)``."""

    def __init__(self, encs: list[Any], mapping: list[int], token_types: bool) -> None:
        self.encs = encs
        self.cols: dict[str, Any] = {
            "overflow_to_sample_mapping": mapping,
            "input_ids": [e.ids for e in encs],
            "attention_mask": [e.attention_mask for e in encs],
            "offset_mapping": [e.offsets for e in encs],
        }
        if token_types:
            self.cols["token_type_ids"] = [e.type_ids for e in encs]

    def __getitem__(self, name: str) -> Any:
        return self.cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self.cols

    def get(self, name: str, default: Any = None) -> Any:
        return self.cols.get(name, default)

    def sequence_ids(self, i: int) -> list[int | None]:
        return list(self.encs[i].sequence_ids)
