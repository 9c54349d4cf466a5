"""The phrase model's question side on ONNX Runtime (:mod:`anygrain.encode.onnx_runtime`).

The question encoder(s) and the question heads are exported as one graph, ``(input_ids,
attention_mask[, token_type_ids]) -> (q_start, q_end)``, keyed by the fingerprint of the
question-side weights and the settings that shape a question's vectors (encoder kind,
pooling, prefix, maximum length).  :class:`OnnxQuestionEncoder` runs it with the
``tokenizers`` library: encoding a question imports neither torch nor transformers.

A phrase index opening its model (:func:`anygrain.phrase.opening.open_questions`, on
:func:`anygrain.models.graphs.graph_or_export`) first asks the graph cache's files table
whether the model's files are unchanged since a graph was exported from them (the record
keeps the phrase fingerprint checked when they were loaded); only when not is the model
loaded with torch, checked as before, and exported (:func:`export_questions`), once per
version of the weights.  A packed model's files include its backbone's.

The passage side -- the phrase encoder, the start/end heads and the filter, what a dump
needs of each window -- is a second graph (:func:`export_passages`, kind ``phrase-passage``),
keyed by the passage-side weights, the settings that cut windows and the tokenizer;
:class:`OnnxPassageEncoder` runs it, cutting windows with the ``tokenizers`` library.  Both
graphs keep the token-embedding table outside
(:func:`~anygrain.encode.onnx_runtime.export_encoder`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.npy import drop_pages
from anygrain.encode.onnx_runtime import (
    EXPORT_VERSION,
    TOKENIZER_FILE,
    GraphCache,
    WindowTokenizer,
    attention,
    digest,
    export_encoder,
    files_signature,
    finish_export,
    open_graph,
)
from anygrain.models.forms import PACKED_PHRASE_CONFIG
from anygrain.phrase.passages import PassageEncoding, WindowForward, collate_windows
from anygrain.phrase.tokens import Window, tokenize_windows
from anygrain.utils.finite import check_finite

if TYPE_CHECKING:
    from anygrain.phrase.model import PhraseEncoder

KIND = "phrase-question"
OUTPUTS = ("q_start", "q_end")
# padded on purpose: the traced attention masking must be the general one
EXAMPLE_QUESTIONS = ("Which NFL team represented the AFC at Super Bowl 50?", "Who?")
PASSAGE_KIND = "phrase-passage"
PASSAGE_OUTPUTS = ("start", "end", "filter")
# two windows of different lengths: the batch is padded, so the traced masking is general
EXAMPLE_PASSAGES = (
    "The American Football Conference (AFC) champion Denver Broncos defeated the National "
    "Football Conference (NFC) champion Carolina Panthers 24-10 to earn their third title.",
    "Super Bowl 50 was an American football game.",
)
EXAMPLE_TITLES = ("Super Bowl 50", "Super Bowl 50")
# traced as the plain attention, whose pattern ONNX Runtime's optimiser recognises: a dump's
# windows run faster than from the SDPA export (bench/passage_runtime.py).
# Not in the key: both compute the same vectors (a graph exported before is still right)
PASSAGE_ATTENTION = "eager"
PACKED_CONFIG = PACKED_PHRASE_CONFIG


def question_key(model: PhraseEncoder) -> str:
    """The graph's key: the question-side weights (encoders and heads) and the settings
    that make a question's vectors."""
    from anygrain.models.base import fingerprint_modules

    c = model.config
    weights = fingerprint_modules([*model.questions, model.q_start_head, model.q_end_head])
    settings = (
        c.question_encoder.value,
        c.question_pooling.value,
        c.max_query_length,
        c.query_prefix,
        c.hidden_size,
    )
    return f"{KIND}-{digest(EXPORT_VERSION, weights, settings)}"


