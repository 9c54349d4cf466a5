"""Length-bucketed batch encoding gives the same vectors as encoding each text alone."""

from __future__ import annotations

import numpy as np
import pytest
from dense_helpers import single_threaded, tiny_biencoder

from anygrain.models.biencoder import BiEncoder

TEXTS = [
    "short",
    "a somewhat longer passage about retrieval with dense vectors and inner products",
    "mid length text here",
    "x " * 90,
    "another one, with punctuation; and numbers 1 2 3",
    "tiny",
    "the quick brown fox jumps over the lazy dog " * 4,
]
TITLES = ["T1", "Title two", "", "Long", "Five", "6", "Fox"]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def m() -> BiEncoder:
    return tiny_biencoder(3)


@pytest.mark.parametrize("titles", [None, TITLES])
def test_bucketed_equals_one_by_one(m: BiEncoder, titles: list[str] | None) -> None:
    batched = m.encode_passages(TEXTS, titles, batch_size=3)
    single = np.stack(
        [
            m.encode_passages([t], None if titles is None else [titles[i]])[0]
            for i, t in enumerate(TEXTS)
        ]
    )
    assert batched.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(batched, single, atol=1e-5)
    q = m.encode_questions(TEXTS, batch_size=2)
    np.testing.assert_allclose(q, np.stack([m.encode_questions([t])[0] for t in TEXTS]), atol=1e-5)


@pytest.mark.slow
def test_real_minilm_index_ranks_sensibly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The offline minilm alias end to end: the right passage wins for plain questions."""
    from anygrain.corpus.records import SourceDocument
    from anygrain.index.base import Index

    docs = [
        SourceDocument("paris", "Paris", "Paris is the capital and largest city of France."),
        SourceDocument("python", "Python", "Python is a high-level programming language."),
        SourceDocument("moon", "Moon", "The Moon is Earth's only natural satellite."),
    ]
    idx = Index.build(docs, kind="dense", out=tmp_path / "idx", model="minilm", progress=False)
    tops = [
        h[0].doc_id
        for h in idx.search(
            [
                "What is the capital of France?",
                "Which language is for programming?",
                "What orbits the Earth?",
            ],
            1,
        )
    ]
    assert tops == ["paris", "python", "moon"]
