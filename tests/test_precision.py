"""bf16 autocast helper: warns once on CPUs without native bfloat16, never changes dtype rules."""

from __future__ import annotations

import warnings

import pytest
import torch

from anygrain.utils import precision


@pytest.fixture(autouse=True)
def _reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "_warned", False)


def test_no_warning_without_bf16() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with precision.cpu_autocast(False):
            y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32


def test_warns_once_on_cpu_without_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    with (
        pytest.warns(precision.SlowBf16Warning, match="no native bfloat16"),
        precision.cpu_autocast(True),
    ):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    # autocast still ran in bf16: the flag is honoured, only announced
    assert y.dtype == torch.bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with precision.cpu_autocast(True):
            pass


def test_silent_on_cpu_with_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.bf16_note() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with precision.cpu_autocast(True):
            pass


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.ff = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.ff(self.norm(self.emb(ids)))


def test_bf16_linears_share_the_rest_and_stay_close() -> None:
    torch.manual_seed(0)
    m = _Tiny().eval()
    c = precision.bf16_linears(m)
    assert c.emb.weight is m.emb.weight and c.norm.weight is m.norm.weight  # shared, not copied
    assert isinstance(c.ff[0], precision.Bf16Linear) and c.ff[0].weight.dtype == torch.bfloat16
    assert isinstance(m.ff[0], torch.nn.Linear) and m.ff[0].weight.dtype == torch.float32
    ids = torch.randint(0, 50, (4, 7))
    with torch.inference_mode():
        want, got = m(ids), c(ids)
    assert got.dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(got.flatten(0, 1), want.flatten(0, 1))
    assert cos.min() > 0.999 and not torch.equal(got, want)


def test_weights_version_changes_with_the_weights() -> None:
    m = _Tiny()
    v = precision.weights_version(m)
    assert precision.weights_version(m) == v
    with torch.no_grad():
        m.ff[0].weight.add_(1.0)
    assert precision.weights_version(m) != v
