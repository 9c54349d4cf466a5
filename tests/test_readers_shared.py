"""The helpers readers share (anygrain.corpus.readers._io, anygrain.corpus.records): each
bad record names its file, line and field, and a document's text and passage spans agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from anygrain.corpus.readers._io import converted, dict_elements, question_reader
from anygrain.corpus.records import JoinedText
from anygrain.errors import ErrorLog, ErrorPolicy, InputError


def test_dict_elements_name_each_element() -> None:
    got = list(dict_elements([{"a": 1}, {"b": 2}], "output", path=Path("f.jsonl"), line=3))
    assert got == [("output[0]", {"a": 1}), ("output[1]", {"b": 2})]
    with pytest.raises(InputError) as e:
        list(dict_elements([{}, "x"], "output[0].provenance", path=Path("f.jsonl"), line=3))
    assert (e.value.path, e.value.line, e.value.field) == ("f.jsonl", 3, "output[0].provenance[1]")
    assert "expected dict, got str" in str(e.value)


def _even(record: int, line: int) -> int:
    if record % 2:
        raise InputError("odd", path="f", line=line, field="n")
    return record * 10


def test_converted_skips_bad_records_under_skip_and_stops_under_stop() -> None:
    errors = ErrorLog(ErrorPolicy.SKIP)
    got = list(converted([(1, 2), (2, 3), (3, 4)], _even, errors))
    assert got == [(1, 2, 20), (3, 4, 40)]
    assert [(e.line, e.field) for e in errors.skipped] == [(2, "n")]
    with pytest.raises(InputError, match="line 2"):
        list(converted([(1, 2), (2, 3)], _even, ErrorLog()))


def test_question_reader_keeps_ids_unique(tmp_path: Path) -> None:
    from anygrain.corpus.readers._io import iter_jsonl
    from anygrain.corpus.readers.nq_open import question_from_json

    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"id": "a", "question": "q1", "answer": ["x"]}\n'
        '{"id": "a", "question": "q2", "answer": ["y"]}\n',
        encoding="utf-8",
    )
    read = question_reader(iter_jsonl, question_from_json, format="nq-open")
    with pytest.raises(InputError, match="line 2"):
        read(f, ErrorLog())
    qs = read(f, ErrorLog(ErrorPolicy.SKIP))
    assert [q.text for q in qs] == ["q1"] and qs.format == "nq-open"


def test_joined_text_spans_point_at_their_blocks() -> None:
    body = JoinedText("\n\n")
    body.add("Heading", passage=False)
    body.add("First paragraph.", id="p1")
    body.add("Second.", meta={"section": "S"})
    assert body.text == "Heading\n\nFirst paragraph.\n\nSecond."
    assert [body.text[s.start : s.end] for s in body.spans] == ["First paragraph.", "Second."]
    assert [(s.id, s.meta) for s in body.spans] == [("p1", {}), (None, {"section": "S"})]
