"""Exact re-scoring (``rescore=N``, issue 37) on a tiny fixture index.

A compressed index's first ``N`` passages per question, re-encoded and re-scored, must give
the hits and scores the uncompressed (float16) index's exact search gives over those
passages, at the phrase grain and the grains cut from phrases, with and without the fused
BM25 part; the setting recorded at build time is the search default and survives add,
delete, compact and verify.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_phrase_helpers import (
    PARAGRAPHS,
    RESCORE_QUESTIONS,
    compressed_copy,
    fixture_index,
    float32_index,
)

from anygrain.api import add_documents, compact_index, delete_documents, verify_index
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.compress import Compress
from anygrain.phrase.lexical import dense_stats, fuse
from anygrain.phrase.refilter import refilter
from anygrain.phrase.rescore import encode_rows, first_rows
from anygrain.phrase.search import Phrases, aggregate, search_scope, unit_hits
from anygrain.phrase.units import mips_scored

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = RESCORE_QUESTIONS
COMPRESSED = (Compress.SQ8, Compress.SQ4, Compress.OPQ_PQ)


@pytest.fixture(scope="module")
def built(
    model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PhraseIndex]:
    """The uncompressed index (float16 dump, keep 0.5) and compressed copies of it at its
    threshold: the same stored tokens, other vectors."""
    root = tmp_path_factory.mktemp("rescore")
    # float32 dumps: re-encoding must give the dump's vectors
    none = float32_index(squad, model_dir, root / "none")
    out = {"none": none}
    for c in COMPRESSED:
        # recorded off: each test asks for its own N (stored tokens, no margin)
        out[c.value] = compressed_copy(none, root / c.value, c.value, rescore=0)
    return out


def _expected(
    comp: PhraseIndex,
    none: PhraseIndex,
    queries: list[str],
    k: int,
    n: int,
    unit: Unit,
    *,
    sparse_weight: float | None,
) -> list[list[Hit]]:
    """The float16 index's exact search over the compressed index's first ``n`` passages
    per query (fused with the compressed index's dense statistics, as re-scoring fuses)."""
    enc = comp.encode(queries)
    qs, qe = enc.vectors
    fusion = comp.search_fusion(sparse_weight)
    lex = comp.lexical.queries(queries, fusion) if fusion is not None and comp.lexical else None
    if unit is Unit.PHRASE:
        first = comp.search_phrases(
            qs, qe, top_k=max(100, 10 * k), lexical=lex, fusion=fusion if lex else None
        )
        tops = [first_rows(comp.table.row[p.start], n) for p in first]
    else:
        hits = comp.search(queries, max(k, n), unit=unit, rescore=0, sparse_weight=sparse_weight)
        tops = [first_rows(np.array([h.passage_row for h in hs], np.int64), n) for hs in hits]
    mips = mips_scored(comp, qs, qe, fusion.norm_depth, None) if fusion is not None else None
    found = []
    for i, rows in enumerate(tops):
        ph = search_scope(none.table, qs[i], qe[i], rows, none.max_words)
        if fusion is not None and lex is not None and mips is not None and len(ph):
            st = dense_stats(mips.ss[i], mips.se[i], fusion.norm_depth)
            sc = fuse(ph.score, none.table.row[ph.start], st, lex[i], fusion)
            order = np.lexsort((ph.start, -sc))
            ph = Phrases(ph.start[order], ph.end[order], sc[order])
        found.append(aggregate(none.table, none.store, ph, k, unit))
    return unit_hits(none.table, none.store, found, unit)


def _same_hits(got: list[Hit], want: list[Hit]) -> None:
    """``got`` starts with ``want``: the same passages, spans and scores (1e-4)."""
    assert len(got) >= len(want)
    for g, w in zip(got, want, strict=False):
        assert (g.passage_row, g.span, g.unit) == (w.passage_row, w.span, w.unit)
        assert g.score == pytest.approx(w.score, abs=1e-4)


@pytest.mark.parametrize("c", [c.value for c in COMPRESSED])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("sparse_weight", [0.0, None])
def test_rescored_phrases_are_the_uncompressed_exact_search(
    built: dict[str, PhraseIndex], c: str, n: int, sparse_weight: float | None
) -> None:
    comp, none = built[c], built["none"]
    k = 10
    got = comp.search(QUESTIONS, k, rescore=n, sparse_weight=sparse_weight)
    want = _expected(comp, none, QUESTIONS, k, n, Unit.PHRASE, sparse_weight=sparse_weight)
    for g, w in zip(got, want, strict=True):
        assert w, "every question has a phrase in its first passage"
        _same_hits(g, w)
        # past the re-scored passages: the compressed search's own hits, none repeated
        assert {h.passage_row for h in g[len(w) :]}.isdisjoint({h.passage_row for h in w})


@pytest.mark.parametrize("unit", [Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT])
@pytest.mark.parametrize("sparse_weight", [0.0, None])
def test_rescored_units_are_the_uncompressed_exact_search(
    built: dict[str, PhraseIndex], unit: Unit, sparse_weight: float | None
) -> None:
    comp, none = built[Compress.OPQ_PQ.value], built["none"]
    for n in (1, 3):
        got = comp.search(QUESTIONS, 4, unit=unit, rescore=n, sparse_weight=sparse_weight)
        want = _expected(comp, none, QUESTIONS, 4, n, unit, sparse_weight=sparse_weight)
        for g, w in zip(got, want, strict=True):
            _same_hits(g, w)
            keys = [(h.passage_row, h.span) if unit is Unit.SENTENCE else h.doc_id for h in g]
            if unit is Unit.PASSAGE:
                keys = [h.passage_row for h in g]
            assert len(keys) == len(set(keys)), "a unit appears once"


def test_rescoring_the_uncompressed_index_changes_nothing(built: dict[str, PhraseIndex]) -> None:
    """Re-encoded vectors are the dump's (float16): an uncompressed index re-scored gives
    its own hits and scores."""
    none = built["none"]
    plain = none.search(QUESTIONS, 5, rescore=0)
    again = none.search(QUESTIONS, 5, rescore=2)
    for a, b in zip(plain, again, strict=True):
        top2 = set(first_rows(np.array([h.passage_row for h in a], np.int64), 2))
        exact = [h for h in a if h.passage_row in top2]
        _same_hits(b, exact)


def test_re_encoded_vectors_are_the_stored_ones(built: dict[str, PhraseIndex]) -> None:
    none = built["none"]
    rows = np.array([0, 2, 3], np.int64)
    ex = encode_rows(none, rows)
    ptr = none.table.passage_ptr
    sel = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in rows])
    assert np.array_equal(ex.table.row, none.table.row[sel])
    assert np.array_equal(ex.table.cs, none.table.cs[sel])
    assert np.array_equal(ex.table.start_ok, none.table.start_ok[sel])
    np.testing.assert_allclose(
        ex.table.start.astype(np.float32), none.table.start[sel].astype(np.float32), atol=2e-3
    )
    np.testing.assert_allclose(
        ex.table.end.astype(np.float32), none.table.end[sel].astype(np.float32), atol=2e-3
    )


