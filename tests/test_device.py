"""``--device``: CPU runs as before; a GPU asked for where torch sees none is a clear error,
before any work; ``auto`` falls back to the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_phrase_helpers import write_squad
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.train.phrase import PhraseTrainConfig
from anygrain.train.phrase import train as train_phrase
from anygrain.utils.device import place, resolve_device

pytestmark = [
    pytest.mark.usefixtures("torch_one_thread"),
    pytest.mark.skipif(
        torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
    ),
]


def test_resolve_device() -> None:
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("CPU") == torch.device("cpu")
    for bad in ("cuda", "cuda:1"):
        with pytest.raises(AnygrainError, match="no CUDA GPU"):
            resolve_device(bad)
    with pytest.raises(AnygrainError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_place_moves_a_module_once() -> None:
    m = torch.nn.Linear(2, 2)
    assert place(m, "cpu") == torch.device("cpu") and m.weight.device.type == "cpu"


def test_cpu_build_and_search_equal_the_default(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    full = {"compress": "none", "keep": 1.0}  # the dump is kept: its vectors are compared
    a = Index.build(
        f"squad:{squad}", kind="phrase", out=tmp_path / "a", model=str(model_dir), **full
    )
    b = Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=tmp_path / "b",
        model=str(model_dir),
        progress=False,
        device="cpu",
        **full,
    )
    assert isinstance(a, PhraseIndex) and isinstance(b, PhraseIndex)
    for name in ("start.npy", "end.npy", "tokens.npy"):
        np.testing.assert_array_equal(
            np.load(a.path / "phrase" / name), np.load(b.path / "phrase" / name)
        )
    c = Index.load(b.path, device="cpu")
    qs = ["Who created Python?"]
    assert [h.span for h in c.search(qs, 3)[0]] == [h.span for h in a.search(qs, 3)[0]]


def test_cuda_is_refused_before_any_work(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    with pytest.raises(AnygrainError, match="no CUDA GPU"):
        Index.build(
            f"squad:{squad}",
            kind="phrase",
            out=out,
            model=str(model_dir),
            progress=False,
            device="cuda",
        )
    assert not out.exists()
    cfg = PhraseTrainConfig(
        train=[f"squad:{squad}"], out=str(tmp_path / "run"), model=str(model_dir), device="cuda"
    )
    with pytest.raises(AnygrainError, match="no CUDA GPU"):
        train_phrase(cfg, progress=False)
    assert not (tmp_path / "run").exists()


def test_cli_device(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    write_squad(
        tmp_path / "more.json",
        [("New", "A new passage about lighthouses.", [("What?", "lighthouses")])],
    )
    idx = Index.build(
        f"squad:{squad}", kind="phrase", out=tmp_path / "i", model=str(model_dir), progress=False
    )
    r = runner.invoke(
        app, ["search", str(idx.path), "Who created Python?", "--device", "cpu", "--json"]
    )
    assert r.exit_code == 0, r.output
    for cmd in (
        ["search", str(idx.path), "x", "--device", "cuda"],
        ["eval", str(idx.path), "--questions", f"squad:{squad}", "--device", "cuda"],
        [
            "index",
            f"squad:{squad}",
            "--kind",
            "phrase",
            "--model",
            str(model_dir),
            "--out",
            str(tmp_path / "n"),
            "--device",
            "cuda",
        ],
        ["add", str(idx.path), f"squad:{tmp_path / 'more.json'}", "--device", "cuda"],
    ):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 2 and "no CUDA GPU" in r.output, (cmd, r.output)
        assert "Traceback" not in r.output
    assert not (tmp_path / "n").exists()
