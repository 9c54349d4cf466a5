"""Sizes, checked from the source: every module under ``src/anygrain`` at most 650 lines and
every function (its ``def`` to its last line, docstring included) at most 100.  A module or
function past them is split by what it does (docs/design.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "anygrain"
MAX_MODULE_LINES = 650
MAX_FUNCTION_LINES = 100


def oversized(source: str, where: str) -> list[str]:
    """What in ``source`` (the text of module ``where``) is over the limits."""
    out: list[str] = []
    n = len(source.splitlines())
    if n > MAX_MODULE_LINES:
        out.append(f"{where}: {n} lines, over {MAX_MODULE_LINES}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                out.append(f"{where}:{node.name}: {lines} lines, over {MAX_FUNCTION_LINES}")
    return out


def test_modules_and_functions_are_small() -> None:
    bad: list[str] = []
    for p in sorted(PACKAGE.rglob("*.py")):
        where = p.relative_to(PACKAGE).as_posix()
        bad += oversized(p.read_text(encoding="utf-8"), where)
    assert not bad, "split these by what they do:\n" + "\n".join(bad)


def _function(lines: int) -> str:
    return "def f(x):\n" + "    x += 1\n" * (lines - 2) + "    return x\n"


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("x = 1\n" * (MAX_MODULE_LINES + 1), "m.py: 651 lines"),
        (_function(MAX_FUNCTION_LINES + 1), "m.py:f: 101 lines"),
        ("class C:\n" + "".join("    " + x + "\n" for x in _function(120).splitlines()), ":f: 120"),
        ("async " + _function(MAX_FUNCTION_LINES + 1), "m.py:f: 101 lines"),
    ],
)
def test_the_checker_flags_what_is_too_big(source: str, what: str) -> None:
    bad = oversized(source, "m.py")
    assert any(what in b for b in bad), bad


@pytest.mark.parametrize("source", ["x = 1\n" * MAX_MODULE_LINES, _function(MAX_FUNCTION_LINES)])
def test_the_checker_allows_what_fits(source: str) -> None:
    assert oversized(source, "m.py") == []
