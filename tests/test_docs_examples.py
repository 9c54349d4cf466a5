"""The commands docs/cli.md shows in its "Answers" section run as written, over small
fixtures: each ``bash`` block's commands, with the data paths replaced by a tiny SQuAD file
and each ``sq-KIND`` index by one of that kind built from it, run through the CLI in process
(exit 0, no traceback).

The section's "Training a reader" subsection is left out: it trains from a hub backbone
(``--model minilm``) over the SQuAD training set, which neither a test nor this machine has.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.api import build_index
from anygrain.cli.main import app

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CLI_MD = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
SECTION = "## Answers:"
DATA = re.compile(r"\.\./shared/data/\S+?\.json")
INDEX = re.compile(r"(?<![\w/.-])sq-(bm25|dense|hybrid|phrase)(?![\w/.-])")


def section_commands(heading: str = SECTION) -> list[str]:
    """The commands of the ``bash`` blocks under ``heading`` (up to its first subsection),
    continuation lines joined."""
    text = CLI_MD.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)].split("\n### ")[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


COMMANDS = section_commands()


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny SQuAD file of ``test_phrase_helpers``, with the paragraph the documented
    question is about (so each example has something to find)."""
    from test_phrase_helpers import PARAGRAPHS, write_squad

    super_bowl = (
        "Super Bowl 50",
        "Super Bowl 50 was an American football game to determine the champion of the NFL "
        "for the 2015 season. The American Football Conference (AFC) champion Denver Broncos "
        "defeated the National Football Conference (NFC) champion Carolina Panthers 24-10.",
        [("Which NFL team represented the AFC at Super Bowl 50?", "Denver Broncos")],
    )
    return write_squad(tmp_path_factory.mktemp("data") / "tiny.json", [*PARAGRAPHS, super_bowl])


@pytest.fixture(scope="module")
def indexes(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An index of each kind the commands name, built once from the tiny SQuAD file."""
    # the section still shows its examples (a rename would otherwise test nothing)
    assert len(COMMANDS) >= 5 and all(c.startswith("anygrain ") for c in COMMANDS), COMMANDS
    root = tmp_path_factory.mktemp("indexes")
    kinds = {m.group(1) for c in COMMANDS for m in INDEX.finditer(c)}
    out = {}
    for kind in sorted(kinds):
        out[kind] = root / f"sq-{kind}"
        build_index(f"squad:{squad}", kind=kind, out=out[kind], progress=False)
    return out


@pytest.mark.parametrize("command", COMMANDS, ids=[c[:60] for c in COMMANDS])
def test_documented_command_runs(
    command: str, squad: Path, indexes: dict[str, Path], tmp_path: Path
) -> None:
    line = DATA.sub(str(squad), command)
    line = INDEX.sub(lambda m: str(indexes[m.group(1)]), line)
    args = shlex.split(line)
    target = None
    if ">" in args:  # a shell redirect of stdout
        i = args.index(">")
        args, target = args[:i], tmp_path / args[i + 1]
    assert args[0] == "anygrain"
    r = CliRunner().invoke(app, args[1:])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 0, (line, r.output)
    assert "Traceback" not in r.output
    assert r.stdout.strip(), line  # every example prints its result
    if target is not None:
        target.write_text(r.stdout, encoding="utf-8")
        assert len(target.read_text(encoding="utf-8").splitlines()) >= 1
