"""The reader on ONNX Runtime: the same logits, spans and answers as torch; the graph cache
keyed by the weights (a changed reader is exported again, an unchanged one is found without
loading it); span decoding in NumPy against brute force."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from reader_helpers import tiny_reader

from anygrain.encode.onnx_runtime import GraphCache
from anygrain.hits.hit import Hit, Unit
from anygrain.reader import Reader, ReaderConfig, read_many
from anygrain.reader.answering import ReadSettings, answer_hits, load_reader_for
from anygrain.reader.features import collate
from anygrain.reader.onnx import OnnxReader, load_reader, model_files, reader_key
from anygrain.reader.packed import PACKED_READER_CONFIG, PackedReaderInfo
from anygrain.reader.read import windows_of
from anygrain.reader.spans import best_span_bruteforce, best_spans_array, top_spans

pytestmark = pytest.mark.usefixtures("torch_one_thread")
pytest.importorskip("onnxruntime")

PASSAGES = [
    (
        "Loops",
        "The break statement exits the nearest enclosing loop. The continue statement "
        "skips to the next iteration. " * 3,
    ),
    ("Operators", "The '@' (at) operator is used for matrix multiplication in Python."),
    ("Bowl", "The Denver Broncos represented the AFC at Super Bowl 50. They won it."),
]
QUESTIONS = ["What exits a loop?", "Which operator multiplies matrices?", "Who won?"]
FP32 = ReadSettings(passages=3, retriever_weight=0.5, bf16=False)


def _hits() -> list[Hit]:
    return [
        Hit(Unit.PASSAGE, 3.0 - i, i, f"p{i}", f"d{i}", t, x) for i, (t, x) in enumerate(PASSAGES)
    ]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random reader saved to disk (short windows: the first passage is read in
    several)."""
    rc = ReaderConfig(base_model="tiny", max_length=48, max_question_length=16, stride=8)
    out = tmp_path_factory.mktemp("reader") / "reader"
    tiny_reader(rc).save(out)
    return out


@pytest.fixture
def cache(tmp_path: Path) -> GraphCache:
    return GraphCache(tmp_path / "onnx")


def test_logits_equal_torch(saved: Path, cache: GraphCache) -> None:
    torch_reader = Reader.load(saved)
    onnx_reader = load_reader(saved, "onnx", cache=cache)
    assert isinstance(onnx_reader, OnnxReader) and onnx_reader.config == torch_reader.config
    hits = _hits()
    windows = windows_of(
        torch_reader,
        [q for q in QUESTIONS for _ in hits],
        [h.text for _ in QUESTIONS for h in hits],
        [h.title for _ in QUESTIONS for h in hits],
    )
    assert len({len(w) for w in windows}) > 1  # padded: the general masking is exercised
    batch = collate(windows, torch_reader.tokenizer.pad_token_id)
    with torch_reader.reading():
        want = torch_reader.window_logits(batch)
    got = onnx_reader.window_logits(batch)
    real = batch.attention_mask.numpy().astype(bool)
    np.testing.assert_allclose(got.start[real], want.start[real], atol=1e-4)
    np.testing.assert_allclose(got.end[real], want.end[real], atol=1e-4)
    np.testing.assert_allclose(got.selection, want.selection, atol=1e-4)


def test_answers_equal_torch(saved: Path, cache: GraphCache) -> None:
    torch_reader = Reader.load(saved)
    onnx_reader = load_reader(saved, "onnx", cache=cache)
    hits = [_hits()] * len(QUESTIONS)
    want = answer_hits(torch_reader, QUESTIONS, hits, k=3, settings=FP32)
    got = answer_hits(onnx_reader, QUESTIONS, hits, k=3, settings=FP32)
    for w, g in zip(want, got, strict=True):
        assert [(h.passage_id, h.span) for h in g] == [(h.passage_id, h.span) for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4)
        assert [h.reader_score for h in g] == pytest.approx([h.reader_score for h in w], abs=1e-4)
    a = read_many(torch_reader, QUESTIONS, hits)
    b = read_many(onnx_reader, QUESTIONS, hits)
    assert [(x.text, x.span, x.passage_index) for x in b] == [
        (x.text, x.span, x.passage_index) for x in a
    ]
    assert [x.score for x in b] == pytest.approx([x.score for x in a], abs=1e-4)
    assert [x.selection_prob for x in b] == pytest.approx([x.selection_prob for x in a], abs=1e-4)


