"""Fused sparse + dense phrase scores (anygrain.phrase.lexical) against a brute-force
reference: every phrase of the corpus scored as z(dense) + w * z(BM25 of its passage)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_phrase_helpers import write_squad
from test_phrase_search import brute_force
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files
from anygrain.phrase import PhraseIndex
from anygrain.phrase.lexical import (
    FusionNorm,
    SparseFusion,
    attach_sparse,
    dense_stats,
    fuse,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = [
    "Who created Python?",
    "How long is the Great Wall of China?",
    "Where did the café open?",
    "How far away is Alpha Centauri?",
]


def _build(squad: Path, model_dir: Path, out: Path, **opts: object) -> PhraseIndex:
    # the fused first stage against brute force: 8-bit codes of half the vectors, not
    # re-scored (the default's re-scoring is tests/test_phrase_rescore*.py's)
    opts = {"compress": "sq8", "keep": 0.5, **opts}
    idx = Index.build(
        f"squad:{squad}", kind="phrase", out=out, model=str(model_dir), progress=False, **opts
    )
    assert isinstance(idx, PhraseIndex)
    return idx


@pytest.fixture(scope="module")
def index(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> PhraseIndex:
    return _build(squad, model_dir, tmp_path_factory.mktemp("idx") / "phrase")


@pytest.fixture(scope="module")
def dense_only(
    squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> PhraseIndex:
    return _build(squad, model_dir, tmp_path_factory.mktemp("idx") / "dense", sparse=False)


def reference(
    index: PhraseIndex, text: str, weight: float | None = None
) -> dict[tuple[int, int], float]:
    """Every phrase of the corpus with its fused score, computed from scratch: MIPS
    statistics from all stored vectors, BM25 of every passage."""
    qs, qe = index.encode_queries([text])
    assert index.fusion is not None and index.lexical is not None
    fusion = index.fusion.with_weight(weight)
    lex = index.lexical.queries([text], fusion)[0]
    t = index.table
    s_top = np.sort(t.start[index.start_ids].astype(np.float32) @ qs[0])[::-1]
    e_top = np.sort(t.end[index.end_ids].astype(np.float32) @ qe[0])[::-1]
    stats = dense_stats(s_top, e_top, fusion.norm_depth)
    dense = brute_force(t, qs[0], qe[0], list(range(len(index.corpus))), index.max_words)
    keys = list(dense)
    rows = np.array([int(t.row[s]) for s, _ in keys])
    fused = fuse(np.array([dense[k] for k in keys], np.float32), rows, stats, lex, fusion)
    return dict(zip(keys, fused.tolist(), strict=True))


def test_bm25_scores_are_the_bm25_index_scores(index: PhraseIndex) -> None:
    assert index.lexical is not None
    fusion = SparseFusion()
    lex = index.lexical.queries(QUESTIONS, fusion)
    rows = np.tile(np.arange(len(index.corpus)), (len(QUESTIONS), 1))
    want = index.lexical.bm25.score_rows(QUESTIONS, rows)
    for i, q in enumerate(lex):
        np.testing.assert_allclose(q.scores, want[i], rtol=1e-5)
        top = q.scores[q.top_rows]
        assert list(top) == sorted(top, reverse=True) and (top > 0).all()


@pytest.mark.parametrize("weight", [None, 0.3, 3.0])
def test_fused_phrase_search_equals_brute_force(index: PhraseIndex, weight: float | None) -> None:
    hits = index.search(QUESTIONS, 5, top_k=len(index.table), sparse_weight=weight)
    for text, hs in zip(QUESTIONS, hits, strict=True):
        ref = reference(index, text, weight)
        # the best phrase is found; every phrase returned carries its exact fused score
        # (pairing each candidate with its best partner finds maxima, not every runner-up)
        assert abs(hs[0].score - max(ref.values())) < 1e-3
        t = index.table
        by_span = {(int(t.row[s]), int(t.cs[s]), int(t.ce[e])): v for (s, e), v in ref.items()}
        for h in hs:
            assert h.span is not None
            assert abs(by_span[(h.passage_row, *h.span)] - h.score) < 1e-3


def test_default_depth_finds_the_brute_force_best(index: PhraseIndex) -> None:
    for text, hs in zip(QUESTIONS, index.search(QUESTIONS, 1), strict=True):
        assert abs(hs[0].score - max(reference(index, text).values())) < 1e-3


@pytest.mark.parametrize("unit", [Unit.PASSAGE, Unit.DOCUMENT, Unit.SENTENCE])
def test_units_take_the_max_of_their_fused_phrases(index: PhraseIndex, unit: Unit) -> None:
    for text in QUESTIONS:
        ref = reference(index, text)
        by_row: dict[int, float] = {}
        for (s, _), v in ref.items():
            r = int(index.table.row[s])
            by_row[r] = max(by_row.get(r, -np.inf), v)
        hits = index.search([text], 3, unit=unit, exact=True)[0]
        assert abs(hits[0].score - max(by_row.values())) < 1e-3
        if unit is Unit.PASSAGE:
            want = sorted(by_row.values(), reverse=True)[:3]
            assert [round(h.score, 3) for h in hits] == [round(v, 3) for v in want]
            assert all(abs(by_row[h.passage_row] - h.score) < 1e-3 for h in hits)


def test_exact_unit_search_is_proven_under_fusion(index: PhraseIndex) -> None:
    qs, qe = index.encode_queries(QUESTIONS)
    assert index.fusion is not None and index.lexical is not None
    lex = index.lexical.queries(QUESTIONS, index.fusion)
    found, stats = index.search_units(
        qs, qe, 2, Unit.PASSAGE, depth=1, exact=True, lexical=lex, fusion=index.fusion
    )
    assert all(st.exact for st in stats)
    for text, f in zip(QUESTIONS, found, strict=True):
        ref = reference(index, text)
        assert abs(f[0].score - max(ref.values())) < 1e-3


def test_weight_zero_is_the_pure_dense_search(index: PhraseIndex, dense_only: PhraseIndex) -> None:
    for unit in (Unit.PHRASE, Unit.PASSAGE):
        a = index.search(QUESTIONS, 4, unit=unit, sparse_weight=0)
        b = dense_only.search(QUESTIONS, 4, unit=unit)
        for x, y in zip(a, b, strict=True):
            assert [(h.passage_row, h.span, round(h.score, 4)) for h in x] == [
                (h.passage_row, h.span, round(h.score, 4)) for h in y
            ]
    assert dense_only.fusion is None and dense_only.search_fusion(0) is None
    with pytest.raises(AnygrainError, match="attach-sparse"):
        dense_only.search(QUESTIONS[:1], 1, sparse_weight=1.0)


def test_bm25_top_passages_are_candidates_whatever_the_dense_depth(index: PhraseIndex) -> None:
    """A passage BM25 ranks first is scored even when none of its tokens is in the dense top k."""
    assert index.fusion is not None and index.lexical is not None
    text = "Guido van Rossum Python indentation blocks"
    qs, qe = index.encode_queries([text])
    lex = index.lexical.queries([text], index.fusion)
    phrases = index.search_phrases(qs, qe, top_k=1, lexical=lex, fusion=index.fusion)[0]
    python_row = int(lex[0].top_rows[0])
    assert index.corpus.column("title", [python_row])[0] == "Python"
    ref = reference(index, text)
    in_python = {k: v for k, v in ref.items() if int(index.table.row[k[0]]) == python_row}
    got = {
        (int(s), int(e))
        for s, e in zip(phrases.start, phrases.end, strict=True)
        if int(index.table.row[s]) == python_row
    }
    # the whole passage was scanned: its best phrase is among the candidates
    assert max(in_python, key=lambda k: in_python[k]) in got


def test_raw_norm_adds_raw_scores(index: PhraseIndex) -> None:
    lex = index.lexical.queries(QUESTIONS[:1], SparseFusion())[0]  # type: ignore[union-attr]
    f = SparseFusion(weight=2.0, norm=FusionNorm.RAW)
    rows = np.array([0, 1])
    got = fuse(np.array([1.0, 2.0], np.float32), rows, (5.0, 3.0), lex, f)
    np.testing.assert_allclose(got, [1.0 + 2 * lex.scores[0], 2.0 + 2 * lex.scores[1]], rtol=1e-6)


def test_settings_are_saved_and_checked(
    index: PhraseIndex, squad: Path, model_dir: Path, tmp_path: Path
) -> None:
    m = json.loads((index.path / "index.json").read_text())
    assert m["settings"]["sparse"] == SparseFusion().to_dict()
    assert check_index_files(index.path, extra=True) == []
    idx = _build(squad, model_dir, tmp_path / "w", sparse_weight=0.5)
    assert idx.fusion == SparseFusion(weight=0.5)
    for bad in ({"sparse_weight": -1.0}, {"sparse": False, "sparse_from": "x"}):
        with pytest.raises(AnygrainError):
            _build(squad, model_dir, tmp_path / "bad", **bad)


def test_attach_sparse_to_an_index_built_without_it(
    dense_only: PhraseIndex, index: PhraseIndex, squad: Path, tmp_path: Path
) -> None:
    import shutil

    p = tmp_path / "copy"
    shutil.copytree(dense_only.path, p)
    # a BM25 index over the phrase index's own corpus, then copied in
    bm = Index.build(p / "corpus", kind="bm25", out=tmp_path / "bm", progress=False)
    attach_sparse(p, bm25_from=bm.path, progress=False)
    idx = Index.load(p)
    assert isinstance(idx, PhraseIndex) and idx.fusion == SparseFusion()
    assert check_index_files(p, extra=True) == []
    a, b = idx.search(QUESTIONS, 3, unit="passage"), index.search(QUESTIONS, 3, unit="passage")
    for x, y in zip(a, b, strict=True):
        assert [(h.passage_row, round(h.score, 4)) for h in x] == [
            (h.passage_row, round(h.score, 4)) for h in y
        ]
    # a BM25 index over another corpus is refused, and the index is left as it was
    other = write_squad(
        tmp_path / "other.json", [("T", "Some other text here.", [("q?", "other")])]
    )
    bm2 = Index.build(f"squad:{other}", kind="bm25", out=tmp_path / "bm2", progress=False)
    with pytest.raises(IndexMismatchError, match="another corpus"):
        attach_sparse(p, bm25_from=bm2.path, progress=False)
    assert check_index_files(p, extra=True) == []
    # or built in place, over the index's corpus
    q = tmp_path / "built"
    shutil.copytree(dense_only.path, q)
    attach_sparse(q, weight=2.0, progress=False)
    assert Index.load(q).fusion == SparseFusion(weight=2.0)  # type: ignore[attr-defined]


def test_compressed_index_fuses_over_decoded_vectors(
    squad: Path, model_dir: Path, tmp_path: Path
) -> None:
    idx = _build(squad, model_dir, tmp_path / "sq8", compress="sq8")
    hits = idx.search(QUESTIONS, 1, top_k=len(idx.table))
    for text, hs in zip(QUESTIONS, hits, strict=True):
        # the decoded vectors are what span scoring reads, so the reference reads them too
        assert abs(hs[0].score - max(reference(idx, text).values())) < 1e-3


def test_cli_sparse_options(index: PhraseIndex, squad: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(
        app, ["search", str(index.path), QUESTIONS[0], "--json", "-k", "2", "--sparse-weight", "0"]
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.output.splitlines() if x.startswith("{")]
    want = index.search(QUESTIONS[:1], 2, sparse_weight=0)[0]
    assert [round(x["score"], 4) for x in rows] == [round(h.score, 4) for h in want]
    bm = Index.build(f"squad:{squad}", kind="bm25", out=tmp_path / "bm", progress=False)
    r = runner.invoke(app, ["search", str(bm.path), "x", "--sparse-weight", "1"])
    assert r.exit_code == 2 and "needs a phrase index" in r.output
    r = runner.invoke(
        app,
        [
            "eval",
            str(index.path),
            "--questions",
            f"squad:{squad}",
            "--json",
            "-q",
            "--sparse-weight",
            "0.5",
        ],
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "nosparse"
    r = runner.invoke(
        app,
        [
            "index",
            f"squad:{squad}",
            "--kind",
            "phrase",
            "--model",
            str(index.path / "phrase" / "model"),
            "--out",
            str(out),
            "--no-sparse",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "sparse" not in json.loads((out / "index.json").read_text())["settings"]
    r = runner.invoke(app, ["attach-sparse", str(out), "--sparse-weight", "0.7", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "index.json").read_text())["settings"]["sparse"]["weight"] == 0.7
