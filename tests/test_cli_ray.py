"""``anygrain index --ray``: which options go together, and the executor it builds (no Ray run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from anygrain import api
from anygrain.cli.main import app
from anygrain.encode.ray_executor import RayConfig, RayExecutor
from anygrain.errors import AnygrainError

runner = CliRunner()


def test_ray_options_need_an_encoding_kind_and_each_other(squad_file: Path, tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["index", str(squad_file), "--out", str(tmp_path / "a"), "--ray", "local"]
    )
    assert (
        r.exit_code != 0 and "--ray encodes dense, hybrid and phrase indexes, not bm25" in r.output
    )
    r = runner.invoke(
        app,
        [
            "index",
            str(squad_file),
            "--kind",
            "dense",
            "--out",
            str(tmp_path / "b"),
            "--workers",
            "3",
        ],
    )
    assert r.exit_code != 0 and "--workers and --retries apply with --ray" in r.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_ray_option_reaches_the_build_as_an_executor(
    squad_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_build(source: Any, **kw: Any) -> Any:
        seen.update(kw)
        raise AnygrainError("stop here")

    monkeypatch.setattr(api, "build_index", fake_build)
    args = ["index", str(squad_file), "--kind", "phrase", "--out", str(tmp_path / "p")]
    r = runner.invoke(app, [*args, "--ray", "auto", "--workers", "3", "--retries", "0"])
    assert "stop here" in r.output
    assert isinstance(seen["executor"], RayExecutor)
    assert seen["executor"].config == RayConfig(address="auto", workers=3, retries=0)


def test_ray_config_is_checked() -> None:
    with pytest.raises(AnygrainError, match="at least 1"):
        RayConfig(workers=0)
    with pytest.raises(AnygrainError, match="0 or more"):
        RayConfig(retries=-1)
