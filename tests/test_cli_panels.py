"""``--help`` of the commands with many options groups them in panels (typer's
``rich_help_panel``, set by :func:`anygrain.cli.panels.with_panels`): every option of
``index``, ``search``, ``eval`` and each ``train`` command is in a named panel, and a panel
set on one command leaves the options it shares with others as they were."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from anygrain.cli.common import ThreadsOpt
from anygrain.cli.main import app
from anygrain.cli.panels import with_panels

PANELLED = [
    ("index",),
    ("search",),
    ("eval",),
    ("eval-reader",),
    ("train", "dpr"),
    ("train", "phrase"),
    ("train", "reader"),
    ("train", "phrase-query-side"),
]


def command(*path: str) -> Any:
    c = typer.main.get_command(app)
    for name in path:
        c = c.commands[name]  # type: ignore[attr-defined]
    return c


def options(c: Any) -> dict[str, str | None]:
    """Each option's first flag and its panel (None: the default ``Options``)."""
    return {
        p.opts[0]: p.rich_help_panel
        for p in c.params
        if getattr(p, "param_type_name", "") == "option" and p.opts[0] != "--help"
    }


@pytest.mark.parametrize("path", PANELLED, ids=" ".join)
def test_every_option_is_in_a_named_panel(path: tuple[str, ...]) -> None:
    got = options(command(*path))
    assert got and not [o for o, panel in got.items() if panel is None]
    assert {"Input", "Output", "Performance"} <= set(got.values())


def test_index_help_shows_its_panels() -> None:
    r = CliRunner().invoke(app, ["index", "--help"], terminal_width=120)
    assert r.exit_code == 0, r.output
    for panel in ("Input", "Index kind", "Model", "Phrase options", "Output", "Performance"):
        assert f"─ {panel} ─" in r.output
    got = options(command("index"))
    assert got["--kind"] == "Index kind" and got["--keep"] == "Phrase options"
    assert got["--out"] == "Output" and got["--threads"] == "Performance"
    assert options(command("search"))["--format"] == "Output"


def test_shared_declarations_are_left_as_they_were() -> None:
    # --threads is in index's Performance panel, and in no panel of add (no panels there)
    assert options(command("add"))["--threads"] is None
    assert ThreadsOpt.__metadata__[0].rich_help_panel is None


def test_a_panel_naming_no_parameter_is_refused() -> None:
    def cmd(x: Annotated[int, typer.Option()] = 1) -> None: ...

    with pytest.raises(TypeError, match="has no parameter"):
        with_panels({"Input": ("y",)})(cmd)


def test_with_helps_gives_one_command_its_own_help_of_a_shared_option() -> None:
    from anygrain.cli.panels import with_helps

    @with_helps({"threads": "Threads per stage"})
    def cmd(threads: ThreadsOpt = None) -> None: ...

    app = typer.Typer()
    app.command("x")(cmd)
    app.command("other")(lambda: None)
    (param,) = [p for p in command("serve").params if p.name == "threads"]
    assert param.help.startswith("CPU threads per stage")
    (param,) = [p for p in typer.main.get_command(app).commands["x"].params]  # type: ignore[attr-defined]
    assert param.help == "Threads per stage" and param.opts == ["--threads"]
    assert ThreadsOpt.__metadata__[0].help.startswith("CPU threads for torch and FAISS")
    with pytest.raises(TypeError, match="has no parameter"):
        with_helps({"y": "?"})(cmd)
