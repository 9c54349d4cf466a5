"""DenseIndex end to end: build, load by kind, search, model checks, IVF options, resumable builds."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer

from anygrain.corpus.records import SourceDocument
from anygrain.dense import build as dense_build
from anygrain.dense import opening as dense_opening
from anygrain.dense.index import DenseIndex, DenseSettings, write_dense_index
from anygrain.dense.onnx import OnnxTextEncoder
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.manifest import read_manifest
from anygrain.index.registry import IndexKind
from anygrain.index.settings import BuildOptions
from anygrain.models.biencoder import BiEncoder

TOPICS = [
    ("Paris", "Paris is the capital of France and sits on the Seine."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Python", "Python is a programming language created by Guido van Rossum."),
    ("Rust", "Rust is a systems programming language focused on memory safety."),
    ("Moon", "The Moon orbits the Earth roughly every 27 days."),
    ("Mars", "Mars is the fourth planet from the Sun, red with iron oxide."),
    ("Jazz", "Jazz originated in New Orleans in the early twentieth century."),
    ("Tea", "Tea is brewed from the leaves of Camellia sinensis."),
]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


def _docs(n_copies: int = 1) -> list[SourceDocument]:
    return [
        SourceDocument(f"{t.lower()}-{c}", t, f"{x} Copy {c}.")
        for c in range(n_copies)
        for t, x in TOPICS
    ]


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok) -> BiEncoder:  # type: ignore[no-untyped-def]
    return tiny_biencoder(0, tokenizer=tok)


@pytest.fixture(scope="module")
def built(tmp_path_factory, model: BiEncoder) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("idx") / "dense"
    Index.build(
        _docs(), kind="dense", out=out, model=model, progress=False, shard_size=3, lang="en"
    )
    return out


def test_build_layout_and_manifest(built: Path, model: BiEncoder) -> None:
    m = read_manifest(built)
    assert m["kind"] == "dense" and m["corpus"]["path"] == "corpus"
    assert m["model"]["fingerprint"] == model.passage_fingerprint()
    s = m["settings"]["dense"]
    assert (
        s["factory"] == "Flat"
        and s["dim"] == 32
        and s["dtype"] == "float32"
        and s["n_vectors"] == 8
    )
    assert set(s["timings"]) == {"save_model_seconds", "encode_seconds", "faiss_seconds"}
    for rel in (
        "corpus/corpus.json",
        "dense/model/anygrain_model.json",
        "dense/vectors/shards.json",
        "dense/faiss.index",
        "dense/dense.json",
    ):
        assert (built / rel).exists(), rel
    assert not list(built.parent.glob(".*partial*")), "partial vectors dir left behind"


def test_load_and_search(built: Path, model: BiEncoder) -> None:
    idx = Index.load(built)
    assert isinstance(idx, DenseIndex) and idx.kind is IndexKind.DENSE and len(idx.corpus) == 8
    queries = ["capital of France", "programming language", "red planet"]
    hits = idx.search(queries, k=5)
    assert [len(h) for h in hits] == [5, 5, 5]
    for hs in hits:
        assert all(isinstance(h, Hit) and h.unit is Unit.PASSAGE for h in hs)
        assert [h.score for h in hs] == sorted((h.score for h in hs), reverse=True)
        assert all(h.passage_id and h.text and h.title for h in hs)
    # Scores are the inner products of the model's vectors, in the store's rows.
    q = model.encode_questions(queries)
    p = model.encode_passages(idx.corpus.texts(), idx.corpus.titles())
    truth = np.argsort(-(q @ p.T), axis=1, kind="stable")[:, :5]
    assert [[h.passage_row for h in hs] for hs in hits] == truth.tolist()
    np.testing.assert_allclose([h.score for h in hits[0]], (q @ p.T)[0][truth[0]], atol=1e-5)
    assert idx.corpus.passage(hits[1][0].passage_row).text == hits[1][0].text
    rows, scores = idx.search_rows(queries, k=20, batch_size=2)
    assert rows.shape == (3, 20) and (rows[:, 8:] == -1).all()
    np.testing.assert_allclose(idx.score_rows(q, rows[:, :8]), scores[:, :8], atol=1e-5)
    assert idx.search([], k=3) == []
    assert idx.search_one("tea leaves", 2)[0].passage_row >= 0


def test_query_side_model_is_accepted_other_passage_side_refused(
    built: Path, model: BiEncoder, tok
) -> None:  # type: ignore[no-untyped-def]
    # A question encoder fine-tuned on its own (separate weights, same passage side) fits the index.
    q_tuned = tiny_biencoder(0, tokenizer=tok, shared=False)
    q_tuned.passage.model.load_state_dict(model.passage.model.state_dict())
    with_q = Index.load(built, model=q_tuned)
    assert isinstance(with_q, DenseIndex) and with_q.model is q_tuned
    other = tiny_biencoder(7, tokenizer=tok)
    with pytest.raises(IndexMismatchError, match="passage encoder"):
        Index.load(built, model=other)


def test_ivf_factory_and_nprobe(tmp_path: Path, model: BiEncoder) -> None:
    out = tmp_path / "ivf"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Index.build(
            _docs(40), kind="dense", out=out, model=model, factory="IVF4,Flat", progress=False
        )
    idx = Index.load(out)
    assert isinstance(idx, DenseIndex) and idx.faiss.ivf is not None and idx.faiss.nprobe == 2
    all_cells = idx.search(["capital of France"], k=10, nprobe=4)[0]
    flat_order = np.argsort(
        -(idx.encode_queries(["capital of France"]) @ idx.vectors.concatenate().T)[0], kind="stable"
    )
    assert {h.passage_row for h in all_cells} == set(flat_order[:10].tolist())
    assert len(idx.search(["capital of France"], k=10, nprobe=1)[0]) > 0
    with pytest.raises(AnygrainError, match="ef_search applies to HNSW"):
        idx.search(["x"], k=1, ef_search=10)


def test_impossible_factory_fails_before_encoding(
    tmp_path: Path, model: BiEncoder, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(dense_build, "encode_corpus", lambda *a, **k: pytest.fail("encoded anyway"))
    with pytest.raises(AnygrainError, match="needs at least 64 training vectors"):
        Index.build(
            _docs(),
            kind="dense",
            out=tmp_path / "x",
            model=model,
            factory="IVF64,Flat",
            progress=False,
        )
    assert not (tmp_path / "x").exists()


def test_interrupted_build_resumes(tmp_path: Path, model: BiEncoder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "idx"
    real = dense_build.encode_corpus

    def interrupted(*a, **kw):  # type: ignore[no-untyped-def]
        def stop(i: int, n: int) -> None:
            if i == 1:
                raise KeyboardInterrupt

        return real(*a, **kw, on_shard=stop)

    monkeypatch.setattr(dense_build, "encode_corpus", interrupted)
    with pytest.raises(KeyboardInterrupt):
        DenseIndex.build_from(_docs(), out, model=model, shard_size=3, progress=False)
    assert not out.exists()
    partial = out.with_name(".idx.vectors.partial")
    assert len(list(partial.glob("vectors-*.npy"))) == 2
    monkeypatch.setattr(dense_build, "encode_corpus", real)
    calls: list[int] = []
    orig = model.passage.encode
    monkeypatch.setattr(
        model.passage, "encode", lambda t, *a, **k: calls.append(len(t)) or orig(t, *a, **k)
    )
    # passages are encoded on ONNX Runtime by default (anygrain.dense.onnx): counted too
    onnx_encode = OnnxTextEncoder.encode
    monkeypatch.setattr(
        OnnxTextEncoder,
        "encode",
        lambda self, t, *a, **k: calls.append(len(t)) or onnx_encode(self, t, *a, **k),
    )
    idx = DenseIndex.build_from(_docs(), out, model=model, shard_size=3, progress=False)
    assert calls == [2] and not partial.exists()
    fresh = DenseIndex.build_from(
        _docs(), tmp_path / "fresh", model=model, shard_size=3, progress=False
    )
    np.testing.assert_array_equal(idx.vectors.concatenate(), fresh.vectors.concatenate())


def test_nested_write_for_hybrid(tmp_path: Path, model: BiEncoder) -> None:
    """A hybrid index keeps the corpus beside the dense part; the recorded path stays relative."""
    from anygrain.corpus.store import CorpusStore

    root = tmp_path / "hybrid"
    store = CorpusStore.build(_docs(), root / "corpus", progress=False)
    options = BuildOptions(progress=False)
    write_dense_index(root / "dense", store, model, DenseSettings(), options, subdir="part")
    m = read_manifest(root / "dense")
    assert m["corpus"]["path"] == "../corpus"
    moved = tmp_path / "moved"
    root.rename(moved)
    idx = DenseIndex.open(moved / "dense", read_manifest(moved / "dense"), subdir="part")
    assert len(idx.search(["Jazz"], 3)[0]) == 3
    assert json.loads((moved / "dense" / "part" / "dense.json").read_text())["subdir"] == "part"
    with pytest.raises(AnygrainError, match="no dense index under 'dense/'"):
        DenseIndex.open(moved / "dense", read_manifest(moved / "dense"))


ZH_DOCS = [
    SourceDocument("a", "城市", "北京是中国的首都。"),
    SourceDocument("b", "城市", "上海是中国最大的城市。"),
    SourceDocument("c", "动物", "熊猫生活在四川的山林里。"),
]


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_default_model_follows_the_corpus_language(
    tmp_path: Path, model: BiEncoder, monkeypatch, kind: str
) -> None:  # type: ignore[no-untyped-def]
    """No --model: Chinese gets the multilingual me5-small, English minilm; the name is
    recorded so the CLI can say which model encoded the corpus."""
    asked: list[str] = []

    def fake(name):  # type: ignore[no-untyped-def]
        if isinstance(name, BiEncoder):
            return name
        asked.append(str(name))
        return model  # stands in for the real encoder: only the choice is under test

    monkeypatch.setattr(dense_build, "as_biencoder", fake)
    monkeypatch.setattr(dense_opening, "as_biencoder", fake)
    # questions on torch: a graph cached for the fake under me5-small's files would open the
    # hybrid's dense part without asking for the model again
    monkeypatch.setattr("anygrain.encode.runtime.onnxruntime_installed", lambda: False)

    def name_of(idx: Index) -> str:
        dense = idx.dense if kind == "hybrid" else idx  # type: ignore[attr-defined]
        return str(dense.settings["model"]["name"])

    zh = Index.build(ZH_DOCS, kind=kind, out=tmp_path / "zh", progress=False)
    # asked to encode, then to open (the index refers to the named model, not a copy)
    assert asked == ["me5-small"] * 2 and name_of(zh) == "me5-small"
    en = Index.build(_docs(), kind=kind, out=tmp_path / "en", progress=False)
    assert asked[-1] == "minilm" and name_of(en) == "minilm"
    forced = Index.build(_docs(), kind=kind, out=tmp_path / "f", lang="zh", progress=False)
    assert asked[-1] == "me5-small" and name_of(forced) == "me5-small"
    named = Index.build(ZH_DOCS, kind=kind, out=tmp_path / "n", model="minilm", progress=False)
    assert asked[-1] == "minilm" and name_of(named) == "minilm"  # a named model is kept
