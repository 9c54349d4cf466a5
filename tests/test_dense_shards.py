"""Resumable shard encoding: an interrupted run resumes to the same vectors; foreign shards are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer

from anygrain.corpus.records import SourceDocument
from anygrain.corpus.store import CorpusStore
from anygrain.dense.shards import SHARDS_MANIFEST, ShardSet, encode_corpus
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.models.biencoder import BiEncoder

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok) -> BiEncoder:  # type: ignore[no-untyped-def]
    return tiny_biencoder(0, tokenizer=tok)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> CorpusStore:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    docs = [
        SourceDocument(
            f"d{i}", f"Title {i}", " ".join(rng.choice(WORDS, size=int(rng.integers(3, 40))))
        )
        for i in range(23)
    ]
    return CorpusStore.build(docs, tmp_path_factory.mktemp("c") / "corpus", progress=False)


class Interrupt(KeyboardInterrupt):
    pass


def _stop_after(k: int):  # type: ignore[no-untyped-def]
    def hook(i: int, n: int) -> None:
        if i == k:
            raise Interrupt

    return hook


def test_uninterrupted_matches_direct_encoding(
    store: CorpusStore, model: BiEncoder, tmp_path: Path
) -> None:
    s = encode_corpus(store, model, tmp_path / "v", shard_size=10, progress=False)
    assert len(s) == len(store) == 23 and [x.n for x in s.shards] == [10, 10, 3]
    direct = np.concatenate(
        [
            model.encode_passages(store.texts(range(a, b)), store.titles(range(a, b)))
            for a, b in ((0, 10), (10, 20), (20, 23))
        ]
    )
    np.testing.assert_array_equal(s.concatenate(), direct)
    assert isinstance(s.shard(0), np.memmap)
    m = json.loads((tmp_path / "v" / SHARDS_MANIFEST).read_text())
    assert m["complete"] and m["model_fingerprint"] == model.passage_fingerprint()
    assert m["corpus_checksum"] == store.checksum and m["dim"] == 32


def test_resume_after_interrupt(
    store: CorpusStore, model: BiEncoder, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    full = encode_corpus(
        store, model, tmp_path / "full", shard_size=10, progress=False
    ).concatenate()
    out = tmp_path / "v"
    with pytest.raises(Interrupt):
        encode_corpus(store, model, out, shard_size=10, progress=False, on_shard=_stop_after(1))
    assert sorted(p.name for p in out.glob("vectors-*.npy")) == [
        "vectors-00000.npy",
        "vectors-00001.npy",
    ]
    with pytest.raises(AnygrainError, match="stopped after 2 of 3 shards"):
        ShardSet.open(out)
    calls: list[int] = []
    orig = model.passage.encode

    def counting(texts, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return orig(texts, *a, **kw)

    monkeypatch.setattr(model.passage, "encode", counting)
    resumed = encode_corpus(store, model, out, shard_size=10, progress=False)
    assert calls == [3]  # only the missing shard was encoded
    np.testing.assert_array_equal(resumed.concatenate(), full)


def test_crash_mid_shard_leaves_no_partial_file(
    store: CorpusStore, model: BiEncoder, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "v"
    orig = model.passage.encode
    n = {"calls": 0}

    def crash_on_second(texts, *a, **kw):  # type: ignore[no-untyped-def]
        n["calls"] += 1
        if n["calls"] == 2:
            raise RuntimeError("power cut")
        return orig(texts, *a, **kw)

    monkeypatch.setattr(model.passage, "encode", crash_on_second)
    with pytest.raises(RuntimeError):
        encode_corpus(store, model, out, shard_size=10, progress=False)
    monkeypatch.setattr(model.passage, "encode", orig)
    assert [p.name for p in out.iterdir() if p.suffix != ".json"] == ["vectors-00000.npy"]
    # A finished shard that was truncated since is re-encoded, not trusted.
    f = out / "vectors-00000.npy"
    f.write_bytes(f.read_bytes()[:100])
    s = encode_corpus(store, model, out, shard_size=10, progress=False)
    np.testing.assert_array_equal(
        s.concatenate(),
        encode_corpus(store, model, tmp_path / "ref", shard_size=10, progress=False).concatenate(),
    )


def test_refuses_to_resume_other_model_or_settings(
    store: CorpusStore, model: BiEncoder, tok, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "v"
    with pytest.raises(Interrupt):
        encode_corpus(store, model, out, shard_size=10, progress=False, on_shard=_stop_after(0))
    other = tiny_biencoder(1, tokenizer=tok)
    with pytest.raises(IndexMismatchError, match="model_fingerprint"):
        encode_corpus(store, other, out, shard_size=10, progress=False)
    with pytest.raises(IndexMismatchError, match="shard_size"):
        encode_corpus(store, model, out, shard_size=5, progress=False)
    assert len(encode_corpus(store, model, out, shard_size=10, progress=False)) == 23


def test_refuses_other_corpus(store: CorpusStore, model: BiEncoder, tmp_path: Path) -> None:
    out = tmp_path / "v"
    encode_corpus(store, model, out, shard_size=10, progress=False)
    docs = [SourceDocument("x", "X", "a different corpus entirely")]
    other = CorpusStore.build(docs, tmp_path / "c2", progress=False)
    with pytest.raises(IndexMismatchError, match="corpus_checksum"):
        encode_corpus(other, model, out, shard_size=10, progress=False)


def test_float16_rows_and_sample(store: CorpusStore, model: BiEncoder, tmp_path: Path) -> None:
    s32 = encode_corpus(store, model, tmp_path / "a", shard_size=7, progress=False)
    s16 = encode_corpus(store, model, tmp_path / "b", shard_size=7, dtype="float16", progress=False)
    assert s16.dtype == np.float16 and s16.shard(0).dtype == np.float16
    np.testing.assert_allclose(s16.concatenate(), s32.concatenate(), atol=2e-3)
    rows = np.array([22, 0, 7, 6, 13])
    np.testing.assert_array_equal(s32.rows(rows), s32.concatenate()[rows])
    assert s32.sample(5).shape == (5, 32) and s32.sample(100).shape == (23, 32)
    batches = list(s32.iter_batches(4))
    assert [b for b, _ in batches][:3] == [0, 4, 7] and all(
        x.dtype == np.float32 for _, x in batches
    )
    with pytest.raises(AnygrainError, match="dtype"):
        encode_corpus(store, model, tmp_path / "c", dtype="int8")


def test_save_vectors_is_what_encode_corpus_resumes(
    store: CorpusStore, model: BiEncoder, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from anygrain.dense.shards import save_vectors

    ref = encode_corpus(store, model, tmp_path / "ref", shard_size=10, progress=False)
    saved = save_vectors(ref.concatenate(), store, model, tmp_path / "v", shard_size=10)
    assert [s.nbytes for s in saved.shards] == [s.nbytes for s in ref.shards]
    monkeypatch.setattr(model.passage, "encode", lambda *a, **k: pytest.fail("re-encoded"))
    again = encode_corpus(store, model, tmp_path / "v", shard_size=10, progress=False)
    np.testing.assert_array_equal(again.concatenate(), ref.concatenate())
    with pytest.raises(AnygrainError, match="shape"):
        save_vectors(ref.concatenate()[:5], store, model, tmp_path / "w")
