"""ONNX Runtime under the phrase model's question side (anygrain.encode.onnx_runtime,
anygrain.phrase.onnx): the same vectors, hits and scores as torch; the graph cache keyed by
the weights (a changed weight is exported again); and a search that imports neither torch
nor transformers once the graph is cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_phrase_helpers import PARAGRAPHS, make_tiny_model, write_squad

from anygrain.encode.onnx_runtime import GraphCache, Runtime, wants_onnx
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.onnx import (
    PACKED_CONFIG,
    OnnxQuestionEncoder,
    export_questions,
    onnx_questions,
)

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = [q for _, _, qas in PARAGRAPHS for q, _ in qas] + [
    "x",
    "A much longer question about the closest star system to the Solar System, asked "
    "with many more words than the others so that the batch is padded",
]
TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _own_cache(cache_root: Path) -> Path:
    """Every test here runs on the module's graph cache (conftest's ``cache_root``)."""
    return cache_root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def model_dir(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    # heads away from the identity, so the graph's heads are tested too
    with torch.no_grad():
        for head in (m.q_start_head, m.q_end_head):
            head.weight.add_(torch.randn_like(head.weight) * 0.1)
            head.bias.add_(torch.randn_like(head.bias) * 0.1)
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


@pytest.fixture(scope="module")
def index_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    squad = write_squad(tmp_path_factory.mktemp("squad") / "squad.json")
    out = tmp_path_factory.mktemp("idx") / "phrase"
    Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        progress=False,
        compress="none",
        keep=1.0,
    )
    return out


def _load(path: Path, runtime: str, **options: object) -> PhraseIndex:
    idx = Index.load(path, runtime=runtime, **options)
    assert isinstance(idx, PhraseIndex)
    return idx


def test_runtime_choice() -> None:
    assert not wants_onnx("torch", None)
    assert wants_onnx("auto", None) and wants_onnx("auto", "cpu") and wants_onnx(None, "auto")
    assert not wants_onnx("auto", "cuda")  # the graph runs on the CPU: a GPU keeps torch
    with pytest.raises(AnygrainError, match="runtime torch"):
        wants_onnx("onnx", "cuda")
    with pytest.raises(AnygrainError):
        wants_onnx("tensorrt", None)


def test_packed_config_name_is_the_packed_models() -> None:
    from anygrain.phrase.packed import PACKED_CONFIG as REAL

    assert PACKED_CONFIG == REAL


def test_onnx_gives_the_torch_vectors_hits_and_scores(index_dir: Path) -> None:
    t = _load(index_dir, "torch")
    o = _load(index_dir, "onnx")
    assert t.runtime is Runtime.TORCH and o.runtime is Runtime.ONNX
    assert isinstance(o.questions, OnnxQuestionEncoder)
    ts, te = t.encode_queries(QUESTIONS, batch_size=4)
    os_, oe = o.encode_queries(QUESTIONS, batch_size=4)
    assert np.abs(ts - os_).max() < TOL and np.abs(te - oe).max() < TOL
    for unit in (Unit.PHRASE, Unit.PASSAGE):
        ht = t.search(QUESTIONS, 5, unit=unit)
        ho = o.search(QUESTIONS, 5, unit=unit)
        for a, b in zip(ht, ho, strict=True):
            assert [(h.passage_row, h.span) for h in a] == [(h.passage_row, h.span) for h in b]
            assert np.allclose([h.score for h in a], [h.score for h in b], atol=TOL, rtol=0)


@pytest.mark.parametrize(
    "settings",
    [
        {"question_encoder": "shared", "question_pooling": "mean"},
        {"question_encoder": "shared", "question_pooling": "cls", "query_prefix": "query: "},
        {"question_encoder": "separate"},
    ],
    ids=["shared-mean", "shared-cls-prefix", "separate"],
)
def test_every_question_encoder_kind(tiny: Path, settings: dict[str, str]) -> None:
    torch.manual_seed(1)
    prefix = settings.pop("query_prefix", "")
    m = PhraseEncoder.from_pretrained(tiny, max_query_length=12, **settings)  # type: ignore[arg-type]
    m.config.query_prefix = prefix
    q = onnx_questions(m, GraphCache.default())
    ts, te = m.encode_questions(QUESTIONS, batch_size=3)
    os_, oe = q.encode_questions(QUESTIONS, batch_size=3)
    # max_query_length 12 truncates the long questions in both runtimes alike
    assert np.abs(ts - os_).max() < TOL and np.abs(te - oe).max() < TOL


def test_a_changed_weight_is_exported_again(model_dir: Path, tmp_path: Path) -> None:
    m = PhraseEncoder.load(model_dir)
    cache = GraphCache.default()
    first = export_questions(m, cache)
    assert export_questions(m, cache) == first  # unchanged weights: the same graph
    with torch.no_grad():
        w = m.questions[0].encoder.layer[0].attention.self.query.weight
        w.add_(torch.randn_like(w))
    second = export_questions(m, cache)
    assert second != first and cache.has(second.name)
    ts, te = m.encode_questions(QUESTIONS)
    os_, oe = OnnxQuestionEncoder(second).encode_questions(QUESTIONS)
    assert np.abs(ts - os_).max() < TOL and np.abs(te - oe).max() < TOL
    old_s, _ = OnnxQuestionEncoder(first).encode_questions(QUESTIONS)
    assert np.abs(old_s - os_).max() > 1e-3  # the stale graph would have been wrong


def test_a_model_saved_again_is_never_served_by_its_old_graph(
    index_dir: Path, model_dir: Path, tmp_path: Path
) -> None:
    """The files table: a model whose files are unchanged opens without being loaded; one
    saved again (question weights changed, phrase side the same) is loaded, checked and
    exported again."""
    import shutil

    mine = tmp_path / "model"
    shutil.copytree(model_dir, mine)
    first = _load(index_dir, "onnx", model=str(mine))
    again = _load(index_dir, "onnx", model=str(mine))
    assert again._model is None  # found by its files: torch model not loaded
    assert again.questions.graph.directory == first.questions.graph.directory
    m = PhraseEncoder.load(mine)
    with torch.no_grad():
        m.q_start_head.bias.add_(0.25)
    m.save(mine)
    changed = _load(index_dir, "onnx", model=str(mine))
    assert changed._model is not None  # loaded (and checked) again
    assert changed.questions.graph.directory != first.questions.graph.directory
    ts, _ = m.encode_questions(QUESTIONS)
    os_, _ = changed.encode_queries(QUESTIONS)
    assert np.abs(ts - os_).max() < TOL
    # the phrase model still loads on demand, from a graph-only open
    assert again.model.phrase_fingerprint() == first.model.phrase_fingerprint()


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


def test_a_large_model_is_exported_in_a_child_process(
    index_dir: Path, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the size threshold the graph is exported by ``python -m anygrain.phrase.onnx``:
    this process never loads the model, and the graph gives the torch path's hits."""
    import shutil

    import anygrain.phrase.opening as opening

    mine = tmp_path / "model"
    shutil.copytree(model_dir, mine)
    monkeypatch.setattr(opening, "CHILD_EXPORT_BYTES", 0)
    loads: list[object] = []
    real_open_model = opening.open_model
    monkeypatch.setattr(
        "anygrain.phrase.opening.open_model",
        lambda *a, **kw: loads.append(a) or real_open_model(*a, **kw),
    )
    onnx = _load(index_dir, "onnx", model=str(mine))
    assert loads == [] and onnx._model is None  # the child loaded and exported it
    t = _load(index_dir, "torch", model=str(mine))
    want, got = t.search(QUESTIONS, 3), onnx.search(QUESTIONS, 3)
    assert [[h.span for h in q] for q in got] == [[h.span for h in q] for q in want]


def test_search_without_torch_once_the_graph_is_cached(index_dir: Path, xdg: Path) -> None:
    t = _load(index_dir, "torch")
    _load(index_dir, "auto")  # exports the graph and records the model's files
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
    assert [(h["passage_row"], h["span"]) for h in hits] == [
        (h.passage_row, list(h.span or ())) for h in want
    ]
    assert np.allclose([h["score"] for h in hits], [h.score for h in want], atol=TOL, rtol=0)
    # --runtime torch cannot run where torch is missing: it says so, no silent ONNX
    r = subprocess.run(
        [sys.executable, "-c", BLOCK, "search", str(index_dir), question, "--runtime", "torch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode != 0


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_the_server_takes_the_runtime(index_dir: Path, runtime: str) -> None:
    pytest.importorskip("fastapi")
    from anygrain.serve.app import create_app

    app = create_app(index_dir, runtime=runtime, warm_up=False)
    assert app.state.service.index.runtime is Runtime(runtime)
