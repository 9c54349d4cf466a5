"""Start-up: the command line's help and the whole BM25 path need neither torch nor transformers.

Each check runs the real command in a fresh interpreter (``python -m anygrain.cli``), most of
them with a meta path finder that makes ``import torch`` and ``import transformers`` fail,
as on a machine without them; the others run unblocked and report whether either was
imported at all (an ``ImportError`` caught somewhere would hide a slow start behind a
passing blocked run).  docs/cli.md, "Start-up", says what imports what.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers")

# makes ``import torch`` / ``import transformers`` (and their submodules) fail
BLOCK = """
import importlib.abc, sys

class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError("No module named " + repr(name) + " (blocked by the test)")
        return None

sys.meta_path.insert(0, _Missing())
"""

# the command itself, then which heavy modules it imported (on stderr, after its output)
RUN_CLI = """
import json, runpy, sys
sys.argv[0] = "anygrain"
try:
    runpy.run_module("anygrain.cli", run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
loaded = sorted({m.partition(".")[0] for m in sys.modules} & {"torch", "transformers"})
print("\\nHEAVY=" + json.dumps(loaded), file=sys.stderr)
sys.exit(code)
"""

# ``--help`` of the app and of every command and sub-command, in one interpreter
HELP_ALL = """
import json, sys
import typer
from anygrain.cli.main import get_app

root = typer.main.get_command(get_app())

def walk(cmd, path):
    yield path
    if hasattr(cmd, "list_commands"):  # a group (typer may vendor its own click)
        ctx = cmd.context_class(cmd, info_name=path[-1] if path else "anygrain")
        for name in cmd.list_commands(ctx):
            yield from walk(cmd.get_command(ctx, name), [*path, name])

paths = list(walk(root, []))
for path in paths:
    print("\\n=== " + " ".join(path), flush=True)
    try:
        root.main([*path, "--help"], prog_name="anygrain")
    except SystemExit as e:
        if e.code not in (0, None):
            sys.exit("--help of " + repr(path) + " exited " + repr(e.code))
loaded = sorted({m.partition(".")[0] for m in sys.modules} & {"torch", "transformers"})
print("\\nPATHS=" + json.dumps(paths))
print("HEAVY=" + json.dumps(loaded))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # wide, plain output: table cells are not wrapped mid-word, no colour codes
    env.update(COLUMNS="200", NO_COLOR="1", TERM="dumb", PYTHONIOENCODING="utf-8")
    return env


def _python(code: str, *args: str, blocked: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", (BLOCK if blocked else "") + code, *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )


def anygrain(*args: str, blocked: bool = True) -> tuple[str, list[str]]:
    """Run ``anygrain ARGS``; its stdout and the heavy modules it imported.  Fails the test
    on a non-zero exit, showing what the command printed."""
    r = _python(RUN_CLI, *args, blocked=blocked)
    assert r.returncode == 0, (
        f"anygrain {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    )
    marker = r.stderr.rpartition("HEAVY=")[2]
    return r.stdout, json.loads(marker.strip())


def test_the_block_works() -> None:
    """The blocked interpreter really cannot import torch or transformers."""
    for name in HEAVY:
        r = _python(f"import {name}", blocked=True)
        assert r.returncode != 0 and "blocked by the test" in r.stderr, r.stderr


def test_importing_the_cli_imports_no_torch() -> None:
    r = _python(
        "import sys, json, anygrain.cli.main\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] in "
        f"{HEAVY!r})))",
        blocked=False,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def test_help_of_the_app() -> None:
    out, loaded = anygrain("--help")
    assert "Usage" in out and "search" in out and "train" in out
    _, unblocked = anygrain("--help", blocked=False)
    assert loaded == [] and unblocked == []


@pytest.mark.parametrize("blocked", [True, False], ids=["blocked", "unblocked"])
def test_help_of_every_command(blocked: bool) -> None:
    r = _python(HELP_ALL, blocked=blocked)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr
    tail = r.stdout.rpartition("\nPATHS=")[2]
    paths_line, _, heavy_line = tail.partition("\nHEAVY=")
    paths = json.loads(paths_line)
    assert json.loads(heavy_line) == []
    names = {" ".join(p) for p in paths}
    # the commands that need torch to run must still show their help without it
    assert {"index", "search", "eval", "serve", "demo", "ask", "pack", "train dpr"} <= names
    assert {"train phrase", "train reader", "train phrase-query-side"} <= names
    for name in names:
        section = r.stdout.split(f"\n=== {name}\n", 1)[1].split("\n=== ", 1)[0]
        assert "Usage:" in section, f"anygrain {name} --help printed no usage:\n{section}"


DOCS = [
    ("paris", "Paris", "Paris is the capital of France and sits on the Seine."),
    ("berlin", "Berlin", "Berlin is the capital of Germany."),
    ("rome", "Rome", "Rome is the capital of Italy and home of the Colosseum."),
    ("nile", "Nile", "The Nile is a river in Africa, flowing north into the sea."),
]


def write_docs(path: Path, docs: list[tuple[str, str, str]]) -> Path:
    path.write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs),
        encoding="utf-8",
    )
    return path


def build_bm25(root: Path) -> Path:
    """A BM25 index over a small JSONL file, built by ``anygrain index`` without torch."""
    docs = write_docs(root / "docs.jsonl", DOCS)
    out = root / "bm25"
    _, loaded = anygrain("index", str(docs), "--kind", "bm25", "--out", str(out), "-q")
    assert loaded == []
    assert (out / "index.json").is_file()
    return out


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bm25(tmp_path_factory.mktemp("startup"))


def test_bm25_search_without_torch(bm25_index: Path) -> None:
    out, _ = anygrain("search", str(bm25_index), "Which city is the capital of Italy?", "-k", "2")
    assert "Rome" in out and "Colosseum" in out
    js, _ = anygrain("search", str(bm25_index), "capital of Germany", "-k", "2", "--json")
    hits = [json.loads(line) for line in js.splitlines() if line.strip()]
    assert len(hits) == 2
    assert hits[0]["doc_id"] == "berlin" and hits[0]["rank"] == 1


def test_bm25_search_imports_no_torch_at_all(bm25_index: Path) -> None:
    """Unblocked: the search path does not even try (and catch) an import of either."""
    out, loaded = anygrain("search", str(bm25_index), "river in Africa", "-k", "1", blocked=False)
    assert "Nile" in out
    assert loaded == []


def test_bm25_eval_without_torch(bm25_index: Path, tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps({"question": "What is the capital of Italy?", "answers": ["Rome"]}) + "\n",
        encoding="utf-8",
    )
    out, _ = anygrain("eval", str(bm25_index), "--questions", str(questions))
    assert "top@1" in out and "1.0000" in out
    _, loaded = anygrain("eval", str(bm25_index), "--questions", str(questions), blocked=False)
    assert loaded == []


def test_bm25_add_delete_compact_without_torch(tmp_path: Path) -> None:
    """Updating a BM25 index in place checks ``--device`` without torch too."""
    idx = build_bm25(tmp_path)
    more = write_docs(tmp_path / "more.jsonl", [("oslo", "Oslo", "Oslo is the capital of Norway.")])
    anygrain("add", str(idx), str(more))
    js, _ = anygrain("search", str(idx), "capital of Norway", "-k", "1", "--json")
    assert json.loads(js.splitlines()[0])["doc_id"] == "oslo"
    anygrain("delete", str(idx), "--doc", "oslo")
    _, loaded = anygrain("compact", str(idx), blocked=False)
    assert loaded == []
    js, _ = anygrain("search", str(idx), "capital of Norway", "-k", "1", "--json")
    assert json.loads(js.splitlines()[0])["doc_id"] != "oslo"
