"""Two-stage search (``Index.encode`` then ``Index.search_encoded``) gives the hits of
``Index.search`` for every kind: what the server's pipelined workers rely on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder
from test_phrase_helpers import make_tiny_model, write_squad

from anygrain.corpus.records import SourceDocument
from anygrain.hits.hit import Hit
from anygrain.index.base import Index
from anygrain.index.encoded import EncodedQueries
from anygrain.phrase.model import PhraseEncoder

DOCS = [
    SourceDocument("a", "Cats", "The cat sat on the mat."),
    SourceDocument("b", "Dogs", "A dog chased the cat across the garden."),
    SourceDocument("c", "Birds", "Birds sing in the morning in the garden tree."),
    SourceDocument("d", "Rivers", "The river flows to the sea past the old mill."),
]
QUERIES = ["cat on the mat", "river sea mill", "who sings in the garden"]


def same_hits(a: list[list[Hit]], b: list[list[Hit]]) -> None:
    assert [[(h.passage_id, h.span) for h in hs] for hs in a] == [
        [(h.passage_id, h.span) for h in hs] for hs in b
    ]
    for x, y in zip(a, b, strict=True):
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-5)


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
def test_passage_kinds(kind: str, tmp_path: Path) -> None:
    with single_threaded():
        opts = {} if kind == "bm25" else {"model": tiny_biencoder(seed=3)}
        idx = Index.build(DOCS, kind=kind, out=tmp_path / kind, progress=False, **opts)
        enc = idx.encode(QUERIES)
        assert enc.texts == QUERIES and len(enc.vectors) == (0 if kind == "bm25" else 1)
        same_hits(idx.search_encoded(enc, k=3), idx.search(QUERIES, k=3))
        # a subset of encoded queries is searched as those queries alone
        same_hits(idx.search_encoded(enc.take([2, 0]), k=2), idx.search(QUERIES[::-2], k=2))


@pytest.fixture(scope="module")
def phrase_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    squad = write_squad(tmp_path_factory.mktemp("data") / "tiny.json")
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)
    model_dir = m.save(tmp_path_factory.mktemp("phrase-model") / "m")
    out = tmp_path_factory.mktemp("idx") / "phrase"
    return Index.build(
        f"squad:{squad}", kind="phrase", out=out, model=str(model_dir), progress=False
    )


@pytest.mark.parametrize("unit", ["phrase", "sentence", "passage", "document"])
def test_phrase_units(phrase_index: Index, unit: str) -> None:
    with single_threaded():
        qs = ["Who created Python?", "How long is the Great Wall?", "Alpha Centauri"]
        enc = phrase_index.encode(qs)
        assert len(enc.vectors) == 2 and all(v.shape[0] == 3 for v in enc.vectors)
        got = phrase_index.search_encoded(enc, k=3, unit=unit)
        same_hits(got, phrase_index.search(qs, k=3, unit=unit))
        # joined batches (the server's) search as the questions did alone
        joined = EncodedQueries.join([enc.take([0]), enc.take([1, 2])])
        same_hits(phrase_index.search_encoded(joined, k=3, unit=unit), got)
        same_hits(
            phrase_index.search_encoded(enc, k=3, unit=unit, sparse_weight=0.0),
            phrase_index.search(qs, k=3, unit=unit, sparse_weight=0.0),
        )


def test_search_options_include_the_second_stage(phrase_index: Index) -> None:
    # options named only on search_encoded are still options of search (CLI, API checks)
    assert {"unit", "sparse_weight", "bf16", "batch_size"} <= phrase_index.search_options()


def test_encoded_queries_check_their_rows() -> None:
    with pytest.raises(ValueError, match="2 query vectors for 3 queries"):
        EncodedQueries(["a", "b", "c"], (np.zeros((2, 4), dtype=np.float32),))
    a = EncodedQueries(["a"], (np.ones((1, 2)),))
    with pytest.raises(ValueError, match="different kinds"):
        EncodedQueries.join([a, EncodedQueries(["b"])])
