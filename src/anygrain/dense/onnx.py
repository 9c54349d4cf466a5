"""The dense bi-encoder on ONNX Runtime (:mod:`anygrain.encode.onnx_runtime`).

Each side of a :class:`~anygrain.models.biencoder.BiEncoder` -- its transformer, pooling and
normalisation -- is exported as one graph, ``(token_embeds, attention_mask[,
token_type_ids]) -> vectors``, keyed by the fingerprint of that transformer's weights and
the pooling and normalisation (:func:`side_key`).  The token-embedding table stays outside
the graph (a memory-mapped ``token_embeddings.npy``, as for the phrase model's question
side), and what happens before the graph -- the prefix, the ``title [SEP] text`` pairing,
truncation to the side's maximum length -- is the runner's (:class:`OnnxTextEncoder`, with
the ``tokenizers`` library): a shared model whose two sides pool alike has one graph for
both, whatever their prefixes and lengths.  :class:`OnnxBiEncoder` encodes questions and
passages as the torch model does (the same float32 vectors to ~1e-6), importing neither
torch nor transformers.

A dense index opening its model (:func:`anygrain.dense.opening.open_questions`, on
:func:`anygrain.models.graphs.graph_or_export`) first asks the graph cache's files table
whether the model's files are unchanged since their graphs were exported (the record keeps
the passage fingerprint, the weights' fingerprints and the settings found when they were
loaded: :func:`cached_model`, :func:`cached_biencoder`); only when not is the model loaded
with torch, checked as before, and exported (:func:`export_onnx`), once per version of its
weights.

Which runtime encodes what (``--runtime auto|onnx|torch``; the runtime is recorded nowhere
in an index): under ``auto``, questions run on ONNX Runtime on a CPU (faster than torch
one at a time, and no torch import), and so do the float32 passages of builds and ``add``
(faster than torch at the build's batch, at a lower peak: :func:`passage_runtime`); ``bf16`` (bfloat16 vectors, recorded by the build), Ray actors
and GPUs are torch's only.  Figures: docs/dense_runtime.json (bench/dense_runtime.py).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.onnx_runtime import (
    EXPORT_VERSION,
    TOKENIZER_FILE,
    GraphCache,
    OnnxGraph,
    attention,
    digest,
    export_encoder,
    finish_export,
    pad_batch,
)
from anygrain.encode.runtime import Runtime
from anygrain.models.encoder_config import EncoderConfig, Pooling
from anygrain.models.forms import BIENCODER_CONFIG as BIENCODER_CONFIG
from anygrain.models.text_encoding import BiEncoding, TextEncoding, TokenRows

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from anygrain.models.biencoder import BiEncoder
    from anygrain.models.encoder import TextEncoder
    from anygrain.models.graphs import Exported

KIND = "dense-encoder"
OUTPUTS = ("vectors",)
SIDES = ("question", "passage")
# padded, and a pair, on purpose: the traced attention masking and token types are general
EXAMPLE = (("Super Bowl 50", "Which NFL team represented the AFC at Super Bowl 50?"), ("", "Who?"))
#: tokens (rows x width) one ONNX Runtime call takes at most: a few paragraphs a call run
#: fastest and at the lowest peak (docs/benchmarks.md); short questions still run 32 or
#: more at a time
RUN_TOKENS = 1024


def is_biencoder(model: object) -> TypeIs[BiEncoder]:
    """Whether ``model`` is a loaded :class:`~anygrain.models.biencoder.BiEncoder`, asked
    without importing torch (none exists before its module is imported)."""
    mod = sys.modules.get("anygrain.models.biencoder")
    return mod is not None and isinstance(model, mod.BiEncoder)


# --- export ---------------------------------------------------------------------------------
def weights_fingerprint(encoder: TextEncoder) -> str:
    """The fingerprint of a side's transformer, as a dense index records the passage side's
    (:meth:`~anygrain.models.biencoder.BiEncoder.passage_fingerprint`)."""
    from anygrain.models.base import fingerprint_modules

    return fingerprint_modules([encoder.model], numbered=False)


def side_key(weights: str, config: EncoderConfig | Mapping[str, Any], dim: int) -> str:
    """A side's graph key: its transformer's weights and what the graph does after it
    (pooling, normalisation).  Prefix and maximum length act on the text, before the graph."""
    c = config if isinstance(config, EncoderConfig) else EncoderConfig.from_dict(dict(config))
    return f"{KIND}-{digest(EXPORT_VERSION, weights, c.pooling.value, c.normalize, dim)}"


def export_side(
    model: BiEncoder, side: str, cache: GraphCache, *, weights: str | None = None
) -> Path:
    """The graph directory of ``model``'s ``side`` (question or passage), exported unless
    already cached.  ``weights``: the side's :func:`weights_fingerprint`, when known."""
    enc: TextEncoder = getattr(model, side)
    weights = weights or weights_fingerprint(enc)
    key = side_key(weights, enc.config, model.dim)

    def fill(d: Path) -> None:
        from anygrain.models.encoder import pool
        from anygrain.models.hf import encoder_inputs

        titles, texts = (list(x) for x in zip(*EXAMPLE, strict=True))
        ex = enc.tokenize(texts, titles, padding=True)
        table = enc.model.cpu().get_input_embeddings().weight  # type: ignore[operator]
        # the forward's positional order: input_ids, attention_mask, token_type_ids
        inputs = {n: ex[n] for n in ("input_ids", "attention_mask", "token_type_ids") if n in ex}
        c = enc.config

        def forward(ids: Any, mask: Any, types: Any = None, *, token_embeds: Any = None) -> Any:
            import torch

            out = enc.model(**encoder_inputs(ids, mask, types, token_embeds))
            v = pool(out.last_hidden_state, mask, c.pooling)
            return torch.nn.functional.normalize(v, dim=-1) if c.normalize else v

        with attention(enc.model):  # the plain attention: ONNX Runtime fuses it
            names = export_encoder(enc, d, forward, inputs, table, OUTPUTS)
        meta = {
            "kind": KIND,
            "key": key,
            "name": enc.name or model.config.base_model,
            "dim": model.dim,
            "pooling": enc.config.pooling.value,
            "normalize": enc.config.normalize,
            # what OnnxGraph.tokenize would cut to; the runner cuts to its side's length
            "max_length": enc.config.max_length,
        }
        finish_export(d, enc.tokenizer, meta, names, OUTPUTS)

    return cache.write(key, fill)


