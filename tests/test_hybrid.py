"""Hybrid index end to end with a tiny random encoder: layout, fusion options, reload."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from dense_helpers import single_threaded, tiny_biencoder

from anygrain.composite.fusion import FusionConfig, FusionMethod, fuse_scores, union_candidates
from anygrain.composite.hybrid import HybridIndex
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.index.base import Index

DOCS = [
    SourceDocument("a", "Cats", "The cat sat on the mat."),
    SourceDocument("b", "Dogs", "A dog chased the cat across the garden."),
    SourceDocument("c", "Birds", "Birds sing in the morning in the garden tree."),
    SourceDocument("d", "Rivers", "The river flows to the sea past the old mill."),
    SourceDocument("e", "Trees", "Oak trees grow slowly near the river."),
]


def test_hybrid_build_search_reload(tmp_path: Path) -> None:
    with single_threaded():
        model = tiny_biencoder(seed=3)
        idx = Index.build(DOCS, kind="hybrid", out=tmp_path / "h", model=model, progress=False)
        assert isinstance(idx, HybridIndex)
        # One corpus shared by both parts; each part is a complete index directory.
        for p in (
            "index.json",
            "corpus/corpus.json",
            "sparse/index.json",
            "dense/index.json",
            "dense/faiss.index",
        ):
            assert (tmp_path / "h" / p).exists(), p
        assert not (tmp_path / "h" / "dense" / "dense").exists()
        q = ["cat on the mat", "river sea mill"]
        hits = idx.search(q, k=3)
        assert [h.passage_id for h in hits[0]][0] == "a_0"
        assert all(h1.score >= h2.score for hs in hits for h1, h2 in zip(hs, hs[1:], strict=False))
        # The fused order equals fusing the exact scores of both systems by hand.
        s_rows, _ = idx.sparse.search_rows(q, 100)
        d_rows, _ = idx.dense.search_vectors(idx.dense.encode_queries(q), 100)
        cand = union_candidates(s_rows, d_rows)
        qv = idx.dense.encode_queries(q)
        want_rows, _ = fuse_scores(
            cand, idx.sparse.score_rows(q, cand), idx.dense.score_rows(qv, cand), FusionConfig(), 3
        )
        assert [[h.passage_row for h in hs] for hs in hits] == [
            [r for r in row if r >= 0] for row in want_rows.tolist()
        ]
        for method in ("rrf", "raw", "minmax"):
            assert len(idx.search(q, k=3, fusion=method)[0]) == 3
        again = Index.load(tmp_path / "h")
        assert [h.passage_id for h in again.search(q, k=3)[1]] == [h.passage_id for h in hits[1]]
        assert again.manifest["settings"]["fusion"]["method"] == FusionMethod.ZSCORE.value


def test_dense_scores_are_exact_inner_products(tmp_path: Path) -> None:
    with single_threaded():
        model = tiny_biencoder(seed=1)
        idx = Index.build(DOCS, kind="hybrid", out=tmp_path / "h", model=model, progress=False)
        qv = idx.dense.encode_queries(["garden"])
        rows = np.array([[0, 2, 4, -1]])
        got = idx.dense.score_rows(qv, rows)
        pv = idx.dense.vectors.rows([0, 2, 4])
        np.testing.assert_allclose(got[0, :3], pv @ qv[0], rtol=1e-5)


def test_combine_reuses_existing_bm25_and_dense_indexes(tmp_path: Path) -> None:
    with single_threaded():
        model = tiny_biencoder(seed=3)
        built = Index.build(DOCS, kind="hybrid", out=tmp_path / "h", model=model, progress=False)
        bm25 = Index.build(DOCS, kind="bm25", out=tmp_path / "bm25", progress=False)
        # built separately from the same documents: its own corpus copy, the same checksum
        Index.build(DOCS, kind="dense", out=tmp_path / "dense", model=model, progress=False)
        vectors = sorted((tmp_path / "dense" / "dense" / "vectors").iterdir())
        mtimes = [p.stat().st_mtime_ns for p in vectors]
        idx = HybridIndex.combine(
            tmp_path / "bm25", tmp_path / "dense", tmp_path / "hc", fusion="rrf", depth=50
        )
        assert isinstance(idx, HybridIndex)
        assert sorted(p.name for p in (tmp_path / "hc").iterdir()) == ["index.json"]
        assert [p.stat().st_mtime_ns for p in vectors] == mtimes  # nothing re-encoded
        m = idx.manifest
        assert m["components"]["sparse"]["path"] == "../bm25"
        assert m["components"]["dense"]["path"] == "../dense"
        assert m["corpus"]["checksum"] == bm25.corpus.checksum
        assert m["settings"]["fusion"] == {"method": "rrf", "weight": None, "depth": 50}
        q = ["cat on the mat", "river sea mill"]
        again = Index.load(tmp_path / "hc")
        for method in FusionMethod:
            got = [[h.passage_id for h in hs] for hs in again.search(q, k=3, fusion=method.value)]
            want = [[h.passage_id for h in hs] for hs in built.search(q, k=3, fusion=method.value)]
            assert got == want, method
        # a part rebuilt over other documents no longer fits the rows the hybrid index fuses
        shutil.rmtree(tmp_path / "dense")
        Index.build(DOCS[:4], kind="dense", out=tmp_path / "dense", model=model, progress=False)
        with pytest.raises(IndexMismatchError, match="now built over another corpus"):
            Index.load(tmp_path / "hc")


def test_combine_refuses_other_corpora_and_wrong_kinds(tmp_path: Path) -> None:
    with single_threaded():
        model = tiny_biencoder(seed=3)
        Index.build(DOCS, kind="bm25", out=tmp_path / "bm25", progress=False)
        Index.build(DOCS[:4], kind="dense", out=tmp_path / "dense4", model=model, progress=False)
        with pytest.raises(IndexMismatchError, match="built over different corpora"):
            HybridIndex.combine(tmp_path / "bm25", tmp_path / "dense4", tmp_path / "x")
        with pytest.raises(AnygrainError, match="must be a dense index"):
            HybridIndex.combine(tmp_path / "bm25", tmp_path / "bm25", tmp_path / "x")
        with pytest.raises(AnygrainError, match="unknown fusionmethod 'sum'"):
            HybridIndex.combine(
                tmp_path / "bm25", tmp_path / "dense4", tmp_path / "x", fusion="sum"
            )
        assert not (tmp_path / "x").exists()


def test_hybrid_bm25_part_takes_k1_and_b(tmp_path: Path) -> None:
    import json

    with single_threaded():
        model = tiny_biencoder(seed=3)
        idx = Index.build(
            DOCS, kind="hybrid", out=tmp_path / "h", model=model, progress=False, k1=1.5, b=0.8
        )
    assert isinstance(idx, HybridIndex)
    m = json.loads((tmp_path / "h" / "sparse" / "index.json").read_text(encoding="utf-8"))
    assert (m["settings"]["bm25"]["k1"], m["settings"]["bm25"]["b"]) == (1.5, 0.8)
    assert Index.load(tmp_path / "h").build_settings.bm25.k1 == 1.5  # type: ignore[union-attr]
    with pytest.raises(AnygrainError, match="BM25 b must be a finite number from 0 to 1"):
        Index.build(DOCS, kind="hybrid", out=tmp_path / "x", model=model, b=1.5, progress=False)


def test_flat_build_settings_of_an_older_hybrid_index_still_read(tmp_path: Path) -> None:
    """A hybrid index recorded its build settings flat (its options as given) before they
    nested a DenseSettings, a Bm25Settings and a FusionConfig: it opens, read as nested."""
    import json

    from anygrain.composite.hybrid import HybridSettings
    from anygrain.dense.index import DenseSettings
    from anygrain.sparse.bm25 import Bm25Settings

    with single_threaded():
        model = tiny_biencoder(seed=3)
        built = Index.build(
            DOCS, kind="hybrid", out=tmp_path / "h", model=model, progress=False, k1=1.2,
            fusion="rrf", depth=50, shard_size=3,
        )  # fmt: skip
        q = ["cat on the mat"]
        want_hits = [h.passage_id for h in built.search(q, k=3)[0]]
    f = tmp_path / "h" / "index.json"
    m = json.loads(f.read_text(encoding="utf-8"))
    nested = m["settings"]["build"]
    assert set(nested) == {"dense", "bm25", "fusion"}
    assert nested["fusion"] == {"method": "rrf", "weight": None, "depth": 50}
    assert (nested["bm25"]["k1"], nested["dense"]["shard_size"]) == (1.2, 3)
    # the manifest as an older anygrain wrote it: every option flat
    m["settings"]["build"] = {
        "fusion": "rrf", "weight": None, "depth": 50, "model": None, "lang": "en",
        "factory": None, "dtype": "float32", "batch_size": 64, "bf16": False,
        "shard_size": 3, "k1": 1.2, "b": 0.4,
    }  # fmt: skip
    f.write_text(json.dumps(m, indent=2), encoding="utf-8")
    with single_threaded():
        old = Index.load(tmp_path / "h")
        assert [h.passage_id for h in old.search(q, k=3)[0]] == want_hits
    s = old.build_settings
    assert isinstance(s, HybridSettings)
    assert s.fusion == FusionConfig(FusionMethod.RRF, None, 50)
    assert s.bm25 == Bm25Settings(lang="en", k1=1.2, b=0.4)
    assert s.dense == DenseSettings(lang="en", shard_size=3)
    # an older flat form without k1 and b (before the BM25 part took them): the defaults
    assert HybridSettings.from_dict({"fusion": "zscore", "depth": 100}) == HybridSettings()
    # and the nested form round-trips
    assert HybridSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s
