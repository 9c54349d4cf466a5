"""The one qrels reader behind TREC (eval.read_qrels), BEIR and Multi-CPR files."""

from __future__ import annotations

from pathlib import Path

import pytest

from anygrain.corpus.readers.qrels import QrelsLayout, read_judgements
from anygrain.errors import ErrorLog, ErrorPolicy, InputError

LINES = {
    QrelsLayout.TREC: "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 2\n",
    QrelsLayout.BEIR: "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2\n",
    QrelsLayout.MULTICPR: "q1\t0\td1\t1\nq1\td2\t0\nq2\t0\td1\t2\n",
}


@pytest.mark.parametrize("layout", list(QrelsLayout))
def test_every_layout_reads_the_same_judgements(tmp_path: Path, layout: QrelsLayout) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text(LINES[layout])
    got = read_judgements(path, layout)
    assert {q: j.grades for q, j in got.items()} == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    assert got["q2"].line == (4 if layout is QrelsLayout.BEIR else 3)


def test_a_repeat_is_refused_except_by_trec_and_a_conflict_names_the_grade(
    tmp_path: Path,
) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\t1\nq1\td1\t1\nq1\td1\t2\n")
    errors = ErrorLog(ErrorPolicy.SKIP)
    got = read_judgements(path, QrelsLayout.BEIR, errors)
    assert got["q1"].grades == {"d1": 1}
    assert [(e.line, e.field) for e in errors.skipped] == [(2, "corpus-id"), (3, "score")]
    path.write_text("q1 0 d1 1\nq1 0 d1 1\n")
    assert read_judgements(path, QrelsLayout.TREC)["q1"].grades == {"d1": 1}


def test_queries_not_in_the_question_file_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "qrels.dev.tsv"
    path.write_text("q1\t0\td1\t1\nq9\t0\td1\t1\n")
    with pytest.raises(InputError, match="'q9' is not in dev.query.txt") as e:
        read_judgements(path, QrelsLayout.MULTICPR, queries={"q1"}, queries_name="dev.query.txt")
    assert (e.value.line, e.value.field) == (2, "qid")
