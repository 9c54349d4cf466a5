"""``anygrain search --questions FILE --format trec|jsonl``: a TREC run on stdout (``qid Q0
docid rank score tag``, the lines :mod:`anygrain.eval.runs` writes) or JSON lines (the
default); a bad format, or one given without ``--questions``, refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain import Index
from anygrain.api import search_questions
from anygrain.cli.main import app
from anygrain.eval.runs import read_run

DOCS = [
    {"id": "py", "title": "Python", "text": "Python is a programming language by Guido."},
    {"id": "wall", "title": "Great Wall", "text": "The Great Wall of China is very long."},
    {"id": "tea", "title": "Tea", "text": "Tea is a drink made from the leaves of a plant."},
]
QUESTIONS = ["Python programming language", "Great Wall of China", "tea leaves drink"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("search-format")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("q") / "q.txt"
    p.write_text("\n".join(QUESTIONS) + "\n", encoding="utf-8")
    return p


def search(index: Index, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["search", str(index.path), "-k", "2", "-q", *args])
    return r.exit_code, r.stdout, r.stderr


def test_format_trec_writes_a_trec_run(index: Index, questions: Path, tmp_path: Path) -> None:
    code, stdout, _ = search(index, "--questions", str(questions), "--format", "trec")
    assert code == 0, stdout
    lines = stdout.splitlines()
    assert all(len(line.split()) == 6 and line.split()[1] == "Q0" for line in lines)
    assert {line.split()[5] for line in lines} == {"anygrain"}
    run = tmp_path / "run.trec"
    run.write_text(stdout, encoding="utf-8")
    got = {q: [(h.passage_id, h.score) for h in hs] for q, hs in read_run(run).items()}
    want = {
        r.id: [(h.passage_id, pytest.approx(h.score)) for h in r.hits]
        for r in search_questions(index, questions, 2)
    }
    assert got == want and len(got) == len(QUESTIONS)
    # the tag given
    code, stdout, _ = search(
        index, "--questions", str(questions), "--format", "trec", "--run-tag", "bm25run"
    )
    assert code == 0 and {line.split()[5] for line in stdout.splitlines()} == {"bm25run"}


def test_format_jsonl_is_the_default(index: Index, questions: Path) -> None:
    code, default, _ = search(index, "--questions", str(questions))
    code2, jsonl, _ = search(index, "--questions", str(questions), "--format", "jsonl")
    assert code == code2 == 0 and default == jsonl
    assert [json.loads(line)["question"] for line in jsonl.splitlines()] == QUESTIONS


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "xml"], "--format must be one of jsonl, trec, not 'xml'"),
        (["--format", "TREC"], "--format must be one of jsonl, trec"),
        (["--run-tag", "x"], "--run-tag is a TREC run's: it takes --format trec"),
        (["--format", "trec", "--run-tag", "a b"], "tag 'a b'"),
        (["--format", "trec", "--json"], "--json is one question's"),
    ],
)
def test_a_bad_format_is_refused_in_one_line(
    index: Index, questions: Path, args: list[str], says: str
) -> None:
    code, stdout, stderr = search(index, "--questions", str(questions), *args)
    assert code == 2 and stdout == ""
    assert says in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_format_takes_questions(index: Index) -> None:
    code, stdout, stderr = search(index, "Python", "--format", "trec")
    assert code == 2 and stdout == "" and "--format takes --questions" in stderr
