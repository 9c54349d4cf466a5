"""Adaptive re-scoring (``rescore_margin``) and the re-scoring an index records (issue 37).

With ``rescore=N`` and a margin, a search re-encodes its first passage and, of the next
``N - 1``, only those whose first-stage score is within the margin of the first's: the rows
re-encoded must be exactly that set (checked against the first stage's own ranking), a
margin of 0 must give what ``rescore=1`` gives and the top of the range what ``N`` all give.
A PQ-coded build records the default re-scoring; other codes record none; a refilter keeps
its source's; explicit settings win.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_phrase_helpers import RESCORE_QUESTIONS, fixture_index

from anygrain.errors import AnygrainError
from anygrain.phrase import PhraseIndex
from anygrain.phrase import rescore as rescore_module
from anygrain.phrase.rescore import TORCH_FROM, first_rows
from anygrain.phrase.rescore_settings import (
    DEFAULT_RESCORE,
    DEFAULT_RESCORE_MARGIN,
    RESCORE_MARGIN_RANGE,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = RESCORE_QUESTIONS


def test_first_rows_keeps_the_first_and_those_within_the_margin() -> None:
    rows = np.array([4, 4, 7, 2, 7, 9, 1])
    scores = np.array([10.0, 9.5, 9.0, 8.2, 8.0, 7.9, 7.0])
    assert first_rows(rows, 4) == [4, 7, 2, 9]
    assert first_rows(rows, 4, scores=scores, margin=None) == [4, 7, 2, 9]
    assert first_rows(rows, 4, scores=scores, margin=0.0) == [4]
    assert first_rows(rows, 4, scores=scores, margin=1.0) == [4, 7]  # 2 is 1.8 below
    assert first_rows(rows, 4, scores=scores, margin=2.1) == [4, 7, 2, 9]
    # a skipped (deleted) first row: the first live one is the reference
    assert first_rows(rows, 3, {4}, scores=scores, margin=0.9) == [7, 2]
    assert first_rows(rows[:0], 3, scores=scores[:0], margin=1.0) == []


def test_margin_range_is_checked() -> None:
    for bad in (-0.1, float("nan"), float("inf"), 1001.0):
        with pytest.raises(AnygrainError, match="rescore margin"):
            RESCORE_MARGIN_RANGE.check(bad)


@pytest.fixture(scope="module")
def pq(model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory) -> PhraseIndex:
    """A PQ-coded index keeping a quarter of the vectors, with the recorded defaults."""
    root = tmp_path_factory.mktemp("rescore-margin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS: few training vectors
        return PhraseIndex.build_from(
            f"squad:{squad}", root / "pq", model=model_dir, compress="pq", keep=0.25, progress=False
        )


def _rescored_rows(
    index: PhraseIndex, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[list[set[int]], list[Any]]:
    """The rows each search re-encoded (one search per question) and the hits."""
    seen: list[set[int]] = []
    real = rescore_module.encode_rows

    def spy(idx: Any, rows: Any, **kw: Any) -> Any:
        seen.append({int(r) for r in rows})
        return real(idx, rows, **kw)

    monkeypatch.setattr(rescore_module, "encode_rows", spy)
    hits = [index.search([q], 3, **options)[0] for q in QUESTIONS]
    monkeypatch.setattr(rescore_module, "encode_rows", real)
    return seen, hits


def _first_stage(index: PhraseIndex) -> list[Any]:
    """Each question's first-stage phrases, as re-scoring's first stage ranks them."""
    qs, qe = index.encode(QUESTIONS).vectors
    fusion = index.search_fusion(None)
    lex = index.lexical.queries(QUESTIONS, fusion) if fusion and index.lexical else None
    return index.search_phrases(qs, qe, top_k=100, lexical=lex, fusion=fusion if lex else None)


def test_the_rows_re_encoded_are_the_first_and_those_within_the_margin(
    pq: PhraseIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _first_stage(pq)
    gaps = []
    for p in first:
        _, at = np.unique(pq.table.row[p.start], return_index=True)
        best = np.sort(p.score[np.sort(at)])[::-1]
        gaps.extend((best[0] - best[1:3]).tolist())
    margin = float(np.median(gaps))  # some second passages in, some out
    seen, _ = _rescored_rows(pq, monkeypatch, rescore=3, rescore_margin=margin)
    sizes = set()
    for i, p in enumerate(first):
        want = first_rows(pq.table.row[p.start], 3)
        scores: dict[int, float] = {}
        for r, s in zip(pq.table.row[p.start].tolist(), p.score.tolist(), strict=True):
            scores.setdefault(r, s)
        keep = {want[0]} | {r for r in want[1:] if scores[want[0]] - scores[r] <= margin}
        assert seen[i] == keep
        sizes.add(len(keep))
    assert len(sizes) > 1  # the margin decided something


def test_margin_0_is_rescore_1_and_the_top_of_the_range_is_all(
    pq: PhraseIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = pq.search(QUESTIONS, 3, rescore=1)
    zero = pq.search(QUESTIONS, 3, rescore=3, rescore_margin=0.0)
    for a, b in zip(one, zero, strict=True):
        assert [(h.passage_row, h.span) for h in a[:1]] == [(h.passage_row, h.span) for h in b[:1]]
    seen, _ = _rescored_rows(pq, monkeypatch, rescore=3, rescore_margin=RESCORE_MARGIN_RANGE.high)
    want = [set(first_rows(pq.table.row[p.start], 3)) for p in _first_stage(pq)]
    assert seen == want and max(len(s) for s in seen) > 1


def test_a_pq_build_records_the_default_rescoring(
    pq: PhraseIndex, model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    s = pq.manifest["settings"]
    assert (s["compress"], s["rescore"], s["rescore_margin"], s["rescore_tokens"]) == (
        "pq",
        DEFAULT_RESCORE,
        DEFAULT_RESCORE_MARGIN,
        "all",
    )
    assert pq.rescore == DEFAULT_RESCORE and pq.rescoring.margin == DEFAULT_RESCORE_MARGIN
    assert "OPQ" not in s["factory"] and "PQ" in s["factory"]
    sq8 = fixture_index(squad, model_dir, tmp_path / "sq8", compress="sq8")
    off = fixture_index(squad, model_dir, tmp_path / "off", compress="pq", rescore=0)
    fixture_index(
        squad,
        model_dir,
        tmp_path / "mine",
        compress="sq4",
        rescore=3,
        rescore_margin=0.5,
        rescore_tokens="stored",
    )
    assert sq8.rescore == 0 and sq8.manifest["settings"].get("rescore_margin") is None
    assert off.rescore == 0
    m = json.loads((tmp_path / "mine" / "index.json").read_text())["settings"]
    assert (m["rescore"], m["rescore_margin"], m["rescore_tokens"]) == (3, 0.5, "stored")
    with pytest.raises(AnygrainError, match="rescore margin"):
        PhraseIndex.build_from(
            f"squad:{squad}", tmp_path / "bad", model=model_dir, rescore_margin=-1.0
        )


def test_torch_re_encodes_a_batch_and_the_graph_a_few(
    pq: PhraseIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On ONNX Runtime, a few passages go to the model's graph (no torch import for a
    one-question search); a batch of TORCH_FROM goes to the torch model, in bf16 where the
    index records it."""
    from anygrain.encode.onnx_runtime import Runtime

    class Graph:
        runtime = "onnx"

        def __init__(self) -> None:
            self.calls: list[int] = []

        def encode_passages(self, texts: Any, titles: Any, **kw: Any) -> Any:
            assert not kw.get("bf16")  # the graph runs float32
            self.calls.append(len(texts))
            return pq.model.encode_passages(texts, titles, **kw)

    graph = Graph()
    monkeypatch.setattr(PhraseIndex, "runtime", property(lambda self: Runtime.ONNX))
    monkeypatch.setattr(PhraseIndex, "model_loaded", property(lambda self: False))
    monkeypatch.setattr(pq, "graph_passages", lambda: graph)
    assert rescore_module.passage_encoder(pq, 2) is graph
    assert rescore_module.passage_encoder(pq, TORCH_FROM) is pq.model
    assert rescore_module.passage_encoder(pq, 2, bf16=True) is pq.model
    pq.search(QUESTIONS[:1], 1, rescore=1)
    assert graph.calls == [1]
    monkeypatch.setattr(pq, "requested_runtime", Runtime.ONNX)
    assert rescore_module.passage_encoder(pq, TORCH_FROM) is graph


