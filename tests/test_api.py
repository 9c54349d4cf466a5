"""The Python API's checks on what users pass: index kinds, units, scopes, k, limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.api import evaluate_index, load_questions, search_index
from anygrain.cli.main import app
from anygrain.corpus.formats import parse_source
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy, InputError
from anygrain.index.base import PASSAGE_METRICS, Index
from anygrain.models.resolve import ModelNotFoundError, resolve_model
from anygrain.phrase.refilter import refilter, threshold_for_fraction


@pytest.fixture
def bm25(squad_file: Path, tmp_path: Path) -> Index:
    return Index.build(f"squad:{squad_file}", kind="bm25", out=tmp_path / "bm25", progress=False)


def _with_bad_record(squad_file: Path, tmp_path: Path) -> Path:
    d = json.loads(squad_file.read_text())
    del d["data"][0]["paragraphs"][0]["qas"][0]["question"]
    p = tmp_path / "one-bad.json"
    p.write_text(json.dumps(d, indent=1))
    return p


def test_passage_index_defaults_and_refuses_phrase_options(bm25: Index, squad_file: Path) -> None:
    rep = evaluate_index(bm25, f"squad:{squad_file}", progress=False)
    assert tuple(rep.metrics) == PASSAGE_METRICS and rep.n_questions == 8
    with pytest.raises(AnygrainError, match="needs a phrase index"):
        evaluate_index(bm25, f"squad:{squad_file}", unit="sentence", progress=False)
    with pytest.raises(AnygrainError, match="unknown scope 'nowhere': use one of corpus"):
        evaluate_index(bm25, f"squad:{squad_file}", scope="nowhere", progress=False)
    with pytest.raises(AnygrainError, match="unknown unit 'word'"):
        evaluate_index(bm25, f"squad:{squad_file}", unit="word", progress=False)
    qs = load_questions(f"squad:{squad_file}")
    assert evaluate_index(bm25, qs, limit=3, progress=False).n_questions == 3
    with pytest.raises(AnygrainError, match="limit must be at least 1"):
        evaluate_index(bm25, f"squad:{squad_file}", limit=0, progress=False)
    with pytest.raises(AnygrainError, match="k must be at least 1"):
        evaluate_index(bm25, f"squad:{squad_file}", k=0, progress=False)


def test_an_index_scores_the_same_by_default_through_every_entry(
    bm25: Index, squad_file: Path
) -> None:
    """The scoring engine takes an index's defaults from its kind, as evaluate_index does."""
    from anygrain.eval import DEFAULT_METRICS, evaluate

    qs = load_questions(f"squad:{squad_file}")
    direct = evaluate(bm25, qs, progress=False)
    assert direct.metrics == evaluate_index(bm25, qs, progress=False).metrics
    # one default set for passage-grain results everywhere
    assert tuple(direct.metrics) == PASSAGE_METRICS == DEFAULT_METRICS


def test_search_checks_k_queries_and_unit(bm25: Index) -> None:
    assert len(search_index(bm25, ["Who created Python?"], 2)[0]) == 2
    for k in (0, -1):
        with pytest.raises(AnygrainError, match="k must be at least 1"):
            search_index(bm25, ["Who created Python?"], k)
    with pytest.raises(AnygrainError, match="query 2 is empty"):
        search_index(bm25, ["Who created Python?", "  "], 3)
    with pytest.raises(AnygrainError, match="needs a phrase index"):
        search_index(bm25, ["Who created Python?"], 3, unit="phrase")