def export_questions(model: PhraseEncoder, cache: GraphCache) -> Path:
    """The graph directory of ``model``'s question side, exported unless already cached."""
    key = question_key(model)
    c = model.config

    def fill(d: Path) -> None:
        ex = model.tokenize_questions(list(EXAMPLE_QUESTIONS))
        # question_forward's positional order: input_ids, attention_mask, token_type_ids
        inputs: dict[str, Any] = {
            n: ex[n].cpu() for n in ("input_ids", "attention_mask", "token_type_ids") if n in ex
        }
        table = model.cpu().question_token_table()

        def forward(ids: Any, *rest: Any, token_embeds: Any = None) -> Any:
            return model.question_forward_with(
                model.questions, ids, *rest, token_embeds=token_embeds
            )

        names = export_encoder(model, d, forward, inputs, table, OUTPUTS)
        meta = {
            "kind": KIND,
            "key": key,
            "name": c.base_model,
            "dim": c.hidden_size,
            "max_length": c.max_query_length,
            "query_prefix": c.query_prefix,
        }
        finish_export(d, model.tokenizer, meta, names, OUTPUTS)

    return cache.write(key, fill)


# --- the passage side ---------------------------------------------------------------------


def _token_types(model: PhraseEncoder) -> bool:
    """Whether the model's windows carry token type ids (its tokenizer gives them)."""
    return "token_type_ids" in getattr(model.tokenizer, "model_input_names", ())


def passage_key(model: PhraseEncoder) -> str:
    """The passage graph's key: the passage-side weights (encoder, start/end heads, filter),
    the settings that cut a passage into windows, and the tokenizer that cuts them."""
    from anygrain.models.base import fingerprint_modules

    c = model.config
    weights = fingerprint_modules([model.phrase, model.start_head, model.end_head, model.filter])
    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    tokenizer = ""
    if backend is not None:
        # without the truncation and padding the last call set (each call sets its own)
        state = json.loads(backend.to_str())
        tokenizer = digest({k: v for k, v in state.items() if k not in ("truncation", "padding")})
    settings = (
        c.max_passage_length,
        c.doc_stride,
        c.include_title,
        c.passage_prefix,
        c.hidden_size,
        _token_types(model),
        tokenizer,
    )
    return f"{PASSAGE_KIND}-{digest(EXPORT_VERSION, weights, settings)}"


def export_passages(model: PhraseEncoder, cache: GraphCache) -> Path:
    """The graph directory of ``model``'s passage side, exported unless already cached:
    ``(token_embeds, attention_mask[, token_type_ids]) -> (start, end, filter)``, each
    ``(batch, sequence, .)``, what :meth:`PhraseEncoder.phrase_forward` gives."""
    key = passage_key(model)
    c = model.config

    def fill(d: Path) -> None:
        model.cpu()
        wins = model.windows(list(EXAMPLE_PASSAGES), list(EXAMPLE_TITLES))
        batch = model.collate(wins)  # input_ids, attention_mask[, token_type_ids]
        table = model.phrase.get_input_embeddings().weight  # type: ignore[operator]

        from anygrain.models.hf import encoder_inputs

        def forward(ids: Any, mask: Any, types: Any = None, *, token_embeds: Any = None) -> Any:
            kw = encoder_inputs(ids, mask, types, token_embeds)
            h = model.phrase(**kw).last_hidden_state
            return model.start_head(h), model.end_head(h), model.filter(h)

        with attention(model.phrase, PASSAGE_ATTENTION):
            names = export_encoder(
                model, d, forward, batch, table, PASSAGE_OUTPUTS, sequence_outputs=PASSAGE_OUTPUTS
            )
        meta = {
            "kind": PASSAGE_KIND,
            "key": key,
            "name": c.base_model,
            "dim": c.hidden_size,
            "max_length": c.max_passage_length,
            "doc_stride": c.doc_stride,
            "include_title": c.include_title,
            "passage_prefix": c.passage_prefix,
            "token_types": _token_types(model),
        }
        finish_export(d, model.tokenizer, meta, names, PASSAGE_OUTPUTS)

    return cache.write(key, fill)


