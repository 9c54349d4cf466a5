"""BM25 pinned to references: the Lucene formula computed here, rank_bm25, and raw bm25s."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer

from anygrain.corpus.records import SourceDocument
from anygrain.index.base import Index
from anygrain.sparse.analyzers import ChineseAnalyzer, EnglishAnalyzer
from anygrain.sparse.bm25 import BM25Index

DOCS = [
    ("Cats", "The cat sat on the mat and the cat slept."),
    ("Dogs", "A dog chased the cat across the garden."),
    ("Birds", "Birds sing in the morning; a bird nests in the garden tree."),
    ("Fish", "Fish swim in the river and the sea."),
    ("Trees", "Oak trees grow slowly; the garden has an old oak."),
    ("Rivers", "The river flows to the sea past the old mill."),
]


def _build(tmp_path: Path, **kw) -> BM25Index:  # type: ignore[no-untyped-def]
    docs = [SourceDocument(f"d{i}", t, x) for i, (t, x) in enumerate(DOCS)]
    return Index.build(
        docs, kind="bm25", out=tmp_path / "idx", progress=False, include_title=False, **kw
    )  # type: ignore[return-value]


def _lucene_scores(corpus: list[list[str]], query: list[str], k1: float, b: float) -> np.ndarray:
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    df = Counter(t for d in corpus for t in set(d))
    out = np.zeros(n)
    for i, d in enumerate(corpus):
        tf = Counter(d)
        for t in set(query):
            if t not in tf:
                continue
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            out[i] += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
    return out


def test_scores_match_lucene_definition(tmp_path: Path) -> None:
    idx = _build(tmp_path, lang="en")
    an = EnglishAnalyzer()
    corpus = an.tokenize([x for _, x in DOCS])
    for q in ["cat in the garden", "old oak trees", "river sea", "birds singing"]:
        ref = _lucene_scores(corpus, an.tokenize([q])[0], 0.9, 0.4)
        rows, scores = idx.search_rows([q], k=len(DOCS))
        got = np.zeros(len(DOCS))
        for r, s in zip(rows[0], scores[0], strict=True):
            if r >= 0:
                got[r] = s
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        order = [r for r in rows[0] if r >= 0]
        assert list(order) == sorted(order, key=lambda r: -ref[r])[: len(order)] or np.allclose(
            sorted(ref[order])[::-1], ref[order]
        )


def test_robertson_matches_rank_bm25(tmp_path: Path) -> None:
    rank_bm25 = pytest.importorskip("rank_bm25")
    idx = _build(tmp_path, lang="en", method="robertson", k1=1.5, b=0.75)
    an = EnglishAnalyzer()
    corpus = an.tokenize([x for _, x in DOCS])
    ref = rank_bm25.BM25Okapi(corpus, k1=1.5, b=0.75)
    for q in [
        "river sea",
        "oak",
        "birds morning",
    ]:  # terms with df < N/2: no idf floor in rank_bm25
        toks = an.tokenize([q])[0]
        want = ref.get_scores(toks) / (1.5 + 1)  # bm25s drops the constant (k1 + 1) factor
        rows, scores = idx.search_rows([q], k=len(DOCS))
        got = np.zeros(len(DOCS))
        for r, s in zip(rows[0], scores[0], strict=True):
            if r >= 0:
                got[r] = s
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_same_ranking_as_raw_bm25s(tmp_path: Path) -> None:
    idx = _build(tmp_path, lang="en")
    st = Stemmer.Stemmer("english")
    raw = bm25s.BM25(k1=0.9, b=0.4)
    raw.index(
        bm25s.tokenize([x for _, x in DOCS], stopwords="en", stemmer=st, show_progress=False),
        show_progress=False,
    )
    qs = ["cat garden", "the sea", "oak tree"]
    r_rows, r_scores = raw.retrieve(
        bm25s.tokenize(qs, stopwords="en", stemmer=st, show_progress=False),
        k=3,
        show_progress=False,
    )
    rows, scores = idx.search_rows(qs, k=3)
    np.testing.assert_allclose(scores, r_scores, rtol=1e-6)
    matched = r_scores > 0  # anygrain drops passages that share no term with the query
    assert (rows[matched] == r_rows[matched]).all() and (rows[~matched] == -1).all()


def test_unknown_and_empty_queries(tmp_path: Path) -> None:
    idx = _build(tmp_path)
    hits = idx.search(["zzzz qqqq", "", "cat"], k=3)
    assert hits[0] == [] and hits[1] == [] and hits[2][0].title == "Cats"
    assert hits[2][0].passage_id == "d0_0"


def test_saved_and_reloaded(tmp_path: Path) -> None:
    idx = _build(tmp_path)
    again = Index.load(tmp_path / "idx")
    assert isinstance(again, BM25Index)
    assert [h.passage_id for h in again.search_one("garden")] == [
        h.passage_id for h in idx.search_one("garden")
    ]
    assert again.manifest["settings"]["bm25"]["k1"] == 0.9


def test_chinese_uses_jieba_not_whitespace(tmp_path: Path) -> None:
    toks = ChineseAnalyzer().tokenize(["北京是中国的首都，上海是最大的城市。"])[0]
    assert "北京" in toks and "首都" in toks and "，" not in toks
    docs = [
        SourceDocument("a", "城市", "北京是中国的首都。"),
        SourceDocument("b", "城市", "上海是中国最大的城市。"),
        SourceDocument("c", "动物", "熊猫生活在四川的山林里。"),
    ]
    idx = Index.build(docs, kind="bm25", out=tmp_path / "zh", progress=False)
    assert idx.manifest["settings"]["bm25"]["lang"] == "zh"  # detected
    assert idx.search_one("中国的首都是哪里？")[0].doc_id == "a"
    assert idx.search_one("熊猫生活在哪里")[0].doc_id == "c"


def test_chinese_manifest_records_what_is_applied(tmp_path: Path) -> None:
    """jieba segmentation, no stemming, no stopword list: the manifest must not claim the
    English pipeline's stemming and stopwords."""
    docs = [
        SourceDocument("a", "城市", "北京是中国的首都。"),
        SourceDocument("b", "城市", "上海是中国最大的城市。"),
    ]
    zh = Index.build(docs, kind="bm25", out=tmp_path / "zh", progress=False).manifest["settings"]
    assert zh["bm25"]["lang"] == "zh"
    assert zh["bm25"]["stemming"] is False and zh["bm25"]["stopwords"] is False
    assert zh["analyzer"] == {
        "kind": "zh", "segmenter": "jieba", "stemming": False, "stopwords": False
    }  # fmt: skip
    en_docs = [SourceDocument("a", "Cats", "The cat sat on the mat.")]
    en = Index.build(en_docs, kind="bm25", out=tmp_path / "en", progress=False).manifest
    assert en["settings"]["bm25"]["stemming"] is True
    assert en["settings"]["bm25"]["stopwords"] is True
    assert Index.load(tmp_path / "zh").search_one("中国的首都")[0].doc_id == "a"


def test_cli_sets_k1_and_b_for_bm25_only(squad_file: Path, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from anygrain.cli.main import app

    runner = CliRunner()
    out = tmp_path / "bm25"
    args = ["index", str(squad_file), "-q", "--bm25-k1", "1.2", "--bm25-b", "0.75"]
    r = runner.invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "index.json").read_text(encoding="utf-8"))
    assert (m["settings"]["build"]["k1"], m["settings"]["build"]["b"]) == (1.2, 0.75)
    assert (m["settings"]["bm25"]["k1"], m["settings"]["bm25"]["b"]) == (1.2, 0.75)
    # only the options given are passed, so a kind without them refuses them by name
    r = runner.invoke(
        app, [*args[:3], "--kind", "dense", "--bm25-k1", "1.2", "--out", str(tmp_path / "d")]
    )
    assert r.exit_code == 2 and "index kind 'dense' does not take the option 'k1'" in " ".join(
        r.output.split()
    ), r.output
    r = runner.invoke(app, [*args[:3], "--bm25-b", "2", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "BM25 b must be a finite number from 0 to 1" in r.output, r.output
    assert not (tmp_path / "d").exists() and not (tmp_path / "x").exists()