def test_a_kind_refuses_the_options_it_does_not_take_by_name(bm25: Index, squad_file: Path) -> None:
    """The CLI passes options through: Index.load and search_index refuse one the kind does
    not take, naming the option and the kinds that take it; None is no option."""
    from anygrain.api import load_index
    from anygrain.errors import UsageError

    assert load_index(bm25.path, model=None, device=None).kind is bm25.kind
    with pytest.raises(UsageError) as e:
        load_index(bm25.path, model="minilm")
    assert str(e.value) == (
        f"{bm25.path}: the load option 'model' needs a dense, hybrid or phrase index, not bm25"
    )
    with pytest.raises(UsageError, match="'sparse_weight' needs a phrase index, not bm25"):
        search_index(bm25, ["Who?"], 2, sparse_weight=1.0)
    with pytest.raises(UsageError, match="'fusion' needs a hybrid index, not bm25"):
        evaluate_index(bm25, f"squad:{squad_file}", search_options={"fusion": "rrf"})
    with pytest.raises(UsageError, match="no index kind takes the search option 'colour'"):
        search_index(bm25, ["Who?"], 2, colour="red")
    assert search_index(bm25, ["Who created Python?"], 2, batch_size=None, fusion=None)
    # the report names its scope (and the unit of an index with several)
    d = evaluate_index(bm25, f"squad:{squad_file}", progress=False).to_dict()
    assert d["scope"] == "corpus" and "unit" not in d


def test_index_summary_is_what_the_cli_and_the_server_report(bm25: Index) -> None:
    s = bm25.summary()
    assert s["kind"] == "bm25" and s["path"] == str(bm25.path) and s["model"] is None
    assert s["corpus"]["n_passages"] == len(bm25.corpus) and "path" not in s["corpus"]
    assert s["units"] == ["passage"] and s["default_unit"] == "passage"


def test_skipped_question_records_are_counted_and_reported(
    bm25: Index, squad_file: Path, tmp_path: Path
) -> None:
    bad = _with_bad_record(squad_file, tmp_path)
    with pytest.raises(InputError, match=r"one-bad\.json.*question"):
        evaluate_index(bm25, f"squad:{bad}", progress=False)
    rep = evaluate_index(bm25, f"squad:{bad}", errors=ErrorLog(ErrorPolicy.SKIP), progress=False)
    assert rep.n_questions == 7 and rep.to_dict()["n_skipped_records"] == 1
    r = CliRunner().invoke(
        app,
        ["eval", str(bm25.path), "--questions", f"squad:{bad}", "--on-error", "skip", "--json"],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["n_skipped_records"] == 1
    assert "skipped 1 malformed record" in r.stderr


def test_refilter_names_a_non_phrase_index(bm25: Index, tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="not a phrase index"):
        threshold_for_fraction(bm25.path, 0.5)
    with pytest.raises(AnygrainError, match="not a phrase index"):
        refilter(bm25.path, tmp_path / "x", keep=0.5, progress=False)


def test_a_missing_local_model_path_is_named_as_such(tmp_path: Path) -> None:
    for name in (str(tmp_path / "nope"), "./nope", "a/b/c"):
        with pytest.raises(ModelNotFoundError, match="no such model directory"):
            resolve_model(name, offline=True)


def test_squad_question_without_answers_is_an_error_unless_impossible(tmp_path: Path) -> None:
    def write(qa: dict[str, object]) -> Path:
        ctx = "Python was created by Guido van Rossum."
        d = {"data": [{"title": "P", "paragraphs": [{"context": ctx, "qas": [qa]}]}]}
        p = tmp_path / "q.json"
        p.write_text(json.dumps(d, indent=1))
        return p

    with pytest.raises(InputError, match=r"q\.json.*qas\[0\]\.answers.*missing field"):
        load_questions(f"squad:{write({'id': 'a', 'question': 'Who?'})}")
    with pytest.raises(InputError, match="not marked is_impossible"):
        load_questions(f"squad:{write({'id': 'a', 'question': 'Who?', 'answers': []})}")
    qa = {"id": "a", "question": "Who?", "answers": [], "is_impossible": True}
    q = parse_source(f"squad:{write(qa)}", want="questions").questions(None)[0]
    assert not q.answerable and q.meta["is_impossible"]