def test_the_pq_build_keeps_its_rescoring_through_updates(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    """The 7 KB build (PQ codes, keep 0.25, adaptive re-scoring over all tokens recorded):
    add, delete, compact and verify keep the recorded re-scoring, and searches use it."""
    from test_phrase_helpers import PARAGRAPHS

    from anygrain.api import add_documents, compact_index, delete_documents, verify_index
    from anygrain.corpus.records import SourceDocument
    from anygrain.index.base import Index

    idx = fixture_index(squad, model_dir, tmp_path / "d", compress="pq", keep=0.25)
    want = (DEFAULT_RESCORE, DEFAULT_RESCORE_MARGIN, "all")
    s = idx.manifest["settings"]
    assert (s["compress"], s["keep"]) == ("pq", 0.25)

    def recorded(i: Any) -> tuple[Any, ...]:
        return (i.rescore, i.rescoring.margin, i.rescoring.token_choice.value)

    assert recorded(idx) == want and verify_index(idx.path).problems == []
    docs = [SourceDocument(f"new{i}", t, x) for i, (t, x, _) in enumerate(PARAGRAPHS[:2])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        added = add_documents(idx.path, docs, progress=False)
    assert recorded(added) == want
    delete_documents(idx.path, ["new1"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compacted = compact_index(idx.path, progress=False)
    assert recorded(compacted) == want and verify_index(idx.path).problems == []
    again = Index.load(idx.path)
    assert isinstance(again, PhraseIndex) and recorded(again) == want
    by_default = again.search(QUESTIONS, 3)
    given = again.search(
        QUESTIONS,
        3,
        rescore=DEFAULT_RESCORE,
        rescore_margin=DEFAULT_RESCORE_MARGIN,
        rescore_tokens="all",
    )
    assert [[(h.passage_row, h.span) for h in hs] for hs in by_default] == [
        [(h.passage_row, h.span) for h in hs] for hs in given
    ]
    assert all(h.doc_id != "new1" for hs in by_default for h in hs)


def test_a_server_loads_the_re_encoding_model_before_its_first_request(pq: PhraseIndex) -> None:
    """``prepare_serving`` (what ``anygrain serve`` calls at start-up) loads the torch model a
    re-scoring index re-encodes with (here as an index on ONNX Runtime holds it: a loader not
    yet called); an index asked for ``runtime="onnx"`` or re-scoring nothing leaves it."""
    from anygrain.encode.onnx_runtime import Runtime
    from anygrain.index.base import Index

    def unloaded(**options: Any) -> PhraseIndex:
        idx = Index.load(pq.path, **options)
        assert isinstance(idx, PhraseIndex)
        model, calls = idx.model, []
        idx._model, idx._load_model = None, lambda: calls.append(1) or model
        return idx

    idx = unloaded()
    assert idx.rescore == DEFAULT_RESCORE and not idx.model_loaded
    idx.prepare_serving()
    assert idx.model_loaded
    assert rescore_module.passage_encoder(idx, 1) is idx.model  # small batches too, now
    onnx = unloaded(runtime="onnx")
    onnx.requested_runtime = Runtime.ONNX
    onnx.prepare_serving()
    assert not onnx.model_loaded
    off = unloaded()
    off.record = dataclasses.replace(
        off.record, rescoring=dataclasses.replace(off.record.rescoring, passages=0)
    )
    off.prepare_serving()
    assert not off.model_loaded
