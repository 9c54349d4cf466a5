"""Fusion against direct computations of each definition."""

from __future__ import annotations

import numpy as np

from anygrain.composite.fusion import FusionConfig, FusionMethod, fuse_scores, rrf, union_candidates


def test_union_keeps_each_row_once() -> None:
    a = np.array([[3, 1, -1], [0, 2, 4]])
    b = np.array([[1, 5, 3], [-1, -1, -1]])
    u = union_candidates(a, b)
    assert sorted(u[0][u[0] >= 0].tolist()) == [1, 3, 5]
    assert sorted(u[1][u[1] >= 0].tolist()) == [0, 2, 4]


def test_zscore_fusion_matches_definition() -> None:
    rng = np.random.default_rng(1)
    cand = np.array([[4, 7, 9, 2, 5]])
    sp = rng.uniform(0, 20, size=(1, 5))
    de = rng.uniform(-1, 1, size=(1, 5))
    rows, scores = fuse_scores(cand, sp, de, FusionConfig(FusionMethod.ZSCORE, 1.0), k=5)
    z = lambda v: (v - v.mean()) / v.std()  # noqa: E731
    want = z(sp[0]) + z(de[0])
    order = np.argsort(-want)
    assert rows[0].tolist() == cand[0][order].tolist()
    np.testing.assert_allclose(scores[0], want[order], rtol=1e-5)


def test_raw_fusion_is_dpr_formula() -> None:
    cand = np.array([[0, 1, 2]])
    sp = np.array([[10.0, 12.0, 11.0]])
    de = np.array([[0.9, 0.1, 0.5]])
    rows, scores = fuse_scores(cand, sp, de, FusionConfig(FusionMethod.RAW), k=3)
    want = sp[0] + 1.1 * de[0]
    assert rows[0].tolist() == np.argsort(-want).tolist()
    np.testing.assert_allclose(
        sorted(scores[0], reverse=True), sorted(want, reverse=True), rtol=1e-6
    )


def test_rrf_matches_definition() -> None:
    a = np.array([[10, 11, 12, 13]])
    b = np.array([[12, 14, 10, -1]])
    rows, scores = rrf(a, b, k=5)
    ref: dict[int, float] = {}
    for lst in (a[0], b[0]):
        for rank, r in enumerate(lst, 1):
            if r >= 0:
                ref[int(r)] = ref.get(int(r), 0) + 1 / (60 + rank)
    want = sorted(ref.items(), key=lambda x: -x[1])
    assert rows[0].tolist() == [r for r, _ in want]
    np.testing.assert_allclose(scores[0], [s for _, s in want], rtol=1e-6)


def test_padding_never_wins() -> None:
    cand = np.array([[3, -1, -1]])
    rows, _ = fuse_scores(
        cand, np.array([[1.0, 0, 0]]), np.array([[0.5, 0, 0]]), FusionConfig(), k=3
    )
    assert rows[0].tolist() == [3, -1, -1]
