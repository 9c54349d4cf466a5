"""The shared trainer runner: one error line (exit 2), Ctrl-C exit 130, skipped records counted."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from anygrain import cli_common
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy, InputError


def test_success_reports_skipped_records_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def train(errors: ErrorLog) -> Path:
        errors.handle(InputError("no answer", path="t.json", line=7, field="answers"))
        return tmp_path

    assert cli_common.run_trainer(train, ErrorPolicy.SKIP, "trained x") == tmp_path
    err = capsys.readouterr().err
    assert "skipped 1 malformed record" in err and "t.json" in err and "answers" in err
    assert f"trained x → {tmp_path}" in err.replace("\n", "")


def test_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def train(errors: ErrorLog) -> Path:
        errors.handle(InputError("no answer", path="t.json", line=7, field="answers"))
        return Path()

    with pytest.raises(typer.Exit) as e:
        cli_common.run_trainer(train, ErrorPolicy.STOP, "trained x")
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "t.json" in err and "Traceback" not in err


def test_interrupt_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    def train(errors: ErrorLog) -> Path:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as e:
        cli_common.run_trainer(train, ErrorPolicy.STOP, "trained x")
    assert e.value.exit_code == 130
    assert "rerun the same command to resume" in capsys.readouterr().err


def test_config_errors_are_reported_not_raised() -> None:
    def train(errors: ErrorLog) -> Path:
        raise AnygrainError("invalid phrase training config: lr must be > 0")

    with pytest.raises(typer.Exit) as e:
        cli_common.run_trainer(train, ErrorPolicy.STOP, "trained x")
    assert e.value.exit_code == 2