def side_weights(model: BiEncoder) -> dict[str, str]:
    """Each side's :func:`weights_fingerprint` (one hash for a shared model)."""
    p = weights_fingerprint(model.passage)
    shared = model.question.model is model.passage.model
    return {"passage": p, "question": p if shared else weights_fingerprint(model.question)}


def export_biencoder(
    model: BiEncoder, cache: GraphCache, *, weights: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """The graph directory of each side of ``model`` (``{"question": ..., "passage": ...}``;
    one directory for both when the sides share weights, pooling and normalisation),
    exported unless already cached.  ``weights``: :func:`side_weights`, when known."""
    w = dict(weights or side_weights(model))
    return {side: export_side(model, side, cache, weights=w[side]) for side in SIDES}


# --- running --------------------------------------------------------------------------------
class OnnxTextEncoder(TextEncoding):
    """One side of a bi-encoder on its exported graph: ``encode`` as
    :meth:`~anygrain.models.encoder.TextEncoder.encode` (the prefix, ``title [SEP] text``
    with only the text truncated, batches of similar length), the same float32 vectors.
    ``bf16`` is accepted and ignored: the graph runs in float32."""

    runtime = "onnx"

    def __init__(self, graph: OnnxGraph, config: EncoderConfig, *, side: str = "text") -> None:
        meta = graph.meta
        if meta.get("kind") != KIND:
            raise ValueError(f"{graph.directory}: not a dense encoder graph")
        if (meta.get("pooling"), bool(meta.get("normalize"))) != (
            config.pooling.value,
            config.normalize,
        ):
            raise ValueError(
                f"{graph.directory}: graph pools {meta.get('pooling')} (normalize "
                f"{meta.get('normalize')}), the {side} side {config.pooling.value} "
                f"({config.normalize})"
            )
        self.graph = graph
        self.config = config
        self.side = side
        self.name = str(meta.get("name", ""))
        self._dim = int(meta["dim"])

    @property
    def dim(self) -> int:
        return self._dim

    def _tokenizer(self, pairs: bool) -> Any:
        # a tokenizer per mode: truncation is a setting of the tokenizer object
        return self._pair_tokenizer if pairs else self._single_tokenizer

    @functools.cached_property
    def _single_tokenizer(self) -> Any:
        return self._configured("longest_first")

    @functools.cached_property
    def _pair_tokenizer(self) -> Any:
        return self._configured("only_second")  # DPR: the title is never cut

    def _configured(self, strategy: str) -> Any:
        from tokenizers import Tokenizer

        t = self.graph.meta["tokenizer"]
        tok = Tokenizer.from_file(str(self.graph.directory / TOKENIZER_FILE))
        tok.no_padding()
        tok.enable_truncation(
            max_length=self.config.max_length,
            strategy=strategy,
            direction=t.get("truncation_side", "right"),
        )
        return tok

    def token_rows(
        self, texts: Sequence[str], titles: Sequence[str] | None
    ) -> tuple[TokenRows, TokenRows | None]:
        texts = [self.config.prefix + t for t in texts]
        items: list[Any] = list(zip(titles, texts, strict=True)) if titles is not None else texts
        enc = self._tokenizer(titles is not None).encode_batch(items, add_special_tokens=True)
        types = "token_type_ids" in self.graph.input_names
        return [e.ids for e in enc], [e.type_ids for e in enc] if types else None

    def run_rows(self, ids: TokenRows, types: TokenRows | None, bf16: bool) -> np.ndarray:
        # a batch runs in parts of at most RUN_TOKENS tokens (longest first, so each part's
        # first row is its widest): the same vectors, less time and memory
        pad_id = int(self.graph.meta["tokenizer"]["pad_id"])
        parts: list[np.ndarray] = []
        i = 0
        while i < len(ids):
            rows = max(1, RUN_TOKENS // len(ids[i]))
            part_types = types[i : i + rows] if types is not None else None
            (vecs,) = self.graph.run(pad_batch(ids[i : i + rows], pad_id, part_types))
            parts.append(vecs)
            i += rows
        return np.concatenate(parts)


@dataclass
class RunnerConfig:
    """What :class:`OnnxBiEncoder` encodes with: the base model's name, each side's
    settings and the passage fingerprint (as :class:`~anygrain.models.biencoder.BiEncoderConfig`
    names them)."""

    base_model: str
    question: EncoderConfig
    passage: EncoderConfig
    passage_fingerprint: str


class OnnxBiEncoder(BiEncoding):
    """``encode_questions`` / ``encode_passages`` as :class:`~anygrain.models.biencoder.BiEncoder`'s,
    on the exported graphs of its two sides (one ONNX Runtime session when they share one)."""

    runtime = "onnx"

    def __init__(
        self,
        graphs: Mapping[str, Path],
        config: RunnerConfig,
        *,
        threads: int | None = None,
    ) -> None:
        sessions: dict[Path, OnnxGraph] = {}
        for d in graphs.values():
            sessions.setdefault(Path(d), OnnxGraph(Path(d), threads=threads, tokenize=False))
        self.question = OnnxTextEncoder(
            sessions[Path(graphs["question"])], config.question, side="question"
        )
        self.passage = OnnxTextEncoder(
            sessions[Path(graphs["passage"])], config.passage, side="passage"
        )
        self.config = config

    @property
    def dim(self) -> int:
        return self.question.dim

    def passage_fingerprint(self) -> str:
        return self.config.passage_fingerprint


def runner_config(model: BiEncoder, passage_fingerprint: str) -> RunnerConfig:
    c = model.config
    return RunnerConfig(c.base_model, c.question, c.passage, passage_fingerprint)


def export_onnx(
    model: BiEncoder,
    cache: GraphCache,
    *,
    passage_fingerprint: str = "",
    own_sides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Exported[OnnxBiEncoder]:
    """``model`` on ONNX Runtime, its sides exported when not cached, with what the files
    table records beside them: the ``passage_fingerprint`` loading found, the sides' weights
    and ``own_sides`` (the model's own settings, before an index's were applied; default:
    its settings now), so the next open finds the graphs without loading the model."""
    from anygrain.models.graphs import Exported

    weights = side_weights(model)
    graphs = export_biencoder(model, cache, weights=weights)
    fp = passage_fingerprint or weights["passage"]
    sides = own_sides or {s: getattr(model.config, s).to_dict() for s in SIDES}
    record = {
        "passage_fingerprint": fp,
        "weights": weights,
        "sides": {s: dict(v) for s, v in sides.items()},
        "base_model": model.config.base_model,
        "dim": model.dim,
    }
    runner = OnnxBiEncoder(graphs, runner_config(model, fp))
    return Exported(graphs["passage"].name, runner, record)


def onnx_biencoder(
    model: BiEncoder,
    cache: GraphCache,
    *,
    files: str | None = None,
    passage_fingerprint: str = "",
    own_sides: Mapping[str, Mapping[str, Any]] | None = None,
) -> OnnxBiEncoder:
    """``model`` on ONNX Runtime (:func:`export_onnx`); ``files``: the files-table key of the
    files ``model`` was loaded from (taken before loading), recorded when the
    ``passage_fingerprint`` loading found is given."""
    done = export_onnx(model, cache, passage_fingerprint=passage_fingerprint, own_sides=own_sides)
    if files is not None and passage_fingerprint:
        cache.remember_files(files, done.key, **done.record)
    return done.runner


@dataclass(frozen=True)
class CachedModel:
    """What the files table recorded for a model's files: enough to open its graphs
    without loading it."""

    passage_fingerprint: str
    weights: dict[str, str]
    sides: dict[str, dict[str, Any]]  # the model's own settings, per side
    base_model: str
    dim: int


def cached_model(record: Mapping[str, Any]) -> CachedModel | None:
    """What the files table recorded for a saved model (an anygrain model directory or a
    plain Hugging Face one) whose files are unchanged since its graphs were exported; None
    when the record is another kind of model's."""
    try:
        return CachedModel(
            str(record["passage_fingerprint"]),
            {s: str(record["weights"][s]) for s in SIDES},
            {s: dict(record["sides"][s]) for s in SIDES},
            str(record["base_model"]),
            int(record["dim"]),
        )
    except (KeyError, TypeError, ValueError):
        return None  # recorded by another kind of model: load it


def cached_biencoder(
    found: CachedModel, sides: Mapping[str, Mapping[str, Any]], cache: GraphCache
) -> OnnxBiEncoder | None:
    """The runner for a cached model whose sides encode with ``sides`` (the settings an
    index applies), when the graph of each side is in the cache; else None."""
    cfg = {s: EncoderConfig.from_dict(dict(sides[s])) for s in SIDES}
    keys = {s: side_key(found.weights[s], cfg[s], found.dim) for s in SIDES}
    if not all(cache.has(k) for k in keys.values()):
        return None
    config = RunnerConfig(
        found.base_model, cfg["question"], cfg["passage"], found.passage_fingerprint
    )
    return OnnxBiEncoder({s: cache.entry(k) for s, k in keys.items()}, config)


def passage_runtime(
    runtime: Runtime | str | None,
    device: str | None,
    *,
    bf16: bool = False,
    executor: Any = None,
) -> Runtime:
    """What encodes passage batches (a build, ``add``): ONNX Runtime under ``auto`` on a CPU
    where it is installed -- the same float32 vectors (to ~2e-7), faster than torch at the
    build's batch size, at a lower peak (docs/dense_runtime.json) --
    except where only torch can run: ``bf16`` (bfloat16 vectors, asked for and recorded by
    the build), shards on Ray actors (each loads the torch model), a GPU torch sees under
    device auto.  ``onnx`` refuses those cases rather than silently running torch
    (:func:`anygrain.models.runtime.choose_runtime`, for passages)."""
    from anygrain.models.runtime import Role, choose_runtime

    return choose_runtime(runtime, device, role=Role.PASSAGES, bf16=bf16, executor=executor).runtime


__all__ = [
    "BIENCODER_CONFIG",
    "OnnxBiEncoder",
    "OnnxTextEncoder",
    "Pooling",
    "cached_biencoder",
    "cached_model",
    "export_biencoder",
    "export_onnx",
    "export_side",
    "onnx_biencoder",
    "passage_runtime",
    "side_key",
]
