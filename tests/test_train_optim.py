"""Gradient clipping: global matches torch's clip_grad_norm_; per side clips each side."""

from __future__ import annotations

import pytest
import torch

from anygrain.train.optim import GradClip, clip_gradients


def _sides(scale_a: float, scale_b: float) -> dict[str, list[torch.nn.Parameter]]:
    g = torch.Generator().manual_seed(0)
    sides = {}
    for name, scale in (("a", scale_a), ("b", scale_b)):
        ps = [torch.nn.Parameter(torch.zeros(3, 4)), torch.nn.Parameter(torch.zeros(5))]
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * scale
        sides[name] = ps
    return sides


def _norm(ps: list[torch.nn.Parameter]) -> float:
    return float(torch.cat([p.grad.flatten() for p in ps]).norm())  # type: ignore[union-attr]


def test_global_clipping_matches_torch() -> None:
    ours, ref = _sides(10.0, 0.1), _sides(10.0, 0.1)
    norms = clip_gradients(ours, 1.0, GradClip.GLOBAL)
    total = torch.nn.utils.clip_grad_norm_([p for ps in ref.values() for p in ps], 1.0)
    assert norms["a"] ** 2 + norms["b"] ** 2 == pytest.approx(float(total) ** 2, rel=1e-5)
    for name in ours:
        for p, q in zip(ours[name], ref[name], strict=True):
            assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
    # The large side dominated the one norm, so the small side was scaled down ~30x too.
    assert _norm(ours["b"]) < 0.1 * norms["b"]


def test_per_side_clipping_leaves_a_small_side_alone() -> None:
    sides = _sides(10.0, 0.1)
    before_b = _norm(sides["b"])
    norms = clip_gradients(sides, 1.0, GradClip.PER_SIDE)
    assert norms["b"] == pytest.approx(before_b, rel=1e-6)
    assert _norm(sides["a"]) == pytest.approx(1.0, rel=1e-4)
    assert _norm(sides["b"]) == pytest.approx(before_b, rel=1e-6)


def test_zero_max_norm_only_measures() -> None:
    sides = _sides(10.0, 0.1)
    before = {k: _norm(v) for k, v in sides.items()}
    norms = clip_gradients(sides, 0.0, GradClip.PER_SIDE)
    assert norms == pytest.approx(before, rel=1e-6)
    assert {k: _norm(v) for k, v in sides.items()} == pytest.approx(before, rel=1e-6)
