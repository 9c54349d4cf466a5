"""The app's own help lists every command from main's table, without importing them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from anygrain.cli import main as cli_main


def _help(app: typer.Typer, *args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_listing_is_the_full_apps_help() -> None:
    listed = _help(cli_main._build_app(listing=True))
    assert listed == _help(cli_main.get_app())
    for name in [*cli_main.COMMANDS, cli_main.TRAIN]:
        assert f" {name} " in listed


def test_each_listed_line_is_one_short_line() -> None:
    assert set(cli_main.LINES) == {*cli_main.COMMANDS, cli_main.TRAIN}
    lines = cli_main.LINES.values()
    assert all(len(line) <= 80 and "\n" not in line and line.endswith(".") for line in lines)


def test_a_mistyped_command_is_refused_by_the_listing() -> None:
    result = CliRunner().invoke(cli_main._build_app(listing=True), ["serch"])
    assert result.exit_code == 2 and "serch" in result.output


def test_the_apps_help_imports_no_command_module() -> None:
    code = (
        "import json, sys\n"
        "sys.argv = ['anygrain', '--help']\n"
        "from anygrain.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('anygrain.cli.'))),"
        " file=sys.stderr)\n"
    )
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Commands" in done.stdout and "eval-reader" in done.stdout
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    commands = {f"anygrain.cli.{module}" for module, _ in cli_main.COMMANDS.values()}
    assert not commands & set(loaded), loaded
