"""BM25 indexing a batch at a time gives the index bm25s builds from every token at once."""

from __future__ import annotations

import random
from pathlib import Path

import bm25s
import numpy as np
import pytest

from anygrain.corpus.records import SourceDocument, Span
from anygrain.corpus.store import CorpusStore
from anygrain.sparse.analyzers import ChineseAnalyzer, EnglishAnalyzer
from anygrain.sparse.bm25 import BM25_METHODS, index_streaming, passage_field


def _corpus(tmp_path: Path, zh: bool, n: int = 57) -> CorpusStore:
    rng = random.Random(3)
    if zh:
        words = ["红色", "连衣裙", "蓝牙", "耳机", "儿童", "自行车", "保温杯", "键盘", "纯棉"]
    else:
        words = [
            "cat",
            "dog",
            "river",
            "sea",
            "garden",
            "oak",
            "mill",
            "bird",
            "fish",
            "song",
            "tree",
            "the",
            "a",
            "of",
        ]
    docs = []
    for i in range(n):
        sep = "" if zh else " "
        text = sep.join(rng.choices(words, k=rng.randint(1, 12)))
        if i == 5:
            text = "。" if zh else "the of a"  # nothing left after the analyzer
        title = "" if i % 3 else f"T{i}"
        docs.append(SourceDocument(f"p{i}", title, text, passages=[Span(0, len(text), id=f"p{i}")]))
    return CorpusStore.build(docs, tmp_path / ("zh" if zh else "en"), progress=False)


def _dense(r: bm25s.BM25, n_docs: int) -> dict[str, np.ndarray]:
    """Per term (by string), its column of scores over the documents."""
    s = r.scores
    out = {}
    for term, col in r.vocab_dict.items():
        if col + 1 >= len(s["indptr"]):
            continue  # the empty token has no column
        lo, hi = s["indptr"][col], s["indptr"][col + 1]
        dense = np.zeros(n_docs, dtype=np.float64)
        dense[s["indices"][lo:hi]] = s["data"][lo:hi]
        out[term] = dense
    return out


@pytest.mark.parametrize("method", BM25_METHODS)
@pytest.mark.parametrize("zh", [False, True])
def test_streaming_index_equals_bm25s(tmp_path: Path, method: str, zh: bool) -> None:
    store = _corpus(tmp_path, zh)
    analyzer = ChineseAnalyzer() if zh else EnglishAnalyzer()
    texts = [passage_field(t, x, True) for t, x in zip(store.titles(), store.texts(), strict=True)]
    ref = bm25s.BM25(k1=0.9, b=0.4, method=method)
    ref.index(analyzer.tokenize(texts), show_progress=False)
    got = index_streaming(store, analyzer, method=method, batch_size=8)  # 8 batches
    assert got.scores["num_docs"] == ref.scores["num_docs"] == len(store)
    assert set(got.vocab_dict) == set(ref.vocab_dict)
    for key in ("data", "indices", "indptr"):
        assert got.scores[key].dtype == ref.scores[key].dtype, key
    assert len(got.scores["data"]) == len(ref.scores["data"])
    want, have = _dense(ref, len(store)), _dense(got, len(store))
    assert set(want) == set(have)
    for term in want:
        np.testing.assert_allclose(have[term], want[term], rtol=1e-6, atol=1e-7)
    if ref.nonoccurrence_array is not None:
        assert got.nonoccurrence_array is not None
        by_term = {t: got.nonoccurrence_array[i] for t, i in got.vocab_dict.items() if t}
        for t, i in ref.vocab_dict.items():
            if t:
                assert by_term[t] == pytest.approx(float(ref.nonoccurrence_array[i]), rel=1e-6)
    # Same retrieval for every query, saved and reloaded.
    got.save(str(tmp_path / "saved"), show_progress=False)
    loaded = bm25s.BM25.load(str(tmp_path / "saved"), mmap=True, show_progress=False)
    queries = analyzer.tokenize(texts[:10])
    for q in queries:
        if not q:
            continue
        a = ref.get_scores(q)
        b = loaded.get_scores(q)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
