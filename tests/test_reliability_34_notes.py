"""Issue 34: ``--sparse-weight 0 --scope gold-passage`` was accepted and changed nothing
(inside one passage the BM25 term of a phrase score is the same for every phrase): the
evaluation now says so, in its report (``notes``) and on stderr, and its metrics are the
same as without the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.eval.provenance import scope_note
from anygrain.index.base import Index
from anygrain.index.scope import Scope

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def phrase(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("notes") / "p"
    Index.build(f"squad:{squad}", kind="phrase", out=out, model=str(model_dir), progress=False)
    return out


def _eval(phrase: Path, squad: Path, *extra: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    r = CliRunner().invoke(
        app,
        ["eval", str(phrase), "--questions", f"squad:{squad}", "--json", "-q", "--scope", *extra],
    )
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def test_a_sparse_weight_in_the_gold_passage_is_noted(phrase: Path, squad: Path) -> None:
    plain, said = _eval(phrase, squad, "gold-passage")
    assert "notes" not in plain and "note:" not in said
    for weight in ("0", "2"):
        d, said = _eval(phrase, squad, "gold-passage", "--sparse-weight", weight)
        assert d["metrics"] == plain["metrics"]
        assert len(d["notes"]) == 1 and "--sparse-weight" in d["notes"][0]
        assert said.count("note:") == 1 and "gold-passage" in said
    d, said = _eval(phrase, squad, "corpus", "--sparse-weight", "0")
    assert "notes" not in d and "note:" not in said


def test_scope_note() -> None:
    assert scope_note(Scope.GOLD_PASSAGE, {"sparse_weight": 0.0})
    assert not scope_note(Scope.GOLD_PASSAGE, {"sparse_weight": None})
    assert not scope_note(Scope.CORPUS, {"sparse_weight": 1.0})
    assert not scope_note("gold-passage", None)
