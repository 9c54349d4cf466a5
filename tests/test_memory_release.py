"""Weights mapped from a file give their resident pages back after loading
(:func:`anygrain.utils.memory.release_mapped`, :func:`anygrain.models.base.release_weight_pages`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from anygrain.models.base import release_weight_pages
from anygrain.utils.memory import file_mappings, release_mapped

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/maps")


def _rss_file_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def test_a_mapped_weight_gives_its_pages_back(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    path = tmp_path / "w.safetensors"
    save_file({"w": torch.randn(64 * 1024, 256)}, str(path))  # 64 MiB
    weights = load_file(str(path))  # mapped from the file, not copied
    module = torch.nn.Linear(256, 64 * 1024, bias=False)
    module.weight = torch.nn.Parameter(weights["w"], requires_grad=False)
    float(module.weight.sum())  # read every page, as a fingerprint does
    before = _rss_file_kb()
    advised = release_weight_pages(module)
    assert advised >= 60 * 2**20
    assert _rss_file_kb() < before - 40 * 1024  # at least 40 of the 64 MiB went
    # the weights read back unchanged
    assert torch.equal(module.weight, load_file(str(path))["w"])


def test_memory_not_mapped_from_a_file_is_left_alone() -> None:
    a = np.ones(1 << 20, dtype=np.float32)
    assert release_mapped([(a.ctypes.data, a.nbytes)]) == 0
    assert float(a.sum()) == 1 << 20
    assert all(start < end for start, end in file_mappings())
