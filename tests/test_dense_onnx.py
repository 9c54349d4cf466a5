"""The dense bi-encoder on ONNX Runtime (anygrain.dense.onnx): the same question and passage
vectors, hits and scores as torch; the graph cache keyed by the weights (a changed weight
is exported again); an index whose graphs are cached opens without loading the torch
model, and searches in a process where torch and transformers cannot be imported."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer

from anygrain.corpus.records import SourceDocument
from anygrain.dense import opening as dense_opening
from anygrain.dense.index import DenseIndex
from anygrain.dense.onnx import (
    BIENCODER_CONFIG,
    OnnxBiEncoder,
    OnnxTextEncoder,
    export_biencoder,
    export_side,
    onnx_biencoder,
    passage_runtime,
)
from anygrain.encode import onnx_runtime
from anygrain.encode.onnx_runtime import GraphCache, Runtime
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.models.biencoder import BiEncoder
from anygrain.models.encoder import Pooling, TextEncoder

pytest.importorskip("onnxruntime")

TOL = 1e-4
TOPICS = [
    ("Paris", "Paris is the capital of France and sits on the Seine."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Python", "Python is a programming language created by Guido van Rossum."),
    ("Rust", "Rust is a systems programming language focused on memory safety."),
    ("Moon", "The Moon orbits the Earth roughly every 27 days."),
    ("Mars", "Mars is the fourth planet from the Sun, red with iron oxide, " * 12),
    ("Jazz", "Jazz originated in New Orleans in the early twentieth century."),
    ("A title long enough to take several word pieces of its own", "Tea is brewed."),
]
QUESTIONS = [
    "capital of France",
    "Who created the programming language Python?",
    "x",
    "A much longer question about the fourth planet from the Sun, asked with many more "
    "words than the others so that its batch is padded and truncated " * 3,
]


@pytest.fixture(scope="module", autouse=True)
def _own_cache(cache_root: Path) -> Path:
    """Every test here runs on the module's graph cache (conftest's ``cache_root``)."""
    return cache_root


@pytest.fixture(scope="module", autouse=True)
def _single_threaded() -> Iterator[None]:
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return tiny_tokenizer()


def _docs() -> list[SourceDocument]:
    return [SourceDocument(t.lower()[:8], t, x) for t, x in TOPICS]


def _model(tok, **kw) -> BiEncoder:  # type: ignore[no-untyped-def]
    m = tiny_biencoder(3, tokenizer=tok, max_length=48, **kw)
    m.config.question.prefix, m.config.passage.prefix = "query: ", "passage: "
    m.question.config, m.passage.config = m.config.question, m.config.passage
    return m


@pytest.fixture(scope="module")
def model_dir(tok, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return _model(tok).save(tmp_path_factory.mktemp("biencoder") / "m")


@pytest.fixture(scope="module")
def index_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "dense"
    Index.build(_docs(), kind="dense", out=out, model=str(model_dir), progress=False, lang="en")
    return out


def _load(path: Path, runtime: str, **options: object) -> DenseIndex:
    idx = Index.load(path, runtime=runtime, **options)
    assert isinstance(idx, DenseIndex)
    return idx


def test_config_name_is_the_biencoders() -> None:
    from anygrain.models.biencoder import MODEL_CONFIG

    assert BIENCODER_CONFIG == MODEL_CONFIG


@pytest.mark.parametrize(
    "kw",
    [{}, {"shared": False}, {"pooling": Pooling.CLS, "normalize": False}],
    ids=["shared-mean-normalized", "separate", "cls"],
)
def test_onnx_gives_the_torch_vectors(tok, kw: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    m = _model(tok, **kw)
    cache = GraphCache.default()
    r = onnx_biencoder(m, cache)
    graphs = export_biencoder(m, cache)
    # a shared model pooling alike on both sides has one graph for both
    assert (graphs["question"] == graphs["passage"]) is m.config.shared
    assert np.abs(m.encode_questions(QUESTIONS) - r.encode_questions(QUESTIONS)).max() < TOL
    texts, titles = [x for _, x in TOPICS], [t for t, _ in TOPICS]
    for batch in (3, 64):
        want = m.encode_passages(texts, titles, batch_size=batch)
        got = r.encode_passages(texts, titles, batch_size=batch)
        assert got.dtype == np.float32 and np.abs(want - got).max() < TOL
    # without titles (a corpus without them), truncated at the passage length
    assert np.abs(m.encode_passages(texts) - r.encode_passages(texts)).max() < TOL


def test_search_hits_and_scores_agree(index_dir: Path) -> None:
    t, o = _load(index_dir, "torch"), _load(index_dir, "onnx")
    assert t.runtime is Runtime.TORCH and o.runtime is Runtime.ONNX
    assert isinstance(o.questions, OnnxBiEncoder)
    assert np.abs(t.encode_queries(QUESTIONS) - o.encode_queries(QUESTIONS)).max() < TOL
    ht, ho = t.search(QUESTIONS, 5), o.search(QUESTIONS, 5)
    for a, b in zip(ht, ho, strict=True):
        assert [h.passage_row for h in a] == [h.passage_row for h in b]
        assert np.allclose([h.score for h in a], [h.score for h in b], atol=TOL, rtol=0)


def test_passages_on_onnx_are_the_torch_vectors(index_dir: Path) -> None:
    """A build's stored vectors (auto: ONNX Runtime) are the torch model's to 1e-4, with
    the long passage run in parts (RUN_TOKENS)."""
    t = _load(index_dir, "torch")
    want = t.model.encode_passages(t.corpus.texts(), t.corpus.titles())
    assert np.abs(t.vectors.concatenate() - want).max() < TOL
    assert isinstance(t.passage_encoder(runtime="torch"), BiEncoder)
    enc = t.passage_encoder(runtime="auto")
    assert isinstance(enc, OnnxBiEncoder)
    got = enc.encode_passages(t.corpus.texts(), t.corpus.titles(), batch_size=64)
    assert np.abs(got - want).max() < TOL


def test_passage_runtime_policy() -> None:
    assert passage_runtime("auto", None) is Runtime.ONNX  # the faster here, same vectors
    assert passage_runtime("onnx", None) is Runtime.ONNX
    assert passage_runtime("onnx", "cpu", executor="local") is Runtime.ONNX
    assert passage_runtime("torch", None) is Runtime.TORCH
    assert passage_runtime("auto", None, bf16=True) is Runtime.TORCH  # bfloat16: torch only
    assert passage_runtime(None, "cpu", executor="ray") is Runtime.TORCH  # actors load torch
    with pytest.raises(AnygrainError, match="bf16"):
        passage_runtime("onnx", None, bf16=True)


def test_add_encodes_new_passages_as_torch(index_dir: Path, tmp_path: Path) -> None:
    from anygrain.index.updater import add_documents

    mine = tmp_path / "dense"
    shutil.copytree(index_dir, mine)
    new = [
        SourceDocument("tea2", "Tea", "Green tea is not oxidised."),
        SourceDocument("mars2", "Mars", TOPICS[5][1]),  # long: truncated alike
    ]
    add_documents(mine, new)
    t = _load(mine, "torch")
    assert len(t.corpus) == len(TOPICS) + 2
    want = t.model.encode_passages(t.corpus.texts(), t.corpus.titles())
    assert np.abs(t.vectors.concatenate() - want).max() < TOL


def test_a_changed_weight_is_exported_again(tok) -> None:  # type: ignore[no-untyped-def]
    m = _model(tok)
    cache = GraphCache.default()
    first = export_side(m, "question", cache)
    assert export_side(m, "question", cache) == first  # unchanged weights: the same graph
    with torch.no_grad():
        w = m.question.model.encoder.layer[-1].output.dense.bias  # type: ignore[union-attr, index]
        w.add_(torch.randn_like(w))
    second = export_side(m, "question", cache)
    assert second != first and cache.has(second.name)
    got = OnnxBiEncoder({"question": second, "passage": second}, _config(m))
    assert np.abs(m.encode_questions(QUESTIONS) - got.encode_questions(QUESTIONS)).max() < TOL
    stale = OnnxBiEncoder({"question": first, "passage": first}, _config(m))
    diff = np.abs(stale.encode_questions(QUESTIONS) - got.encode_questions(QUESTIONS)).max()
    assert diff > 1e-3  # the stale graph would have been wrong


def _config(m: BiEncoder):  # type: ignore[no-untyped-def]
    from anygrain.dense.onnx import runner_config

    return runner_config(m, m.passage_fingerprint())


def test_a_cached_graph_opens_without_loading_the_model(
    index_dir: Path, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files table: a model whose files are unchanged opens without being loaded; one
    saved again (question weights changed, passage side the same) is loaded, checked and
    exported again."""
    _load(index_dir, "onnx")  # exports (if needed) and records the index's copy
    loads: list[object] = []
    real = dense_opening.open_model
    monkeypatch.setattr(
        dense_opening, "open_model", lambda *a, **k: loads.append(a) or real(*a, **k)
    )
    cached = _load(index_dir, "auto")
    assert loads == [] and cached._model is None and cached.runtime is Runtime.ONNX
    t = _load(index_dir, "torch")
    assert np.abs(t.encode_queries(QUESTIONS) - cached.encode_queries(QUESTIONS)).max() < TOL
    # the model still loads on demand, from a graph-only open
    assert cached.model.passage_fingerprint() == t.model.config.passage_fingerprint

    # a model given at open time, saved as a separate question side and tuned
    mine = tmp_path / "model"
    shutil.copytree(model_dir, mine)
    first = _load(index_dir, "onnx", model=str(mine))
    again = _load(index_dir, "onnx", model=str(mine))
    assert again._model is None
    m = BiEncoder.load(mine)
    q = copy.deepcopy(m.question.model)
    with torch.no_grad():
        bias = q.encoder.layer[0].output.dense.bias  # type: ignore[union-attr, index]
        bias.add_(torch.randn_like(bias))  # not a constant: LayerNorm would take it out
    m.config.shared = False
    tuned = BiEncoder(
        TextEncoder(q, m.question.tokenizer, m.config.question),
        TextEncoder(m.passage.model, m.passage.tokenizer, m.config.passage),
        m.config,
    )
    tuned.save(mine)
    n = len(loads)
    changed = _load(index_dir, "onnx", model=str(mine))
    assert len(loads) == n + 1 and changed._model is not None  # loaded and checked again
    assert isinstance(changed.questions, OnnxBiEncoder) and isinstance(
        first.questions, OnnxBiEncoder
    )
    assert changed.questions.question.graph.directory != first.questions.question.graph.directory
    want = tuned.encode_questions(QUESTIONS)
    assert np.abs(changed.encode_queries(QUESTIONS) - want).max() < TOL
    assert np.abs(first.encode_queries(QUESTIONS) - want).max() > 1e-3


