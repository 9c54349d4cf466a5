"""Span scoring against a brute-force reference; unit aggregation is a max over phrases."""

from __future__ import annotations

import numpy as np
import pytest

from anygrain.corpus.records import SourceDocument, Span
from anygrain.corpus.store import CorpusStore
from anygrain.hits.hit import Unit
from anygrain.phrase.dump import END_OK, START_OK
from anygrain.phrase.search import (
    Phrases,
    PhraseTable,
    aggregate,
    merge,
    search_candidates,
    search_scope,
)

DIM = 6


def make_table(seed: int = 0, n_passages: int = 4) -> PhraseTable:
    """Random stored tokens: several sub-words per word, some tokens filtered out."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n_passages):
        char = 0
        for word in range(int(rng.integers(8, 16))):
            n_sub = int(rng.integers(1, 4))
            for j in range(n_sub):
                first, last = j == 0, j == n_sub - 1
                flags = (START_OK if first and rng.random() > 0.15 else 0) | (
                    END_OK if last and rng.random() > 0.15 else 0
                )
                if flags or rng.random() < 0.3:  # filtered-out tokens are mostly not stored
                    rows.append([r, char, char + 2, flags, word, word])
                char += 2
            char += 1
    tokens = np.asarray(rows, dtype=np.int32)
    keep = tokens[:, 3] > 0
    tokens = tokens[keep]
    counts = np.bincount(tokens[:, 0], minlength=n_passages)
    ptr = np.zeros(n_passages + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    n = len(tokens)
    start = rng.normal(size=(n, DIM)).astype(np.float16)
    end = rng.normal(size=(n, DIM)).astype(np.float16)
    return PhraseTable(start, end, tokens, ptr)


def brute_force(
    table: PhraseTable, qs: np.ndarray, qe: np.ndarray, rows: list[int], L: int
) -> dict[tuple[int, int], float]:
    """Every valid phrase (same passage, start <= end, at most L words) with its score."""
    out = {}
    ss = table.start.astype(np.float32) @ qs
    es = table.end.astype(np.float32) @ qe
    for r in rows:
        idx = range(table.passage_ptr[r], table.passage_ptr[r + 1])
        for i in idx:
            if not table.start_ok[i]:
                continue
            for j in idx:
                if j >= i and table.end_ok[j] and table.wlast[j] - table.wfirst[i] < L:
                    out[(i, j)] = float(ss[i] + es[j])
    return out


@pytest.mark.parametrize("L", [1, 2, 3, 20])
def test_scope_search_finds_the_brute_force_best_and_scores_exactly(L: int) -> None:
    table = make_table(seed=L)
    rng = np.random.default_rng(100 + L)
    for rows in ([0], [1, 3], [0, 1, 2, 3]):
        qs, qe = rng.normal(size=DIM).astype(np.float32), rng.normal(size=DIM).astype(np.float32)
        ref = brute_force(table, qs, qe, rows, L)
        got = search_scope(table, qs, qe, rows, L)
        assert len(got) > 0
        best = max(ref.values())
        assert abs(float(got.score[0]) - best) < 1e-4
        assert np.all(np.diff(got.score) <= 1e-6)  # best first
        for s, e, sc in zip(got.start, got.end, got.score, strict=True):
            assert (int(s), int(e)) in ref, "returned an invalid phrase"
            assert abs(ref[(int(s), int(e))] - float(sc)) < 1e-4
            assert table.row[s] in rows
        # Every start is paired with its best end, every end with its best start.
        for s in {int(x) for x in got.start}:
            want = max(v for (i, _), v in ref.items() if i == s)
            assert (
                abs(
                    max(float(sc) for i, sc in zip(got.start, got.score, strict=True) if i == s)
                    - want
                )
                < 1e-4
            )
        assert len({(int(s), int(e)) for s, e in zip(got.start, got.end, strict=True)}) == len(got)


def test_candidates_pair_within_the_same_passage_and_word_limit() -> None:
    table = make_table(seed=7, n_passages=5)
    rng = np.random.default_rng(3)
    L = 3
    qs, qe = rng.normal(size=DIM).astype(np.float32), rng.normal(size=DIM).astype(np.float32)
    ref = brute_force(table, qs, qe, list(range(5)), L)
    starts = rng.choice(len(table), size=12, replace=False)
    ends = rng.choice(len(table), size=12, replace=False)
    got = search_candidates(table, qs, qe, np.r_[starts, -1], np.r_[ends, -1], L)
    for s, e, sc in zip(got.start, got.end, got.score, strict=True):
        assert (int(s), int(e)) in ref and abs(ref[(int(s), int(e))] - float(sc)) < 1e-4
        assert table.row[s] == table.row[e] and table.wlast[e] - table.wfirst[s] < L
    for s in starts:
        options = [v for (i, _), v in ref.items() if i == s]
        found = [float(sc) for i, sc in zip(got.start, got.score, strict=True) if i == s]
        if options:
            assert found and abs(max(found) - max(options)) < 1e-4
        else:
            assert not found


def test_merge_deduplicates_and_sorts() -> None:
    a = Phrases(np.array([1, 2]), np.array([3, 4]), np.array([0.5, 2.0], np.float32))
    b = Phrases(np.array([2, 5]), np.array([4, 5]), np.array([2.0, 1.0], np.float32))
    m = merge(a, b)
    assert list(zip(m.start.tolist(), m.end.tolist(), strict=True)) == [(2, 4), (5, 5), (1, 3)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> CorpusStore:
    texts = [
        "First sentence here. Second one follows.",
        "Only one sentence in this passage.",
        "Another doc starts. With two sentences.",
    ]
    docs = [
        SourceDocument(
            "d0",
            "Doc zero",
            texts[0] + "\n\n" + texts[1],
            passages=[
                Span(0, len(texts[0]), id="p0"),
                Span(len(texts[0]) + 2, len(texts[0]) + 2 + len(texts[1]), id="p1"),
            ],
        ),
        SourceDocument("d1", "Doc one", texts[2], passages=[Span(0, len(texts[2]), id="p2")]),
    ]
    return CorpusStore.build(docs, tmp_path_factory.mktemp("store") / "c", progress=False)


def _word_table(store: CorpusStore) -> PhraseTable:
    """One token per word of each passage, every token a start and an end."""
    rows = []
    for r, text in enumerate(store.texts()):
        pos = 0
        for w, word in enumerate(text.split()):
            s = text.index(word, pos)
            rows.append([r, s, s + len(word), START_OK | END_OK, w, w])
            pos = s + len(word)
    tokens = np.asarray(rows, dtype=np.int32)
    ptr = np.zeros(len(store) + 1, dtype=np.int64)
    np.cumsum(np.bincount(tokens[:, 0], minlength=len(store)), out=ptr[1:])
    z = np.zeros((len(tokens), DIM), np.float16)
    return PhraseTable(z, z, tokens, ptr)


def test_units_are_scored_by_their_best_phrase(store: CorpusStore) -> None:
    table = _word_table(store)
    # Tokens: p0 words 0..5 (two sentences), p1 words 6..11, p2 words 12..17.
    phrases = Phrases(
        start=np.array([4, 0, 13, 7, 16, 2]),
        end=np.array([5, 1, 13, 8, 17, 2]),
        score=np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0], np.float32),
    )
    ph = aggregate(table, store, phrases, 10, Unit.PHRASE)
    assert [h.score for h in ph] == [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
    assert store.texts([0])[0][ph[0].span[0] : ph[0].span[1]] == "one follows."  # type: ignore[index]

    pas = aggregate(table, store, phrases, 10, Unit.PASSAGE)
    assert [(int(table.row[h.start]), h.score) for h in pas] == [(0, 9.0), (2, 7.0), (1, 6.0)]
    for h in pas:  # the max over the phrases each passage holds
        r = table.row[h.start]
        assert h.score == max(
            s for s, st in zip(phrases.score, phrases.start, strict=True) if table.row[st] == r
        )

    sent = aggregate(table, store, phrases, 10, Unit.SENTENCE)
    text0 = store.texts([0])[0]
    got = [(int(table.row[h.start]), h.span, h.score) for h in sent]
    assert got[0] == (0, (21, len(text0)), 9.0)  # "Second one follows." via its best phrase
    assert got[1] == (0, (0, 20), 8.0)
    assert [g[2] for g in got] == [9.0, 8.0, 7.0, 6.0, 5.0]  # p2's two sentences both appear
    assert aggregate(table, store, phrases, 2, Unit.SENTENCE)[1].score == 8.0

    doc = aggregate(table, store, phrases, 10, Unit.DOCUMENT)
    assert [(store.column("doc_id", [int(table.row[h.start])])[0], h.score) for h in doc] == [
        ("d0", 9.0),
        ("d1", 7.0),
    ]


def test_phrase_ends_never_cross_passages() -> None:
    table = make_table(seed=11, n_passages=3)
    end_hi, start_lo = table.bounds(50)
    for t in range(len(table)):
        assert np.all(table.row[t : end_hi[t]] == table.row[t])
        assert np.all(table.row[start_lo[t] : t + 1] == table.row[t])
