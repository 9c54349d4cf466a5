"""The reader on ONNX Runtime (:mod:`anygrain.encode.onnx_runtime`).

The reader's forward over a batch of windows, ``(input_ids, attention_mask[,
token_type_ids]) -> (start_logits, end_logits, selection_logits)``, is exported as one
graph (the token-embedding table beside it, looked up with NumPy), keyed by the fingerprint of the reader's weights (encoder and heads) and its config
(which cuts the windows and bounds the spans).  :class:`OnnxReader` runs it with the
reader's tokenizer, saved beside the graph: it reads as
:class:`~anygrain.reader.model.Reader` does (both are
:class:`~anygrain.reader.runtime.ReadingModel`), in float32.

:func:`load_reader` picks the runtime (``auto``: torch on a CPU with native bfloat16,
where its bf16 reading is faster, else ONNX Runtime where it is installed) and first asks the cache's files table whether the reader's files -- a packed reader's include
its backbone's -- are unchanged since a graph was exported from them; only when not is the
reader loaded with torch (rebuilt, checked against its fingerprint) and exported, once per
version of the weights.  The runtime is recorded nowhere: both read the same answers.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.onnx_runtime import (
    EXPORT_VERSION,
    TOKEN_EMBEDS,
    TOKENIZER_FILE,
    GraphCache,
    WindowTokenizer,
    digest,
    export_encoder,
    finish_export,
    open_graph,
    require_torch,
)
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError
from anygrain.reader.config import ReaderConfig, saved_languages
from anygrain.reader.runtime import ReadingModel, WindowLogits

# torch and transformers are imported where a torch reader is loaded or exported: reading
# with a cached (or shipped) graph needs neither installed
if TYPE_CHECKING:
    from anygrain.reader.features import Batch
    from anygrain.reader.model import Reader

__all__ = ["OnnxReader", "export_reader", "load_reader", "onnx_reader", "reader_key"]

KIND = "reader"
OUTPUTS = ("start_logits", "end_logits", "selection_logits")
# two passages of different lengths: the batch is padded, so the traced masking is general
EXAMPLE_QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"
EXAMPLE_PASSAGES = (
    "The American Football Conference (AFC) champion Denver Broncos defeated the National "
    "Football Conference (NFC) champion Carolina Panthers 24-10 to earn their third title.",
    "Super Bowl 50 was an American football game.",
)


def reader_key(reader: Reader) -> str:
    """The graph's key: the reader's weights and the settings its answers depend on."""
    settings = (reader.config.reading_dict(), reader.uses_token_types)
    return f"{KIND}-{digest(EXPORT_VERSION, reader.fingerprint(), settings)}"


def _logits(reader: Reader) -> Any:
    def forward(ids: Any, *rest: Any, token_embeds: Any = None) -> Any:
        o = reader(ids, *rest, token_embeds=token_embeds)
        return o.start_logits, o.end_logits, o.selection_logits

    return forward


def export_reader(reader: Reader, cache: GraphCache) -> Path:
    """The graph directory of ``reader``, exported unless already cached."""
    from anygrain.reader.features import collate
    from anygrain.reader.read import windows_of

    key = reader_key(reader)

    def fill(d: Path) -> None:
        windows = windows_of(
            reader, [EXAMPLE_QUESTION] * 2, list(EXAMPLE_PASSAGES), ["Super Bowl 50"] * 2
        )
        batch = collate(windows, reader.tokenizer.pad_token_id or 0)
        # Reader.forward's positional order: input_ids, attention_mask, token_type_ids
        inputs = {
            n: t
            for n, t in batch.model_inputs().items()
            if n != "token_type_ids" or reader.uses_token_types
        }
        table = reader.encoder.get_input_embeddings().weight  # type: ignore[operator]
        names = export_encoder(
            reader, d, _logits(reader), inputs, table, OUTPUTS, sequence_outputs=OUTPUTS[:2]
        )
        reader.tokenizer.save_pretrained(str(d))  # the windows are cut by the HF tokenizer
        meta = {
            "kind": KIND,
            "key": key,
            "name": reader.config.base_model,
            "max_length": reader.config.max_length,
            "config": reader.config.reading_dict(),
        }
        finish_export(d, reader.tokenizer, meta, names, OUTPUTS)

    return cache.write(key, fill)


class OnnxReader:
    """A reader's exported graph, reading as :class:`~anygrain.reader.model.Reader` does
    (``bf16`` is accepted and ignored: the graph runs in float32, which ONNX Runtime makes
    faster than torch's bfloat16 on a CPU)."""

    runtime = "onnx"
    #: the reader directory it was loaded for (:func:`load_reader`), for messages
    loaded_from = ""

    def __init__(self, directory: Path, *, threads: int | None = None) -> None:
        self.graph = open_graph(directory, KIND, "reader", threads=threads)
        meta = self.graph.meta
        self.config = ReaderConfig.from_dict(meta["config"], str(directory))
        self.inputs = [str(n) for n in meta["inputs"]]
        self.name = str(meta.get("name", ""))
        tok = meta["tokenizer"]
        # the windows are cut by the tokenizers library, as the fast tokenizer cuts them
        self.tokenizer = WindowTokenizer(
            Path(directory) / TOKENIZER_FILE,
            token_types="token_type_ids" in self.inputs,
            sep_token=str(tok.get("sep_token") or _saved_sep_token(Path(directory))),
            pad_token_id=int(tok["pad_id"]),
            truncation_side=str(tok.get("truncation_side", "right")),
        )

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()

    def window_logits(self, batch: Batch, bf16: bool = False) -> WindowLogits:
        given = {n: np.asarray(a, dtype=np.int64) for n, a in batch.model_inputs().items()}
        ids = given["input_ids"]
        # input_ids: the graph looks its token-table rows up (OnnxGraph.run)
        names = ["input_ids", *(n for n in self.inputs if n != TOKEN_EMBEDS)]
        feeds = {n: given[n] if n in given else np.zeros_like(ids) for n in names}
        start, end, selection = self.graph.run(feeds)
        return WindowLogits(
            start=start.astype(np.float32, copy=False),
            end=end.astype(np.float32, copy=False),
            selection=selection.astype(np.float32, copy=False),
        )


def _saved_sep_token(directory: Path) -> str:
    """The separator token of a graph exported before its meta recorded it (from the
    tokenizer config saved beside it)."""
    import json

    try:
        cfg = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    sep = cfg.get("sep_token") if isinstance(cfg, dict) else None
    return sep if isinstance(sep, str) else ""


def onnx_reader(reader: Reader, cache: GraphCache, *, files: str | None = None) -> OnnxReader:
    """``reader`` on ONNX Runtime, exported when its graph is not cached.  ``files``: the
    signature of the files ``reader`` was loaded from (taken before loading), recorded so
    the next load finds the graph without loading the reader."""
    entry = export_reader(reader, cache)
    if files is not None:
        cache.remember_files(files, entry.name)
    return OnnxReader(entry)


def model_files(path: Path) -> list[Path]:
    """What a saved reader is loaded from: its directory and, for a packed reader, its
    backbone's."""
    from anygrain.models.packed_state import PACKED_READER_CONFIG, packed_config

    files = [path]
    found = packed_config(path)
    if found is not None and found[0].name == PACKED_READER_CONFIG:
        from anygrain.models.resolve import resolve_model

        files.append(resolve_model(str(found[1].get("base_model", "")))[0])
    return files


def load_reader(
    dir_or_name: str | Path,
    runtime: Runtime | str | None = None,
    *,
    cache: GraphCache | None = None,
) -> ReadingModel:
    """The saved reader at ``dir_or_name`` (a full or packed reader directory, or a shipped
    reader's name) on ``runtime``: ``torch``; ``onnx`` (an error when it cannot); ``auto``
    (None): torch on a CPU with native bfloat16, where its bf16 reading is faster than ONNX
    Runtime's float32 (docs/benchmarks.md), else ONNX Runtime where it is installed and the
    graph exports, else torch with a warning (:func:`anygrain.models.runtime.choose_runtime`
    decides, without importing torch)."""
    from anygrain.models.graphs import Exported, GraphSource, graph_or_export
    from anygrain.models.runtime import Role, choose_runtime
    from anygrain.models.shipped import saved_model_dir

    path = saved_model_dir(dir_or_name)
    choice = choose_runtime(runtime, None, role=Role.READER)
    if not choice.onnx:
        return _load_torch(path)
    cache = cache or GraphCache.default()

    def export(reader: Reader) -> Exported[OnnxReader]:
        entry = export_reader(reader, cache)
        return Exported(entry.name, OnnxReader(entry))

    try:
        files = model_files(path)
    except (AnygrainError, OSError, ValueError, KeyError):
        files = None  # loading the reader says what is wrong
    opened = graph_or_export(
        GraphSource(files, KIND, shipped=path) if files is not None else None,
        cache,
        use=lambda record: OnnxReader(cache.entry(record["key"])),
        load=lambda: _load_torch(path),
        export=export,
        strict=choice.strict,
        refused=f"{path}: cannot run the reader on ONNX Runtime; read with --runtime torch",
        warned="reader not exported to ONNX; reading with torch",
    )
    if opened.runner is None:
        assert opened.model is not None
        return opened.model
    return _loaded_from(opened.runner, path)


def _loaded_from(reader: OnnxReader, path: Path) -> OnnxReader:
    """``reader`` with what its graph does not record taken from the reader directory it
    was loaded for: the languages (graphs are keyed by the settings answers depend on, so a
    cached one may predate them) and the directory, for messages."""
    reader.config.languages = saved_languages(path)
    reader.loaded_from = str(path)
    return reader


def _load_torch(path: Path) -> Reader:
    """The reader at ``path`` loaded with torch (one line saying how to get it when torch is
    not installed)."""
    require_torch(f"reading with {path} (no ONNX graph of it is cached or shipped)")
    from anygrain.reader.model import Reader

    return Reader.load(path)
