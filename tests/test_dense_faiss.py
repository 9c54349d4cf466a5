"""FAISS layer: exactness of Flat, recall of approximate indexes, clear training errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from dense_helpers import single_threaded

from anygrain.errors import AnygrainError
from anygrain.vectors.factory import DEFAULT_POLICY, check_factory, default_nprobe, parse_factory
from anygrain.vectors.faiss_index import FaissIndex


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


def _data(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute(x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    s = q @ x.T
    rows = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return rows, np.take_along_axis(s, rows, axis=1)


def _recall(rows: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(rows, truth, strict=True)]))


def test_flat_equals_brute_force() -> None:
    x, q = _data(2000), _data(50, seed=1)
    fx = FaissIndex.build(x, "Flat")
    rows, scores = fx.search(q, 10)
    b_rows, b_scores = _brute(x, q, 10)
    np.testing.assert_array_equal(rows, b_rows)
    np.testing.assert_allclose(scores, b_scores, atol=1e-5)
    assert rows.dtype == np.int64 and (np.diff(scores, axis=1) <= 1e-7).all()


def test_flat_pads_when_k_exceeds_n() -> None:
    fx = FaissIndex.build(_data(5), "Flat")
    rows, _ = fx.search(_data(2, seed=3), 8)
    assert (rows[:, :5] >= 0).all() and (rows[:, 5:] == -1).all()


@pytest.mark.parametrize(
    ("factory", "opts", "min_recall"),
    [
        ("HNSW32", {"ef_search": 128}, 0.9),
        ("IVF32,Flat", {"nprobe": 32}, 0.999),
        ("IVF32,Flat", {"nprobe": 8}, 0.5),
        ("IVF16,PQ8", {"nprobe": 16}, 0.3),
        ("OPQ8,IVF8,PQ8", {"nprobe": 8}, 0.3),
    ],
)
def test_approximate_recall(factory: str, opts: dict[str, int], min_recall: float) -> None:
    x, q = _data(1500 if "OPQ" in factory else 4000), _data(40, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fx = FaissIndex.build(x, factory)
    rows, _ = fx.search(q, 10, **opts)
    assert _recall(rows, _brute(x, q, 10)[0]) >= min_recall


def test_nprobe_per_call_does_not_stick() -> None:
    x, q = _data(4000), _data(40, seed=2)
    fx = FaissIndex.build(x, "IVF64,Flat")
    assert fx.nprobe == default_nprobe(64) == 8
    truth = _brute(x, q, 10)[0]
    assert _recall(fx.search(q, 10, nprobe=64)[0], truth) > 0.999
    assert fx.nprobe == 8
    assert _recall(fx.search(q, 10, nprobe=1)[0], truth) < _recall(fx.search(q, 10)[0], truth)


def test_search_options_rejected_for_wrong_kind() -> None:
    fx = FaissIndex.build(_data(100), "Flat")
    with pytest.raises(AnygrainError, match="nprobe applies to IVF"):
        fx.search(_data(1), 3, nprobe=4)
    with pytest.raises(AnygrainError, match="ef_search applies to HNSW"):
        fx.search(_data(1), 3, ef_search=4)


def test_too_few_training_points_is_a_clear_error() -> None:
    with pytest.raises(AnygrainError) as e:
        FaissIndex.build(_data(100), "IVF256,Flat")
    msg = str(e.value)
    assert "at least 256 training vectors" in msg and "only 100" in msg and "'Flat'" in msg
    with pytest.raises(AnygrainError, match="PQ with 8-bit codes needs >= 256"):
        FaissIndex.build(_data(200), "IVF4,PQ8")
    with pytest.raises(AnygrainError, match="divide the vector dimension 32"):
        check_factory("IVF4,PQ7", 10_000, 32)


def test_few_training_points_warns_once() -> None:
    with pytest.warns(UserWarning, match="recommends at least 2496"):
        FaissIndex.build(_data(1000), "IVF64,Flat")


def test_bad_factory_string() -> None:
    with pytest.raises(AnygrainError, match="FAISS cannot build factory"):
        FaissIndex.build(_data(100), "Nonsense12")


def test_save_and_mmap_load_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    x, q = _data(3000), _data(20, seed=5)
    for factory in ("Flat", "HNSW32", "IVF16,Flat", "IVF16,PQ8"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fx = FaissIndex.build(x, factory)
        fx.save(tmp_path / "f.index")
        back = FaissIndex.load(tmp_path / "f.index", factory=factory)
        a, b = fx.search(q, 5), back.search(q, 5)
        np.testing.assert_array_equal(a[0], b[0])
        assert back.nprobe == fx.nprobe and back.ef_search == fx.ef_search
    with pytest.raises(AnygrainError, match="missing"):
        FaissIndex.load(tmp_path / "nope.index")


def test_default_factory_rule() -> None:
    assert DEFAULT_POLICY.factory(50_000, 384) == "Flat"
    assert DEFAULT_POLICY.factory(1_000_000, 768) == "IVF4000,Flat"
    assert DEFAULT_POLICY.factory(21_000_000, 768) == "IVF18330,PQ96"
    assert DEFAULT_POLICY.factory(21_000_000, 384) == "IVF18330,PQ48"


def test_one_factory_policy_gives_each_kind_its_rule() -> None:
    """Dense and phrase indexes follow one rule with their own numbers: phrase vectors are
    float16 (SQfp16) in sqrt(N) cells rounded down, PQ from 20M whatever the dimension."""
    from anygrain.phrase.compress import PHRASE_POLICY, ivf_prefix

    assert PHRASE_POLICY.factory(50_000, 384) == "SQfp16"
    assert PHRASE_POLICY.factory(1_000_000, 384) == "IVF1000,SQfp16"
    assert PHRASE_POLICY.factory(110_000, 384) == "IVF331,SQfp16"  # dense rounds: 1327 = 4 x 331.7
    assert DEFAULT_POLICY.factory(110_000, 384) == "IVF1327,Flat"
    assert PHRASE_POLICY.factory(21_000_000, 384) == "IVF4582,PQ48"
    # a prime dimension: one PQ byte would code 101 dimensions; dense keeps Flat cells
    assert PHRASE_POLICY.factory(21_000_000, 101) == "IVF4582,PQ1"
    assert DEFAULT_POLICY.factory(21_000_000, 101) == "IVF18330,Flat"
    assert ivf_prefix(99_999) == "" and ivf_prefix(100_000) == "IVF316,"
    info = parse_factory("OPQ16,IVF1024_HNSW32,PQ16x4")
    assert (info.opq_m, info.nlist, info.pq_m, info.pq_bits, info.hnsw_quantizer) == (
        16,
        1024,
        16,
        4,
        True,
    )


@pytest.mark.parametrize("spec", ["IVF16,SQ8", "OPQ8,IVF16,PQ8", "IDMap,IVF16,Flat"])
def test_batched_adds_search_as_one_add(spec: str) -> None:
    """Adds in batches (lists reserved at their final size where the index is a plain IVF,
    as usual under an id map) give the index one add_with_ids gives."""
    import faiss

    from anygrain.vectors.adding import add_vectors
    from anygrain.vectors.sources import ArrayVectors

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    want = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want.train(x)
    got = faiss.clone_index(want)
    want.add_with_ids(x, np.arange(3000, dtype=np.int64))
    add_vectors(got, ArrayVectors(x), 0, 3000, 700, False, with_ids=True)
    assert got.ntotal == want.ntotal == 3000
    for index in (want, got):
        faiss.extract_index_ivf(index).nprobe = 4
    d1, i1 = want.search(x[:20], 5)
    d2, i2 = got.search(x[:20], 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(d1, d2, rtol=1e-6)