class OnnxPassageEncoder(PassageEncoding):
    """``encode_passages`` as :class:`~anygrain.phrase.model.PhraseEncoder`'s, on an
    exported passage graph (float32), with the ``tokenizers`` library cutting the windows:
    a dump on it imports neither torch nor transformers.  Pickled as its directory (a Ray
    actor opens its own session)."""

    runtime = "onnx"

    def __init__(self, directory: Path, *, threads: int | None = None) -> None:
        self.directory = Path(directory)
        self.graph = open_graph(self.directory, PASSAGE_KIND, "phrase passage", threads=threads)
        meta = self.graph.meta
        self.name = str(meta.get("name", ""))
        self.pad_id = int(meta["tokenizer"]["pad_id"])
        self._dim = int(meta["dim"])

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_name(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.directory,), {"threads": self.graph.threads})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.graph.threads = state.get("threads")

    @functools.cached_property
    def tokenizer(self) -> WindowTokenizer:
        t = self.graph.meta["tokenizer"]
        return WindowTokenizer(
            self.directory / TOKENIZER_FILE,
            token_types=bool(self.graph.meta["token_types"]),
            truncation_side=str(t.get("truncation_side", "right")),
        )

    def windows(self, texts: Sequence[str], titles: Sequence[str] | None = None) -> list[Window]:
        """Passages as token windows, as the model cuts them
        (:meth:`~anygrain.phrase.model.PhraseEncoder.windows`)."""
        m = self.graph.meta
        return tokenize_windows(
            self.tokenizer,
            texts,
            titles if m["include_title"] else None,
            max_length=int(m["max_length"]),
            stride=int(m["doc_stride"]),
            prefix=str(m["passage_prefix"]),
        )

    def window_vectors(
        self, windows: Sequence[Window]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(start, end, filter)`` of a batch of windows, float32, padding included."""
        s, e, f = self.graph.run(collate_windows(windows, self.pad_id))
        return s, e, f

    def window_forward(self, *, bf16: bool, cast_once: bool) -> WindowForward:
        """:meth:`window_vectors`, for :meth:`encode_passages`
        (:class:`~anygrain.phrase.passages.PassageEncoding`'s).  ``bf16`` is refused: an
        index records it, and this graph computes in float32."""
        if bf16:
            raise ValueError("the ONNX passage graph encodes in float32; bf16 needs torch")
        return self.window_vectors

    def release(self) -> None:
        """Give back the pages of the token table the passages read (the kernel maps 64 KB
        or more around each row; a corpus spread over a large vocabulary would make most
        of the table resident)."""
        if "token_table" in self.graph.__dict__:
            drop_pages(self.graph.token_table)


def onnx_passages(model: PhraseEncoder, cache: GraphCache) -> OnnxPassageEncoder:
    """``model``'s passage side on ONNX Runtime, exported when its graph is not cached."""
    from anygrain.phrase.graph_model import GraphPhraseModel

    if isinstance(model, GraphPhraseModel):  # a model on its shipped graphs (no torch)
        return model.onnx_passages(cache)  # type: ignore[no-any-return]
    return OnnxPassageEncoder(export_passages(model, cache))


def model_files(model_dir: Path) -> list[Path]:
    """What a saved phrase model is loaded from: its directory and, for a packed model,
    its backbone's (read without torch)."""
    files = [model_dir]
    packed = model_dir / PACKED_CONFIG
    if packed.is_file():
        base = str(json.loads(packed.read_text(encoding="utf-8"))["base_model"])
        from anygrain.models.resolve import resolve_model

        files.append(resolve_model(base)[0])
    return files


class OnnxQuestionEncoder:
    """``encode_questions`` as :class:`~anygrain.phrase.model.PhraseEncoder`'s, on an
    exported graph (``bf16`` is accepted and ignored: the graph runs in float32, which
    ONNX Runtime makes faster than torch's bfloat16 on a CPU)."""

    runtime = "onnx"

    def __init__(self, directory: Path, *, threads: int | None = None) -> None:
        # the tokenizer loads at the first question: when a model was just exported, after it
        # is freed (a large vocabulary's tokenizer alone holds much memory)
        self.graph = open_graph(directory, KIND, "phrase question", threads=threads)
        meta = self.graph.meta
        self.dim = int(meta["dim"])
        self.name = str(meta.get("name", ""))
        self.prefix = str(meta.get("query_prefix", ""))

    def encode_questions(
        self, texts: Sequence[str], *, batch_size: int = 64, bf16: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(q_start, q_end)`` float32 arrays, input order; batches by length as torch's."""
        n = len(texts)
        qs = np.zeros((n, self.dim), dtype=np.float32)
        qe = np.zeros((n, self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        for i in range(0, n, batch_size):
            b = order[i : i + batch_size]
            feeds = self.graph.tokenize([self.prefix + texts[j] for j in b])
            s, e = self.graph.run(feeds)
            qs[b], qe[b] = s, e
        return (
            check_finite(qs, self.name, "question start"),
            check_finite(qe, self.name, "question end"),
        )


def cached_questions(
    model_dir: Path, cache: GraphCache
) -> tuple[OnnxQuestionEncoder, str, dict[str, Any]] | None:
    """``(encoder, phrase fingerprint, model config)`` for a saved model whose files are
    unchanged since their graph was exported (the fingerprint and config as loading them
    found); None otherwise (the model must be loaded)."""
    from anygrain.models.graphs import GraphSource

    # a shipped model carries its graph without weights: made with NumPy
    source = GraphSource(model_files(model_dir), KIND, shipped=model_dir)
    record = source.record(cache, source.signature())
    if record is None or not record.get("phrase_fingerprint"):
        return None
    config = record.get("config")
    return (
        OnnxQuestionEncoder(cache.entry(record["key"])),
        str(record["phrase_fingerprint"]),
        config if isinstance(config, dict) else {},
    )


def onnx_questions(
    model: PhraseEncoder,
    cache: GraphCache,
    *,
    files: str | None = None,
    phrase_fingerprint: str = "",
    config: dict[str, Any] | None = None,
) -> OnnxQuestionEncoder:
    """``model``'s question side on ONNX Runtime, exported when its graph is not cached.
    ``files``: the signature of the files ``model`` was loaded from (taken before loading),
    recorded with the ``phrase_fingerprint`` and ``config`` loading found, so the next open
    finds the graph without loading the model."""
    entry = export_questions(model, cache)
    if files is not None and phrase_fingerprint:
        cache.remember_files(
            files, entry.name, phrase_fingerprint=phrase_fingerprint, config=config or {}
        )
    return OnnxQuestionEncoder(entry)


def export_in_child(model_dir: Path, cache: GraphCache, *, threads: int | None = None) -> bool:
    """Export the question graph of the saved model at ``model_dir`` in a child process;
    True when it did.  The torch model, its tokenizer and the exporter's working memory
    (several times the weights, in-process) then go back to the system before the index
    loads its arrays, so searching an index whose graph is not cached yet stays within the
    memory of searching one whose graph is.  The child records the model's files, phrase
    fingerprint and config (as :func:`onnx_questions` does), which the caller then checks
    against the index through :func:`cached_questions`."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "anygrain.phrase.onnx", str(model_dir), str(cache.root)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    except OSError as e:
        why = str(e)
    else:
        if done.returncode == 0:
            return True
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    import warnings

    # the export then happens in this process: it works, but holds the model's memory
    warnings.warn(f"exporting the question graph in a child process failed ({why})", stacklevel=2)
    return False


def _export_main(argv: Sequence[str]) -> int:
    """``python -m anygrain.phrase.onnx MODEL_DIR CACHE_ROOT``: load the saved phrase model
    (its fingerprints checked) and export its question graph into the cache."""
    from anygrain.phrase.model import PhraseEncoder

    model_dir, root = Path(argv[0]), Path(argv[1])
    files = files_signature(model_files(model_dir))  # before loading: what was checked
    model = PhraseEncoder.load(model_dir)
    fingerprint = model.config.phrase_fingerprint or model.phrase_fingerprint()
    onnx_questions(
        model,
        GraphCache(root),
        files=files,
        phrase_fingerprint=fingerprint,
        config=model.config.to_dict(),
    )
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_export_main(sys.argv[1:]))