def test_rescore_is_checked(built: dict[str, PhraseIndex]) -> None:
    comp = built[Compress.SQ4.value]
    with pytest.raises(AnygrainError, match="rescore"):
        comp.search(QUESTIONS[:1], 3, rescore=-1)
    with pytest.raises(AnygrainError, match="rescore"):
        refilter(built["none"], comp.path.parent / "bad", 0.0, rescore=-2)


def _docs(rows: list[tuple[str, str, Any]], start: int) -> list[SourceDocument]:
    return [SourceDocument(f"new{i}", t, x) for i, (t, x, _) in enumerate(rows, start)]


def test_the_recorded_setting_is_the_default_and_survives_updates(
    built: dict[str, PhraseIndex], model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    none = built["none"]
    tau = float(none.manifest["settings"]["threshold"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idx = refilter(none, tmp_path / "opq", tau, compress="opq-pq", rescore=2, progress=False)
    assert idx.rescore == 2 and idx.manifest["settings"]["rescore"] == 2
    again = Index.load(idx.path)
    assert isinstance(again, PhraseIndex) and again.rescore == 2
    by_default = idx.search(QUESTIONS, 5)
    given = idx.search(QUESTIONS, 5, rescore=2)
    off = idx.search(QUESTIONS, 5, rescore=0)
    assert [[(h.passage_row, h.span, h.score) for h in hs] for hs in by_default] == [
        [(h.passage_row, h.span, h.score) for h in hs] for hs in given
    ]
    assert by_default != off or all(len(h) == 0 for h in off)
    # a refilter without --rescore keeps the source's, 0 turns it off
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = refilter(none, tmp_path / "src", tau, rescore=3)  # uncompressed: dump kept
        kept = refilter(src, tmp_path / "kept", tau, compress="sq8")
        off_idx = refilter(src, tmp_path / "off", tau, compress="sq8", rescore=0)
    assert none.rescore == 0 and src.rescore == 3 and kept.rescore == 3 and off_idx.rescore == 0
    # built with the setting; add, delete, compact, verify with it on (the dump dropped:
    # compact re-encodes)
    idx = fixture_index(squad, model_dir, tmp_path / "work", compress="opq-pq", rescore=2)
    assert idx.rescore == 2 and idx.manifest["settings"]["build"]["rescore"] == 2
    assert verify_index(idx.path).problems == []
    work = idx.path
    added = add_documents(work, _docs(PARAGRAPHS[:2], 0), progress=False)
    assert isinstance(added, PhraseIndex) and added.rescore == 2
    assert len(added.corpus) == len(idx.corpus) + 2
    hits = added.search(["Who created Python?"], 5, unit=Unit.PASSAGE)[0]
    assert hits and len({h.passage_row for h in hits}) == len(hits)
    delete_documents(work, ["new1"])
    after = Index.load(work).search(QUESTIONS, 10)
    assert all(h.doc_id != "new1" for hs in after for h in hs)
    compacted = compact_index(work, progress=False)
    assert isinstance(compacted, PhraseIndex) and compacted.rescore == 2
    assert len(compacted.corpus) == len(idx.corpus) + 1
    assert verify_index(work).problems == []
    res = compacted.search(QUESTIONS, 5, unit=Unit.SENTENCE)
    assert all(h.doc_id != "new1" for hs in res for h in hs)


def test_cli_takes_rescore(built: dict[str, PhraseIndex], squad: Path) -> None:
    from typer.testing import CliRunner

    from anygrain.cli.main import app

    comp = built[Compress.SQ8.value]
    r = CliRunner().invoke(
        app, ["search", str(comp.path), "Who created Python?", "--rescore", "2", "--json"]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        app,
        ["eval", str(comp.path), "--questions", f"squad:{squad}", "--rescore", "1", "--json", "-q"],
    )
    assert r.exit_code == 0, r.output
