"""Sharded indexes: N shards of one kind searched as one return the unsharded index's hits."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer
from test_phrase_helpers import make_tiny_model, write_squad
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.composite.sharded import shard_bounds
from anygrain.corpus.records import SourceDocument
from anygrain.corpus.store import CorpusStore
from anygrain.dense.index import DenseIndex
from anygrain.dense.sharded import ShardedDense
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.shard_view import merge_top_k
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.sharded import ConcatRows, ShardedPhrase
from anygrain.sparse.bm25 import BM25Index
from anygrain.sparse.sharded import ShardedBM25

WORDS = [
    "star",
    "planet",
    "orbit",
    "moon",
    "comet",
    "galaxy",
    "light",
    "year",
    "python",
    "language",
    "code",
    "block",
    "river",
    "mountain",
    "city",
    "wall",
    "china",
    "history",
    "music",
    "jazz",
    "tea",
    "leaf",
    "ocean",
    "salt",
    "iron",
    "red",
]
QUERIES = [
    "star orbit",
    "python code block",
    "the great wall of china",
    "jazz music history",
    "red iron planet",
    "tea leaf ocean salt",
    "galaxy",
    "nothing matches zzzqqq",
]
KS = (1, 3, 7, 20, 60)  # 20 exceeds a shard of the 40-passage corpus; 60 the whole corpus


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


def _docs(n: int = 40, seed: int = 0) -> list[SourceDocument]:
    rng = random.Random(seed)
    return [
        SourceDocument(
            f"d{i}", f"Title {i}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        )
        for i in range(n)
    ]


def assert_same_hits(got: list[Hit], want: list[Hit], *, tol: float = 1e-5) -> None:
    """Same length, scores within ``tol`` position by position, and the same units in the same
    order, except that units whose scores tie (within ``tol``) may come in either order."""

    def key(h: Hit) -> tuple[object, ...]:
        return (h.passage_row, h.passage_id, h.doc_id, h.span, h.unit)

    assert len(got) == len(want), (len(got), len(want))
    gs, ws = [h.score for h in got], [h.score for h in want]
    np.testing.assert_allclose(gs, ws, atol=tol, rtol=0)
    i = 0
    while i < len(want):
        j = i + 1
        while j < len(want) and abs(want[j].score - want[i].score) <= tol:
            j += 1
        if j < len(want):  # a whole tie group: the same units
            assert sorted(map(key, got[i:j]), key=repr) == sorted(map(key, want[i:j]), key=repr)
        # the last group may be cut at k: which of the tied units made it may differ
        i = j


# --- pieces --------------------------------------------------------------------------------


def test_shard_bounds_cover_the_rows() -> None:
    assert shard_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert shard_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(AnygrainError, match="at most 4"):
        shard_bounds(4, 5)
    with pytest.raises(AnygrainError, match="at least 1"):
        shard_bounds(4, 0)


def test_merge_top_k_orders_by_score_then_global_row() -> None:
    rows = [np.array([[0, 1, -1]]), np.array([[2, 0, 1]])]
    scores = [np.array([[5.0, 3.0, 0.0]]), np.array([[5.0, 4.0, 3.0]])]
    r, s = merge_top_k(rows, scores, [0, 10], 4)
    # the shard-1 rows are 12, 10, 11; the tie at 5.0 goes to row 0, at 3.0 to row 1
    assert r.tolist() == [[0, 12, 10, 1]]
    assert s.tolist() == [[5.0, 5.0, 4.0, 3.0]]
    r, s = merge_top_k(rows, scores, [0, 10], 8)  # more than all shards hold: -1 padding
    assert r.tolist() == [[0, 12, 10, 1, 11, -1, -1, -1]]
    assert s[0, 5:].tolist() == [0.0, 0.0, 0.0]


def test_concat_rows_reads_each_part() -> None:
    a, b = np.arange(6, dtype=np.float16).reshape(3, 2), np.arange(6, 10, dtype=np.float16)
    c = ConcatRows([a, b.reshape(2, 2)])
    assert len(c) == 5 and c.shape == (5, 2)
    full = np.concatenate([a, b.reshape(2, 2)])
    idx = np.array([4, 0, 3, 3, 2])
    np.testing.assert_array_equal(c[idx], full[idx])
    np.testing.assert_array_equal(c[3], full[3])
    np.testing.assert_array_equal(c[1:4], full[1:4])


def test_store_write_rows(tmp_path: Path) -> None:
    store = CorpusStore.build(_docs(12), tmp_path / "c", progress=False)
    part = store.write_rows(4, 9, tmp_path / "p")
    assert len(part) == 5
    assert part.column("id") == store.column("id", list(range(4, 9)))
    assert part.row_of(store.column("id", [6])[0]) == 2
    assert part.manifest["rows_of"] == {"checksum": store.checksum, "start": 4, "stop": 9}
    # the checksum is the one a store built from exactly those documents gets
    again = CorpusStore.build(_docs(12)[4:9], tmp_path / "again", progress=False)
    assert part.checksum == again.checksum
    assert part.document_text("d5") == store.document_text("d5")
    with pytest.raises(AnygrainError, match="outside"):
        store.write_rows(5, 13, tmp_path / "bad")


# --- BM25 ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bm25_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Index, dict[int, Index]]:
    root = tmp_path_factory.mktemp("bm25")
    flat = Index.build(_docs(), kind="bm25", out=root / "flat", lang="en", progress=False)
    sharded = {
        n: Index.build(
            _docs(), kind="sharded", of="bm25", shards=n, out=root / f"s{n}", progress=False
        )
        for n in (2, 3)
    }
    return flat, sharded


def test_bm25_sharded_equals_unsharded(bm25_pair: tuple[Index, dict[int, Index]]) -> None:
    flat, sharded = bm25_pair
    for n, idx in sharded.items():
        assert isinstance(idx, ShardedBM25) and len(idx.shards) == n
        assert len(idx.corpus) == len(flat.corpus)
        for k in KS:
            for got, want in zip(idx.search(QUERIES, k), flat.search(QUERIES, k), strict=True):
                assert_same_hits(got, want)
        assert idx.search(["nothing matches zzzqqq"], 5) == [[]]


def test_bm25_sharded_score_rows(bm25_pair: tuple[Index, dict[int, Index]]) -> None:
    flat, sharded = bm25_pair
    assert isinstance(flat, BM25Index)
    rows = np.array([[0, 39, 15, -1, 20], [7, 8, 33, 1, 2]])
    want = flat.score_rows(QUERIES[:2], rows)
    for idx in sharded.values():
        assert isinstance(idx, BM25Index)
        np.testing.assert_allclose(idx.score_rows(QUERIES[:2], rows), want, atol=1e-5)


def test_bm25_shards_without_global_statistics_would_differ(
    bm25_pair: tuple[Index, dict[int, Index]], tmp_path: Path
) -> None:
    """Why the shards are scored with the corpus's statistics: a shard's own idf differs."""
    flat, sharded = bm25_pair
    idx = sharded[2]
    assert isinstance(idx, ShardedBM25)
    own = Index.build(idx.shards[0].corpus, kind="bm25", out=tmp_path / "own", progress=False)
    assert isinstance(own, BM25Index)
    rows = np.arange(len(own.corpus))[None, :]
    got = idx.shards[0].score_rows(["star orbit"], rows)
    assert not np.allclose(own.score_rows(["star orbit"], rows), got, atol=1e-5)
    np.testing.assert_allclose(
        got, flat.score_rows(["star orbit"], rows), atol=1e-5
    )  # shard 0 holds the first rows


# --- dense ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Index, dict[int, Index]]:
    root = tmp_path_factory.mktemp("dense")
    model = tiny_biencoder(0, tokenizer=tiny_tokenizer())
    opts = {"model": model, "progress": False, "shard_size": 7, "lang": "en"}
    flat = Index.build(_docs(), kind="dense", out=root / "flat", **opts)
    sharded = {
        n: Index.build(_docs(), kind="sharded", of="dense", shards=n, out=root / f"s{n}", **opts)
        for n in (2, 3)
    }
    return flat, sharded


def test_dense_sharded_equals_unsharded(dense_pair: tuple[Index, dict[int, Index]]) -> None:
    flat, sharded = dense_pair
    for n, idx in sharded.items():
        assert isinstance(idx, ShardedDense) and len(idx.shards) == n
        assert idx.faiss.ntotal == len(flat.corpus)
        for k in KS:
            for got, want in zip(idx.search(QUERIES, k), flat.search(QUERIES, k), strict=True):
                assert_same_hits(got, want)


def test_dense_sharded_score_rows(dense_pair: tuple[Index, dict[int, Index]]) -> None:
    flat, sharded = dense_pair
    assert isinstance(flat, DenseIndex)
    q = flat.encode_queries(QUERIES[:2])
    rows = np.array([[0, 39, 15, -1, 20], [7, 8, 33, 1, 2]])
    for idx in sharded.values():
        assert isinstance(idx, DenseIndex)
        np.testing.assert_allclose(idx.score_rows(q, rows), flat.score_rows(q, rows), atol=1e-5)


def test_ivf_shards_take_nprobe(tmp_path: Path) -> None:
    model = tiny_biencoder(0, tokenizer=tiny_tokenizer())
    idx = Index.build(
        _docs(),
        kind="sharded",
        of="dense",
        shards=2,
        out=tmp_path / "ivf",
        model=model,
        factory="IVF2,Flat",
        progress=False,
        lang="en",
    )
    assert isinstance(idx, ShardedDense)
    # every cell of every shard scanned: exhaustive, so the exact top-k of the corpus
    flat = idx.search(QUERIES, 5, nprobe=2)
    rows = np.arange(len(idx.corpus))
    q = idx.encode_queries(QUERIES)
    for i, hits in enumerate(flat):
        want = np.sort(idx.score_rows(q[i : i + 1], rows[None, :])[0])[::-1][:5]
        np.testing.assert_allclose([h.score for h in hits], want, atol=1e-5)


# --- phrase --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phrase_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Index, dict[int, Index]]:
    root = tmp_path_factory.mktemp("phrase")
    tiny = make_tiny_model(root / "tiny")
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    model_dir = m.save(root / "m")
    squad = write_squad(root / "tiny.json")
    # every vector, float16: a keep fraction would pick each shard's own threshold
    opts = {
        "model": str(model_dir),
        "progress": False,
        "lang": "en",
        "compress": "none",
        "keep": 1.0,
        # float32: bf16 vectors depend on the batch a window is encoded in (2e-5 apart here),
        # and a shard batches its own windows
        "bf16": False,
        "int8": False,  # int8 quantizes each batch's activations by that batch's range
    }
    flat = Index.build(f"squad:{squad}", kind="phrase", out=root / "flat", **opts)
    sharded = {
        n: Index.build(
            f"squad:{squad}", kind="sharded", of="phrase", shards=n, out=root / f"s{n}", **opts
        )
        for n in (2, 5)  # 5: one passage a shard
    }
    return flat, sharded


PHRASE_QUERIES = [
    "How far away is Alpha Centauri?",
    "Who created Python?",
    "How long is the Great Wall?",
    "Where did the café open?",
    "中国的首都是哪里？",
]


@pytest.mark.parametrize("unit", list(Unit))
def test_phrase_sharded_equals_unsharded(
    phrase_pair: tuple[Index, dict[int, Index]], unit: Unit
) -> None:
    flat, sharded = phrase_pair
    for n, idx in sharded.items():
        assert isinstance(idx, ShardedPhrase) and len(idx.shards) == n
        assert isinstance(idx, PhraseIndex) and idx.exact_mips == flat.exact_mips  # type: ignore[attr-defined]
        for k in (1, 3, 10, 50):
            got = idx.search(PHRASE_QUERIES, k, unit=unit, top_k=1000)
            want = flat.search(PHRASE_QUERIES, k, unit=unit, top_k=1000)
            for g, w in zip(got, want, strict=True):
                assert_same_hits(g, w)
            # the default MIPS depth, and an exact unit search, match too
            got = idx.search(PHRASE_QUERIES, k, unit=unit, exact=True)
            want = flat.search(PHRASE_QUERIES, k, unit=unit, exact=True)
            for g, w in zip(got, want, strict=True):
                assert_same_hits(g, w)


def test_phrase_sharded_scope_and_score_rows(phrase_pair: tuple[Index, dict[int, Index]]) -> None:
    flat, sharded = phrase_pair
    assert isinstance(flat, PhraseIndex)
    qs, qe = flat.encode_queries(PHRASE_QUERIES[:2])
    rows = np.array([[0, 4, -1], [1, 2, 3]])
    scope = [[0], [1, 3]]
    for idx in sharded.values():
        assert isinstance(idx, PhraseIndex)
        np.testing.assert_allclose(
            idx.score_rows(qs, qe, rows), flat.score_rows(qs, qe, rows), atol=1e-5
        )
        got = idx.search(PHRASE_QUERIES[:2], 3, scope_rows=scope)
        for g, w in zip(got, flat.search(PHRASE_QUERIES[:2], 3, scope_rows=scope), strict=True):
            assert_same_hits(g, w)


# --- building, opening, CLI ----------------------------------------------------------------


def test_sharded_layout_and_checks(bm25_pair: tuple[Index, dict[int, Index]]) -> None:
    _, sharded = bm25_pair
    idx = sharded[3]
    m = json.loads((idx.path / "index.json").read_text())
    assert m["kind"] == "sharded"
    parts = m["settings"]["sharding"]["shards"]
    assert [p["rows"] for p in parts] == [[0, 13], [13, 26], [26, 40]]
    assert m["settings"]["collection"]["n_docs"] == 40  # the shards' settings, global stats
    assert idx.kind.value == "bm25"  # it searches, evaluates and serves as a BM25 index
    assert [s["rows"] for s in idx.describe()["shards"]] == [[0, 13], [13, 26], [26, 40]]


def test_shard_of_another_corpus_is_refused(tmp_path: Path) -> None:
    a = Index.build(
        _docs(), kind="sharded", of="bm25", shards=2, out=tmp_path / "a", progress=False
    )
    b = Index.build(
        _docs(seed=1), kind="sharded", of="bm25", shards=2, out=tmp_path / "b", progress=False
    )
    m = json.loads((a.path / "index.json").read_text())
    m["settings"]["sharding"]["shards"][1]["path"] = str(b.path / "shards" / "00001")
    (a.path / "index.json").write_text(json.dumps(m))
    with pytest.raises(IndexMismatchError, match="not the bm25 index of rows"):
        Index.load(a.path)


def test_sharding_a_hybrid_index_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="not hybrid"):
        Index.build(_docs(), kind="sharded", of="hybrid", out=tmp_path / "h", progress=False)
    with pytest.raises(AnygrainError, match="kind of its shards"):
        Index.build(_docs(), kind="sharded", out=tmp_path / "h", progress=False)


def test_cli_index_shards_then_search(tmp_path: Path) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text(
        "\n".join(json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) for d in _docs())
    )
    runner = CliRunner()
    out = tmp_path / "idx"
    r = runner.invoke(
        app,
        ["index", str(src), "--kind", "bm25", "--shards", "3", "--out", str(out), "-q", "--json"],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["kind"] == "bm25" and d["shards"] == 3
    flat = tmp_path / "flat"
    r = runner.invoke(app, ["index", str(src), "--kind", "bm25", "--out", str(flat), "-q"])
    assert r.exit_code == 0, r.output
    a = runner.invoke(app, ["search", str(out), "star orbit", "-k", "25", "--json"])
    b = runner.invoke(app, ["search", str(flat), "star orbit", "-k", "25", "--json"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    ga = [json.loads(x) for x in a.stdout.splitlines()]
    gb = [json.loads(x) for x in b.stdout.splitlines()]
    assert 0 < len(ga) == len(gb) <= 25, (a.stdout, b.stdout)  # passages with a query word
    np.testing.assert_allclose([h["score"] for h in ga], [h["score"] for h in gb], atol=1e-5)
    r = runner.invoke(app, ["index", str(src), "--kind", "sharded", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--shards" in r.output
