"""The phrase model's question side on ONNX Runtime (:mod:`anygrain.encode.onnx_runtime`).

The question encoder(s) and the question heads are exported as one graph, ``(input_ids,
attention_mask[, token_type_ids]) -> (q_start, q_end)``, keyed by the fingerprint of the
question-side weights and the settings that shape a question's vectors (encoder kind,
pooling, prefix, maximum length).  :class:`OnnxQuestionEncoder` runs it with the
``tokenizers`` library: encoding a question imports neither torch nor transformers.

A phrase index opening its model (:meth:`anygrain.phrase.index.PhraseIndex.open`) first
asks :func:`cached_questions` whether the model's files are unchanged since a graph was
exported from them (the files table of :class:`~anygrain.encode.onnx_runtime.GraphCache`,
which also keeps the phrase fingerprint checked when they were loaded); only when not is
the model loaded with torch, checked as before, and exported (:func:`onnx_questions`),
once per version of the weights.  A packed model's files include its backbone's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.onnx_runtime import (
    EXPORT_VERSION,
    GRAPH_FILE,
    TOKEN_EMBEDS,
    TOKEN_TABLE_FILE,
    TOKENIZER_FILE,
    GraphCache,
    OnnxGraph,
    digest,
    export_graph,
    files_signature,
    graph_module,
    save_token_table,
    save_tokenizer,
    write_meta,
)
from anygrain.utils.finite import check_finite

if TYPE_CHECKING:
    from anygrain.phrase.model import PhraseEncoder

KIND = "phrase-question"
OUTPUTS = ("q_start", "q_end")
# padded on purpose: the traced attention masking must be the general one
EXAMPLE_QUESTIONS = ("Which NFL team represented the AFC at Super Bowl 50?", "Who?")
# anygrain.phrase.packed.PACKED_CONFIG, named here without importing torch (a test checks)
PACKED_CONFIG = "anygrain_packed.json"


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
        was_training = model.training
        model.eval()
        try:
            ex = model.tokenize_questions(list(EXAMPLE_QUESTIONS))
            # question_forward's positional order: input_ids, attention_mask, token_type_ids
            names: list[str] = [
                n for n in ("input_ids", "attention_mask", "token_type_ids") if n in ex
            ]
            inputs: dict[str, Any] = {n: ex[n].cpu() for n in names}
            table = model.cpu().question_token_table()
            if table is None:
                module = graph_module(model, model.question_forward)
            else:
                # the table stays outside the graph (looked up with NumPy from a memory map):
                # me5-small's is 384 MB of its 470, all but a few rows unused by any corpus
                save_token_table(table, d / TOKEN_TABLE_FILE)
                inputs = {TOKEN_EMBEDS: table[inputs.pop("input_ids")].detach(), **inputs}
                names = list(inputs)

                def forward(embeds: Any, *rest: Any) -> Any:
                    return model.question_forward_with(
                        model.questions, None, *rest, token_embeds=embeds
                    )

                module = graph_module(model, forward)
            export_graph(module, inputs, OUTPUTS, d / GRAPH_FILE)
        finally:
            model.train(was_training)
        tok = save_tokenizer(model.tokenizer, d / TOKENIZER_FILE)
        write_meta(
            d,
            {
                "kind": KIND,
                "key": key,
                "name": c.base_model,
                "dim": c.hidden_size,
                "max_length": c.max_query_length,
                "query_prefix": c.query_prefix,
                "inputs": names,
                **({"token_table": TOKEN_TABLE_FILE} if TOKEN_EMBEDS in names else {}),
                "outputs": list(OUTPUTS),
                "tokenizer": tok,
            },
        )

    return cache.write(key, fill)


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
        # is freed (me5-small's tokenizer alone holds ~280 MB)
        self.graph = OnnxGraph(directory, threads=threads, tokenize=False)
        meta = self.graph.meta
        if meta.get("kind") != KIND:
            raise ValueError(f"{directory}: not a phrase question graph")
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
    sig = files_signature(model_files(model_dir))
    record = cache.files_record(sig)
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
    (1.6 GB resident for me5-small in-process) then go back to the system before the index
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
