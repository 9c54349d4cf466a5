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
