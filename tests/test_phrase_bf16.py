"""bfloat16 phrase passages by default where the CPU has them natively (issue 35): the build
resolves ``bf16=None`` (auto) and records what ran; ``--bf16/--no-bf16`` choose; a dump caps
oneDNN's primitive cache before its first encode; ``add`` records each add's precision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.index.settings import BuildOptions
from anygrain.phrase.build import PhraseSettings, resolve_bf16
from anygrain.utils import precision

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TORCH_MODEL = SimpleNamespace(runtime="torch")


def _settings(out: Path) -> dict[str, object]:
    return json.loads((out / "index.json").read_text())["settings"]


def test_auto_follows_the_runtime_the_cpu_and_the_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    cpu = BuildOptions(device="cpu")
    assert resolve_bf16(None, TORCH_MODEL, cpu) is True  # type: ignore[arg-type]
    # float32 where ONNX Runtime's passage graph encodes: a base install's model, --runtime onnx
    graph = SimpleNamespace(runtime="onnx")
    assert resolve_bf16(None, graph, cpu) is False  # type: ignore[arg-type]
    onnx = BuildOptions(device="cpu", runtime="onnx")
    assert resolve_bf16(None, TORCH_MODEL, onnx) is False  # type: ignore[arg-type]
    # Ray actors run on CPUs this process cannot see
    ray = BuildOptions(device="cpu", executor="ray")
    assert resolve_bf16(None, TORCH_MODEL, ray) is False  # type: ignore[arg-type]
    # what is given is what runs; bf16 where the graph would encode is refused at once
    assert resolve_bf16(False, TORCH_MODEL, cpu) is False  # type: ignore[arg-type]
    assert resolve_bf16(True, TORCH_MODEL, cpu) is True  # type: ignore[arg-type]
    for model, options in ((graph, cpu), (TORCH_MODEL, onnx)):
        with pytest.raises(AnygrainError, match="bf16"):
            resolve_bf16(True, model, options)  # type: ignore[arg-type]
    monkeypatch.setattr(precision, "native_bf16", lambda: False)  # emulated: several x slower
    assert resolve_bf16(None, TORCH_MODEL, cpu) is False  # type: ignore[arg-type]


def test_the_setting_defaults_to_auto() -> None:
    assert PhraseSettings().bf16 is None
    assert PhraseSettings.from_options("phrase", {"bf16": False}).bf16 is False


def test_auto_is_recorded_resolved(
    model_dir: Path, squad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index records the precision that ran; ``settings.build`` what was asked (auto)."""
    for native in (True, False):
        monkeypatch.setattr(precision, "native_bf16", lambda native=native: native)
        out = tmp_path / f"native-{native}"
        Index.build(
            f"squad:{squad}",
            kind="phrase",
            out=out,
            model=str(model_dir),
            progress=False,
            device="cpu",
            runtime="torch",
            compress="none",  # tiny corpora: the research index whatever the defaults
            keep=1.0,
        )
        s = _settings(out)
        assert s["bf16"] is native
        assert s["build"]["bf16"] is None  # type: ignore[index]


def test_the_command_line_chooses(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    for flag, want in (("--no-bf16", False), ("--bf16", True)):
        out = tmp_path / flag
        args = ["index", f"squad:{squad}", "--kind", "phrase", "--out", str(out)]
        args += ["--compress", "none", "--keep", "1"]  # tiny corpus: whatever the defaults
        r = run(app, [*args, "--model", str(model_dir), "--device", "cpu", flag, "-q"])
        assert r.exit_code == 0, r.output
        s = _settings(out)
        assert s["bf16"] is want and s["build"]["bf16"] is want  # type: ignore[index]
    # the graph computes in float32: asking it for bf16 is refused, not recorded falsely
    out = tmp_path / "onnx"
    args = ["index", f"squad:{squad}", "--kind", "phrase", "--out", str(out), "--bf16"]
    r = run(app, [*args, "--model", str(model_dir), "--runtime", "onnx", "-q"])
    assert r.exit_code != 0 and "bf16" in r.output and not (out / "index.json").exists()


def test_add_records_the_precision_of_its_passages(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    """On torch, passages added to a bf16 index are encoded in bf16; ``--runtime onnx``
    encodes them in float32, and ``settings.adds`` says which."""
    from test_phrase_helpers import PARAGRAPHS, squad_parts

    first, more, last = squad_parts(tmp_path, 2, 3)
    out = tmp_path / "idx"
    run = CliRunner().invoke
    args = ["index", f"squad:{first}", "--kind", "phrase", "--out", str(out), "--bf16"]
    args += ["--compress", "none", "--keep", "1"]  # tiny corpus: whatever the defaults
    r = run(app, [*args, "--model", str(model_dir), "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    assert "adds" not in _settings(out)
    r = run(app, ["add", str(out), f"squad:{more}", "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    r = run(app, ["add", str(out), f"squad:{last}", "--runtime", "onnx", "-q"])
    assert r.exit_code == 0, r.output
    s = _settings(out)
    assert s["bf16"] is True
    n_more, n_last = len(PARAGRAPHS[2:3]), len(PARAGRAPHS[3:])
    # the second add resolves int8 as a build would (auto_int8)
    assert s["adds"] == [
        {"passages": n_more, "bf16": True, "int8": False},
        {"passages": n_last, "bf16": False, "int8": precision.auto_int8()},
    ]


# a phrase build in a fresh process without the variable, then, in the same process, one
# bf16 matmul shape, eleven others, and the first again: oneDNN's cache keeps it (a hit)
# unless the dump capped the cache at 8 before oneDNN first used it
CAPPED = """
import os, sys, torch
from anygrain.index.base import Index
assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ
Index.build(f"squad:{sys.argv[1]}", kind="phrase", out=sys.argv[2], model=sys.argv[3],
            progress=False, device="cpu", runtime="torch", bf16=True, compress="none",
            keep=1.0)
print("capacity", os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "unset"), flush=True)
lin = torch.nn.Linear(48, 40)
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    for n in [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3]:
        lin(torch.randn(n, 48))
"""


def test_a_dump_caps_onednns_cache_before_its_first_encode(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    if not precision.native_bf16():
        pytest.skip("bf16 matmuls are oneDNN primitives only where the CPU has bf16 natively")
    env = {k: v for k, v in os.environ.items() if k != precision.ONEDNN_CACHE_VARIABLE}
    env.update(OMP_NUM_THREADS="1", ONEDNN_VERBOSE="all")
    r = subprocess.run(
        [sys.executable, "-c", CAPPED, str(squad), str(tmp_path / "idx"), str(model_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"capacity {precision.DUMP_ONEDNN_CACHE}" in r.stdout
    after = r.stdout.split("capacity", 1)[1]
    made = [ln for ln in after.splitlines() if ",create:" in ln and ",3x48:48x40," in ln]
    assert len(made) == 2, made  # the first shape, made twice
    assert ",create:cache_miss," in made[1], made  # evicted: the cache holds 8