def test_hybrid_takes_the_runtime(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "hybrid"
    Index.build(_docs(), kind="hybrid", out=out, model=str(model_dir), progress=False, lang="en")
    t, o = Index.load(out, runtime="torch"), Index.load(out, runtime="onnx")
    assert t.dense.runtime is Runtime.TORCH and o.dense.runtime is Runtime.ONNX  # type: ignore[attr-defined]
    for a, b in zip(t.search(QUESTIONS, 4), o.search(QUESTIONS, 4), strict=True):
        assert [h.passage_row for h in a] == [h.passage_row for h in b]
        assert np.allclose([h.score for h in a], [h.score for h in b], atol=TOL, rtol=0)


BLOCK = """
import importlib.abc, sys

class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError("No module named " + repr(name) + " (blocked by the test)")
        return None

sys.meta_path.insert(0, _Missing())
import runpy
sys.argv[0] = "anygrain"
runpy.run_module("anygrain.cli", run_name="__main__")
"""


def test_search_without_torch_once_the_graph_is_cached(index_dir: Path, xdg: Path) -> None:
    t = _load(index_dir, "torch")
    _load(index_dir, "auto")  # exports the graphs and records the model's files
    question = "Who created Python?"
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg), COLUMNS="200", NO_COLOR="1")
    r = subprocess.run(
        [sys.executable, "-c", BLOCK, "search", str(index_dir), question, "-k", "3", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    hits = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    want = t.search([question], 3)[0]
    assert [h["passage_row"] for h in hits] == [h.passage_row for h in want]
    assert np.allclose([h["score"] for h in hits], [h.score for h in want], atol=TOL, rtol=0)


def test_an_unexportable_model_falls_back_to_torch_under_auto(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """auto warns and keeps torch when the graph cannot be made; onnx says why."""
    monkeypatch.setattr(onnx_runtime, "default_cache_root", lambda: tmp_path / "empty")

    def broken(*a: object, **k: object) -> None:
        raise RuntimeError("exporter failed")

    monkeypatch.setattr("anygrain.encode.onnx_runtime.export_graph", broken)
    with pytest.warns(UserWarning, match="exporter failed"):
        idx = _load(index_dir, "auto")
    assert idx.runtime is Runtime.TORCH
    with pytest.raises(AnygrainError, match="--runtime torch"):
        _load(index_dir, "onnx")


def test_the_runner_refuses_a_graph_pooling_otherwise(tok) -> None:  # type: ignore[no-untyped-def]
    m = _model(tok)
    d = export_side(m, "passage", GraphCache.default())
    from anygrain.encode.onnx_runtime import OnnxGraph
    from anygrain.models.encoder import EncoderConfig

    with pytest.raises(ValueError, match="pools"):
        OnnxTextEncoder(OnnxGraph(d, tokenize=False), EncoderConfig(Pooling.CLS, True, "", 8))


def test_build_and_add_take_the_runtime(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runtime`` of a build and of ``add`` picks what encodes the passages; both write
    the same vectors (to 1e-4), and neither is recorded."""
    from anygrain.index.updater import add_documents

    onnx_calls: list[str] = []
    real = OnnxTextEncoder.encode
    monkeypatch.setattr(
        OnnxTextEncoder,
        "encode",
        lambda self, t, *a, **k: onnx_calls.append(self.side) or real(self, t, *a, **k),
    )
    built = {}
    for runtime in ("torch", "onnx"):
        onnx_calls.clear()
        out = tmp_path / runtime
        opts = {"model": str(model_dir), "progress": False, "lang": "en", "runtime": runtime}
        Index.build(_docs()[:5], kind="dense", out=out, **opts)  # type: ignore[arg-type]
        add_documents(out, _docs()[5:], runtime=runtime)
        assert ("passage" in onnx_calls) is (runtime == "onnx")
        built[runtime] = _load(out, "torch")
        assert "runtime" not in json.dumps(built[runtime].settings)
    t, o = built["torch"].vectors.concatenate(), built["onnx"].vectors.concatenate()
    assert t.shape == (len(TOPICS), 32) and np.abs(t - o).max() < TOL
