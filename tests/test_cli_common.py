"""The shared trainer runner: one error line (exit 2), Ctrl-C exit 130, skipped records counted;
and trainer options generated from config dataclasses."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from anygrain.cli import common as cli_common
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy, InputError
from anygrain.train.saved_config import option


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


class _Color(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class _Config:
    data: list[str] = option(help="Data files; repeatable")
    out: str = option(help="Where to write", path=True)
    color: str = option("red", help="Which colour", choices=_Color)
    steps: int = option(3, help="How many steps")
    rate: float | None = option(None, help="A rate")
    fast: bool = option(False, help="Go fast")
    lazy: bool = option(False, help="Idle", flags="--lazy")
    extra: list[str] = option(help="More; repeatable", factory=list)
    hidden: int = 7  # no option


def _app(got: dict[str, Any]) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @cli_common.config_options(
        _Config, ("data", "out", "color", "steps", "rate", "fast", "lazy", "extra")
    )
    def cmd(own: int = 1, **settings: Any) -> None:
        got.update(settings, own=own)

    app.command("other")(lambda: None)
    return app


def test_config_options_take_type_default_and_help_from_the_field(tmp_path: Path) -> None:
    got: dict[str, Any] = {}
    app = _app(got)
    r = CliRunner().invoke(app, ["cmd", "--data", "a", "--data", "b", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert got == {
        "data": ["a", "b"],
        "out": str(tmp_path),  # a path on the command line, a string in the config
        "color": "red",  # the enum's value, as the config stores it
        "steps": 3,
        "rate": None,
        "fast": False,
        "lazy": False,
        "extra": [],
        "own": 1,
    }
    assert _Config(**{k: v for k, v in got.items() if k != "own"}).steps == 3
    args = ["cmd", "--data", "a", "--out", "o", "--color", "blue", "--steps", "5", "--rate"]
    r = CliRunner().invoke(app, [*args, "0.5", "--fast", "--lazy", "--extra", "x", "--own", "2"])
    assert r.exit_code == 0, r.output
    assert (got["color"], got["steps"], got["rate"], got["fast"], got["lazy"]) == (
        "blue", 5, 0.5, True, True
    )  # fmt: skip
    assert got["extra"] == ["x"] and got["own"] == 2
    bad = CliRunner().invoke(app, ["cmd", "--data", "a", "--out", "o", "--color", "green"])
    assert bad.exit_code == 2 and "green" in bad.output
    missing = CliRunner().invoke(app, ["cmd", "--out", "o"])
    assert missing.exit_code == 2 and "--data" in missing.output
    help_ = CliRunner().invoke(app, ["cmd", "--help"], env={"COLUMNS": "200"}).output
    assert "How many steps" in help_ and "--no-fast" in help_ and "--no-lazy" not in help_
    assert "--hidden" not in help_ and "red|blue" in help_


def test_config_options_refuse_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field"):
        cli_common.config_options(_Config, ("steps", "speed"))


@pytest.mark.parametrize("command", ["dpr", "phrase", "phrase-query-side", "reader"])
def test_every_trainer_takes_threads_from_its_config(command: str, tmp_path: Path) -> None:
    from anygrain.cli.main import app

    args = ["train", command, "--train", str(tmp_path / "t.json"), "--out", str(tmp_path / "o")]
    if command == "phrase-query-side":
        args.insert(2, str(tmp_path / "index"))
    r = CliRunner().invoke(app, [*args, "--threads", "0", "-q"])
    assert r.exit_code == 2 and "threads must be >= 1" in r.output


def test_trainer_command_adds_the_run_options_and_runs_the_trainer(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    used: list[Path] = []

    @cli_common.trainer_command("trained x", then=used.append)
    def cmd(lr: float = 0.1) -> cli_common.Trainer:
        if lr <= 0:  # a refusal in the command's own checks: one line, exit 2
            raise AnygrainError("lr must be > 0")

        def trainer(**run: Any) -> Path:
            calls.append({"lr": lr, **run})
            return tmp_path

        return trainer

    app = typer.Typer()
    app.command("x")(cmd)
    app.command("other")(lambda: None)
    r = CliRunner().invoke(app, ["x", "--lr", "0.5", "--no-resume", "--on-error", "skip", "-q"])
    assert r.exit_code == 0, r.output
    assert calls[0]["lr"] == 0.5 and calls[0]["resume"] is False
    assert calls[0]["progress"] is False and calls[0]["errors"].policy is ErrorPolicy.SKIP
    assert used == [tmp_path] and "trained x" in r.output
    r = CliRunner().invoke(app, ["x"])
    assert r.exit_code == 0 and calls[1]["resume"] is True and calls[1]["progress"] is True
    r = CliRunner().invoke(app, ["x", "--lr", "0"])
    assert r.exit_code == 2 and "lr must be > 0" in r.output and "Traceback" not in r.output


def test_take_options_takes_a_group_out_of_the_settings() -> None:
    settings = {"steps": 3, "rate": 1.5, "other": "x"}
    taken = cli_common.take_options(_Config, settings)  # the fields given, no others
    assert taken == {"steps": 3, "rate": 1.5} and settings == {"other": "x"}