def test_unchanged_reader_found_without_loading_it(
    saved: Path, cache: GraphCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_reader(saved, "onnx", cache=cache)
    assert isinstance(first, OnnxReader)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the reader was loaded although its graph is cached")

    monkeypatch.setattr(Reader, "load", refuse)
    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: False)
    again = load_reader(saved, "auto", cache=cache)
    assert isinstance(again, OnnxReader)
    assert again.graph.directory == first.graph.directory


def test_changed_weights_export_again(saved: Path, tmp_path: Path, cache: GraphCache) -> None:
    changed = tmp_path / "changed"
    reader = Reader.load(saved)
    first = load_reader(saved, "onnx", cache=cache)
    assert isinstance(first, OnnxReader)
    with torch.no_grad():
        reader.qa.bias += torch.tensor([0.5, -0.25])
    reader.save(changed)
    second = load_reader(changed, "onnx", cache=cache)
    assert isinstance(second, OnnxReader)
    assert second.graph.directory != first.graph.directory
    assert second.graph.directory.name == reader_key(Reader.load(changed))
    # the new graph computes the new weights
    windows = windows_of(reader, QUESTIONS[:1], [PASSAGES[2][1]], [PASSAGES[2][0]])
    batch = collate(windows, reader.tokenizer.pad_token_id)
    with reader.reading():
        want = reader.window_logits(batch)
    np.testing.assert_allclose(second.window_logits(batch).start, want.start, atol=1e-4)
    old = first.window_logits(batch).start
    assert np.abs(old - want.start).max() > 0.1
    # saved again over the same directory: its files changed, so it is loaded and checked
    with torch.no_grad():
        reader.qa.bias -= torch.tensor([0.5, -0.25])
    reader.save(changed)
    third = load_reader(changed, "onnx", cache=cache)
    assert isinstance(third, OnnxReader) and third.graph.directory == first.graph.directory


def test_runtime_choice(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(load_reader(saved, "torch"), Reader)
    assert isinstance(load_reader_for(None, saved, "torch"), Reader)
    assert isinstance(load_reader_for(None, saved, "onnx"), OnnxReader)
    # auto: torch where the CPU has native bfloat16 (faster there), else ONNX Runtime
    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: True)
    assert isinstance(load_reader(saved, "auto"), Reader)
    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: False)
    assert isinstance(load_reader(saved, "auto"), OnnxReader)
    given = Reader.load(saved)
    assert load_reader_for(None, given, "onnx") is given  # a reader object reads as it is


def test_packed_reader_files_include_the_backbone(tmp_path: Path) -> None:
    from anygrain.models.resolve import resolve_model

    info = PackedReaderInfo("minilm", "f0", "f1", bits=4, group=64)
    (tmp_path / PACKED_READER_CONFIG).write_text(__import__("json").dumps(info.to_dict()))
    assert model_files(tmp_path) == [tmp_path, resolve_model("minilm")[0]]


def test_numpy_span_decoding_matches_bruteforce() -> None:
    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(400):
        n, length = int(rng.integers(1, 5)), int(rng.integers(1, 40))
        max_len = int(rng.integers(1, 12))
        s = rng.normal(size=(n, length)).astype(np.float32)
        e = rng.normal(size=(n, length)).astype(np.float32)
        if trial % 5 == 0:  # ties: equal logits everywhere
            s, e = np.round(s), np.round(e)
        density = [0.0, 0.1, 0.5, 1.0][trial % 4]
        so = rng.random((n, length)) < density
        eo = rng.random((n, length)) < density
        starts, ends, scores = best_spans_array(s, e, so, eo, max_len)
        t_starts, t_ends, t_scores = top_spans(s, e, so, eo, max_len, 3)
        assert (t_starts[:, 0] == starts).all() and (t_ends[:, 0] == ends).all()
        for r in range(n):
            ref = best_span_bruteforce(s[r], e[r], so[r], eo[r], max_len)
            if ref is None:
                assert starts[r] == -1 and ends[r] == -1 and np.isneginf(scores[r])
                continue
            assert (int(starts[r]), int(ends[r])) == ref[:2]  # ties: smaller start, shorter
            assert float(scores[r]) == pytest.approx(ref[2], abs=1e-5)
            assert (t_scores[r, :-1] >= t_scores[r, 1:]).all()
            checked += 1
    assert checked > 250
