"""TREC run and qrels files: round trips, trec_eval compatibility, errors naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytrec_eval
from conftest import SHARED  # noqa: E402

from anygrain.errors import AnygrainError, InputError
from anygrain.eval.runs import RunWriter, read_qrels, read_run, write_run
from anygrain.hits.hit import Hit, Unit


def hit(pid: str, score: float) -> Hit:
    return Hit(Unit.PASSAGE, score, 0, pid, f"D{pid}", "title", "some passage text")


def sample_run() -> dict[str, list[Hit]]:
    return {
        "q1": [hit("p3", 12.5), hit("p1", 3.0000000000000004), hit("p7", -0.25)],
        "q2": [hit("p9", 1e-05)],
        "200001": [hit("p1", 0.9), hit("p2", 0.8)],
    }


def test_run_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "out" / "run.trec"
    run = sample_run()
    write_run(path, run, tag="dense")
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 p3 1 12.5 dense"
    assert len(lines) == 6
    back = read_run(path)
    assert list(back) == list(run)
    for qid, hits in run.items():
        assert [h.unit_id for h in back[qid]] == [h.unit_id for h in hits]
        assert [h.score for h in back[qid]] == [h.score for h in hits]  # exact, via repr
    assert all(h.unit is Unit.PASSAGE for hs in back.values() for h in hs)
    assert read_run(path, unit=Unit.DOCUMENT)["q2"][0].unit_id == "p9"


def test_run_is_read_by_trec_eval(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    write_run(path, sample_run())
    with open(path) as f:
        parsed = pytrec_eval.parse_run(f)
    assert parsed["q1"] == {"p3": 12.5, "p1": 3.0000000000000004, "p7": -0.25}


def test_read_run_orders_by_rank(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text("q Q0 b 2 5.0 t\n\nq Q0 a 1 4.0 t\nq\tQ0\tc\t3\t9.0\tt\n")
    assert [h.unit_id for h in read_run(path)["q"]] == ["a", "b", "c"]


def test_same_unit_written_once(tmp_path: Path) -> None:
    text = "alpha beta gamma"
    hits = [
        Hit(Unit.PHRASE, 9.0, 0, "p1", "d1", "", text, (0, 5)),
        Hit(Unit.PHRASE, 8.0, 0, "p1", "d1", "", text, (6, 10)),
        Hit(Unit.PHRASE, 7.0, 1, "p2", "d1", "", text, (0, 5)),
    ]
    path = tmp_path / "run.trec"
    write_run(path, {"q": hits})
    assert path.read_text().splitlines() == ["q Q0 p1 1 9.0 anygrain", "q Q0 p2 2 7.0 anygrain"]


def test_ids_with_whitespace_are_refused_and_old_file_kept(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("old\n")
    with pytest.raises(AnygrainError, match="whitespace"):
        write_run(path, {"q1": [hit("ok", 1.0)], "q 2": [hit("p", 1.0)]})
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.trec"]  # no temp file left
    with pytest.raises(AnygrainError):
        write_run(path, {"q": [hit("has space", 1.0)]})
    with pytest.raises(AnygrainError):
        RunWriter(tmp_path / "x", tag="my tag")


def test_run_writer_discards_on_error(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    with pytest.raises(RuntimeError), RunWriter(path, "bm25") as w:
        w.write("q1", [hit("p", 1.0)])
        raise RuntimeError("search failed")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "line", "field"),
    [
        ("q Q0 a 1 1.0 t\nq Q0 b 2 1.0\n", 2, None),  # 5 fields
        ("q Q0 a 1 1.0 t extra\n", 1, None),
        ("q Q0 a 1 1.0 t\n\nq Q0 b two 0.5 t\n", 3, "rank"),
        ("q Q0 a 1 high t\n", 1, "score"),
        ("q Q0 a 1 nan t\n", 1, "score"),
        ("q Q0 a 1 1.0 t\nq Q0 a 2 0.5 t\n", 2, "docid"),  # trec_eval refuses duplicates
    ],
)
def test_malformed_run_lines(tmp_path: Path, content: str, line: int, field: str | None) -> None:
    path = tmp_path / "bad.run"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        read_run(path)
    assert e.value.path == str(path)
    assert e.value.line == line
    assert e.value.field == field
    assert str(path) in str(e.value) and f"line {line}" in str(e.value)


def test_read_qrels_tabs_and_spaces(tmp_path: Path) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text(
        "200000\t0\t260\t1\n200001\t0\t779\t1\n\nq2 0 d1 2\nq2  0  d2   0\nq2 0 d3 -1\n"
    )
    assert read_qrels(path) == {
        "200000": {"260": 1},
        "200001": {"779": 1},
        "q2": {"d1": 2, "d2": 0, "d3": -1},
    }


@pytest.mark.parametrize(
    ("content", "line", "field"),
    [
        ("q 0 d 1\nq 0 d2\n", 2, None),
        ("q 0 d 1 extra\n", 1, None),
        ("q 0 d 1\nq 0 e 1.5\n", 2, "rel"),
        ("q 0 d yes\n", 1, "rel"),
        ("q 0 d 1\nq 0 d 2\n", 2, "rel"),  # judged twice, differently
    ],
)
def test_malformed_qrels_lines(tmp_path: Path, content: str, line: int, field: str | None) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        read_qrels(path)
    assert (e.value.path, e.value.line, e.value.field) == (str(path), line, field)
    assert f"line {line}" in str(e.value)


def test_repeated_identical_qrels_line_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("q 0 d 1\nq 0 d 1\n")
    assert read_qrels(path) == {"q": {"d": 1}}


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["ecom", "medical", "video"])
def test_real_multicpr_qrels(domain: str) -> None:
    path = SHARED / "multi-cpr" / domain / "qrels.dev.tsv"
    if not path.exists():
        pytest.skip(f"{path} not available")
    qrels = read_qrels(path)
    assert len(qrels) == 1000
    assert all(list(j.values()) == [1] for j in qrels.values())
    with open(path) as f:
        ref = pytrec_eval.parse_qrel(f)
    assert qrels == ref
