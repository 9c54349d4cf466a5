"""Bad input in every reader: the error names file, line and field; SKIP skips and counts it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from anygrain.corpus.formats import parse_source
from anygrain.corpus.readers.dpr_train import read_dpr_training
from anygrain.errors import ErrorLog, ErrorPolicy, InputError


@dataclass
class Case:
    """One malformed input: files to write, the source to read, and where the error points."""

    id: str
    files: dict[str, bytes | str]
    source: str  # FORMAT:REL or REL (relative to tmp_path)
    want: str
    file: str  # file name the error must name
    line: int
    field: str | None
    good: int  # records left when SKIP skips the bad one


def j(*records: object) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


Q = {"question": "q?", "answer": ["a"]}
BEIR_QUERIES = j({"_id": "q1", "text": "one"}, {"_id": "q2", "text": "two"})
BEIR_CORPUS = j({"_id": "c1", "text": "doc"})
MCPR_Q = "1\tquery one\n2\tquery two\n"
KILT_OK = {"id": 1, "input": "q?", "output": [{"answer": "a"}]}
DPR_OK = {"question": "q?", "answers": ["a"], "positive_ctxs": [{"title": "T", "text": "x"}]}

CASES = [
    # dpr-tsv
    Case(
        "tsv-columns",
        {"p.tsv": "id\ttext\ttitle\n1\tgood text\tA\n2\tno title\n"},
        "p.tsv",
        "documents",
        "p.tsv",
        3,
        "title",
        1,
    ),
    Case(
        "tsv-duplicate",
        {"p.tsv": "1\ta b\tA\n1\tc d\tA\n"},
        "p.tsv",
        "documents",
        "p.tsv",
        2,
        "id",
        1,
    ),
    Case(
        "tsv-empty-text",
        {"p.tsv": "1\ta b\tA\n2\t \tB\n"},
        "dpr-tsv:p.tsv",
        "documents",
        "p.tsv",
        2,
        "text",
        1,
    ),
    Case(
        "tsv-utf8",
        {"p.tsv": b"1\tok text\tA\n2\tbad \xff\tB\n"},
        "p.tsv",
        "documents",
        "p.tsv",
        2,
        None,
        1,
    ),
    # multicpr corpus
    Case(
        "pairs-columns",
        {"corpus.tsv": "1\tok\n2\n"},
        "multicpr:corpus.tsv",
        "documents",
        "corpus.tsv",
        2,
        "passage",
        1,
    ),
    Case(
        "pairs-duplicate",
        {"corpus.tsv": "1\tok\n1\tagain\n"},
        "multicpr:corpus.tsv",
        "documents",
        "corpus.tsv",
        2,
        "pid",
        1,
    ),
    # jsonl
    Case(
        "jsonl-syntax",
        {"d.jsonl": j({"id": 1, "text": "a"}) + '{"id": 2, "text"\n'},
        "jsonl:d.jsonl",
        "documents",
        "d.jsonl",
        2,
        None,
        1,
    ),
    Case(
        "jsonl-missing",
        {"d.jsonl": j({"id": 1, "text": "a"}, {"id": 2, "body": "b"})},
        "jsonl:d.jsonl",
        "documents",
        "d.jsonl",
        2,
        "text",
        1,
    ),
    Case(
        "jsonl-type",
        {"d.jsonl": j({"id": [1], "text": "a"}, {"id": 2, "text": "b"})},
        "jsonl:d.jsonl",
        "documents",
        "d.jsonl",
        1,
        "id",
        1,
    ),
    Case(
        "jsonl-title-type",
        {"d.jsonl": j({"id": 1, "text": "a", "title": 5}, {"id": 2, "text": "b"})},
        "d.jsonl",
        "documents",
        "d.jsonl",
        1,
        "title",
        1,
    ),
    Case(
        "jsonl-duplicate",
        {"d.jsonl": j({"id": 1, "text": "a"}, {"id": "1", "text": "b"})},
        "d.jsonl",
        "documents",
        "d.jsonl",
        2,
        "id",
        1,
    ),
    Case(
        "jsonl-empty-text",
        {"d.jsonl": j({"id": 1, "text": "a"}, {"id": 2, "text": "  "})},
        "d.jsonl",
        "documents",
        "d.jsonl",
        2,
        "text",
        1,
    ),
    Case(
        "jsonl-not-object",
        {"d.jsonl": j({"id": 1, "text": "a"}, [1, 2])},
        "jsonl:d.jsonl",
        "documents",
        "d.jsonl",
        2,
        None,
        1,
    ),
    # beir
    Case(
        "beir-corpus-duplicate",
        {
            "b/corpus.jsonl": j({"_id": "c1", "text": "x"}, {"_id": "c1", "text": "y"}),
            "b/queries.jsonl": BEIR_QUERIES,
            "b/qrels/test.tsv": "q1\tc1\t1\n",
        },
        "b",
        "documents",
        "corpus.jsonl",
        2,
        "_id",
        1,
    ),
    Case(
        "beir-score",
        {
            "b/corpus.jsonl": BEIR_CORPUS,
            "b/queries.jsonl": BEIR_QUERIES,
            "b/qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\tc1\t1\nq2\tc1\thigh\n",
        },
        "b",
        "questions",
        "test.tsv",
        3,
        "score",
        1,
    ),
    Case(
        "beir-unknown-query",
        {
            "b/corpus.jsonl": BEIR_CORPUS,
            "b/queries.jsonl": BEIR_QUERIES,
            "b/qrels/test.tsv": "q1\tc1\t1\nq9\tc1\t1\n",
        },
        "b",
        "questions",
        "test.tsv",
        2,
        "query-id",
        1,
    ),
    Case(
        "beir-query-missing",
        {
            "b/corpus.jsonl": BEIR_CORPUS,
            "b/queries.jsonl": j({"_id": "q1", "text": "one"}, {"_id": "q2"}),
            "b/qrels/test.tsv": "q1\tc1\t1\n",
        },
        "b",
        "questions",
        "queries.jsonl",
        2,
        "text",
        1,
    ),
    # wikitext
    Case(
        "wikitext-no-paragraphs",
        {"w.raw": " = A = \n = = S = = \n = B = \n text \n"},
        "w.raw",
        "documents",
        "w.raw",
        1,
        "text",
        1,
    ),
    # text
    Case(
        "text-empty",
        {"t/a.txt": "  \n", "t/b.txt": "words"},
        "text:t",
        "documents",
        "a.txt",
        1,
        "text",
        1,
    ),
    Case(
        "text-utf8",
        {"t/a.txt": b"ok\nbad \xfe\n", "t/b.txt": "words"},
        "text:t",
        "documents",
        "a.txt",
        2,
        None,
        1,
    ),
    # nq-open
    Case(
        "nq-missing-question",
        {"n.jsonl": j(Q, {"answer": ["a"]})},
        "nq-open:n.jsonl",
        "questions",
        "n.jsonl",
        2,
        "question",
        1,
    ),
    Case(
        "nq-answer-type",
        {"n.jsonl": j(Q, {"question": "q2", "answer": "a"})},
        "nq-open:n.jsonl",
        "questions",
        "n.jsonl",
        2,
        "answer",
        1,
    ),
    Case(
        "nq-answer-item",
        {"n.jsonl": j(Q, {"question": "q2", "answer": ["a", 3]})},
        "n.jsonl",
        "questions",
        "n.jsonl",
        2,
        "answer[1]",
        1,
    ),
    Case(
        "nq-duplicate",
        {"n.jsonl": j({**Q, "id": "x"}, {**Q, "id": "x"})},
        "n.jsonl",
        "questions",
        "n.jsonl",
        2,
        "id",
        1,
    ),
    Case(
        "nq-utf8",
        {"n.jsonl": j(Q).encode() + b'{"question": "\xc3", "answer": []}\n'},
        "nq-open:n.jsonl",
        "questions",
        "n.jsonl",
        2,
        None,
        1,
    ),
    # dpr-qas
    Case(
        "qas-literal",
        {"q.csv": "q one\t['a']\nq two\t['a'\n"},
        "q.csv",
        "questions",
        "q.csv",
        2,
        "answers",
        1,
    ),
    Case(
        "qas-columns",
        {"q.csv": "q one\t['a']\nq two\n"},
        "q.csv",
        "questions",
        "q.csv",
        2,
        "answers",
        1,
    ),
    Case(
        "qas-type",
        {"q.csv": "q one\t['a']\nq two\t{'a': 1}\n"},
        "q.csv",
        "questions",
        "q.csv",
        2,
        "answers",
        1,
    ),
    Case(
        "qas-empty",
        {"q.csv": "q one\t['a']\n \t['b']\n"},
        "dpr-qas:q.csv",
        "questions",
        "q.csv",
        2,
        "question",
        1,
    ),
    # multicpr questions
    Case(
        "mcpr-unknown-qid",
        {"m/dev.query.txt": MCPR_Q, "m/qrels.dev.tsv": "1\t0\t5\t1\n9\t0\t5\t1\n"},
        "m",
        "questions",
        "qrels.dev.tsv",
        2,
        "qid",
        2,
    ),
    Case(
        "mcpr-duplicate",
        {"m/dev.query.txt": MCPR_Q + "2\tagain\n", "m/qrels.dev.tsv": "1\t0\t5\t1\n"},
        "m/dev.query.txt",
        "questions",
        "dev.query.txt",
        3,
        "qid",
        2,
    ),
    Case(
        "mcpr-relevance",
        {"m/dev.query.txt": MCPR_Q, "m/qrels.dev.tsv": "1\t0\t5\tyes\n"},
        "m",
        "questions",
        "qrels.dev.tsv",
        1,
        "relevance",
        2,
    ),
    Case(
        "mcpr-empty-query",
        {"m/dev.query.txt": MCPR_Q + "3\t \n", "m/qrels.dev.tsv": "1\t0\t5\t1\n"},
        "m",
        "questions",
        "dev.query.txt",
        3,
        "query",
        2,
    ),
    # kilt
    Case(
        "kilt-missing-input",
        {"k.jsonl": j(KILT_OK, {"id": 2, "output": []})},
        "kilt:k.jsonl",
        "questions",
        "k.jsonl",
        2,
        "input",
        1,
    ),
    Case(
        "kilt-provenance",
        {
            "k.jsonl": j(
                KILT_OK, {"id": 2, "input": "q", "output": [{"provenance": [{"title": "T"}]}]}
            )
        },
        "k.jsonl",
        "questions",
        "k.jsonl",
        2,
        "output[0].provenance[0].wikipedia_id",
        1,
    ),
    Case(
        "kilt-output-type",
        {"k.jsonl": j(KILT_OK, {"id": 2, "input": "q", "output": "a"})},
        "k.jsonl",
        "questions",
        "k.jsonl",
        2,
        "output",
        1,
    ),
    Case(
        "kilt-duplicate",
        {"k.jsonl": j(KILT_OK, KILT_OK)},
        "k.jsonl",
        "questions",
        "k.jsonl",
        2,
        "id",
        1,
    ),
    # dpr-train
    Case(
        "dpr-train-positives",
        {"t.jsonl": j(DPR_OK, {"question": "q", "answers": []})},
        "dpr-train:t.jsonl",
        "questions",
        "t.jsonl",
        2,
        "positive_ctxs",
        1,
    ),
    Case(
        "dpr-train-ctx-type",
        {"t.jsonl": j(DPR_OK, {**DPR_OK, "hard_negative_ctxs": [{"title": "T", "text": 3}]})},
        "t.jsonl",
        "questions",
        "t.jsonl",
        2,
        "hard_negative_ctxs[0].text",
        1,
    ),
    Case(
        "dpr-train-list",
        {"t.json": json.dumps([DPR_OK, {"answers": []}], indent=2)},
        "t.json",
        "questions",
        "t.json",
        14,
        "question",
        1,
    ),
    # qa-json
    Case(
        "qa-json-missing",
        {"qs.json": json.dumps({"data": [{"id": "1", "question": "q"}, {"id": "2"}]}, indent=2)},
        "qa-json:qs.json",
        "questions",
        "qs.json",
        7,
        "question",
        1,
    ),
    Case(
        "qa-json-duplicate",
        {
            "qs.json": json.dumps(
                {"data": [{"id": "1", "question": "q"}, {"id": "1", "question": "r"}]}, indent=1
            )
        },
        "qa-json:qs.json",
        "questions",
        "qs.json",
        7,
        "id",
        1,
    ),
]


def _write(tmp: Path, files: dict[str, bytes | str]) -> None:
    for rel, content in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")


def _read(tmp: Path, case: Case, errors: ErrorLog) -> int:
    name, sep, rel = case.source.partition(":")
    spec = f"{name}:{tmp / rel}" if sep else str(tmp / case.source)
    src = parse_source(spec, want=case.want)
    if case.want == "documents":
        return len(list(src.documents(errors)))
    return len(src.questions(errors))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_error_names_file_line_field(tmp_path: Path, case: Case) -> None:
    _write(tmp_path, case.files)
    with pytest.raises(InputError) as info:
        _read(tmp_path, case, ErrorLog())
    err = info.value
    text = str(err)
    assert case.file in text and f"line {case.line}" in text, text
    assert err.line == case.line
    if case.field is not None:
        assert f"field '{case.field}'" in text and err.field == case.field, text
    # SKIP skips exactly the bad record, counts it, and keeps the rest.
    errors = ErrorLog(policy=ErrorPolicy.SKIP)
    assert _read(tmp_path, case, errors) == case.good
    assert errors.n_skipped == 1, errors.summary()
    assert str(errors.skipped[0]) == text


def test_wikitext_text_before_first_title(tmp_path: Path) -> None:
    p = tmp_path / "w.raw"
    p.write_text(" intro line \n = A = \n para \n", encoding="utf-8")
    with pytest.raises(InputError, match=r"w\.raw, line 1, field 'title'"):
        list(parse_source(f"wikitext:{p}").documents())
    errors = ErrorLog(policy=ErrorPolicy.SKIP)
    assert [d.doc_id for d in parse_source(f"wikitext:{p}").documents(errors)] == ["A"]
    assert errors.n_skipped == 1


EMPTY = [
    ("p.tsv", "id\ttext\ttitle\n", "dpr-tsv", "documents"),
    ("corpus.tsv", "\n", "multicpr", "documents"),
    ("d.jsonl", "\n", "jsonl", "documents"),
    ("w.raw", "\n\n", "wikitext", "documents"),
    ("n.jsonl", "", "nq-open", "questions"),
    ("q.csv", "\n", "dpr-qas", "questions"),
    ("k.jsonl", "", "kilt", "questions"),
    ("t.jsonl", "", "dpr-train", "questions"),
    ("t.json", "[]", "dpr-train", "questions"),
    ("qs.json", '{"data": []}', "qa-json", "questions"),
]


@pytest.mark.parametrize(
    ("name", "content", "fmt", "want"), EMPTY, ids=[e[2] + "-" + e[0] for e in EMPTY]
)
def test_empty_input_always_raises(
    tmp_path: Path, name: str, content: str, fmt: str, want: str
) -> None:
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    src = parse_source(f"{fmt}:{p}", want=want)
    for policy in (ErrorPolicy.STOP, ErrorPolicy.SKIP):
        with pytest.raises(InputError, match=rf"{name}: no .* found"):
            if want == "documents":
                list(src.documents(ErrorLog(policy=policy)))
            else:
                src.questions(ErrorLog(policy=policy))


def test_text_directory_without_txt_files_raises(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("not text format", encoding="utf-8")
    with pytest.raises(InputError, match=r"no text documents \(.txt files\) found"):
        list(parse_source(f"text:{tmp_path}").documents(ErrorLog(policy=ErrorPolicy.SKIP)))


def test_empty_after_skipping_still_raises(tmp_path: Path) -> None:
    p = tmp_path / "n.jsonl"
    p.write_text(j({"question": "q"}), encoding="utf-8")
    errors = ErrorLog(policy=ErrorPolicy.SKIP)
    with pytest.raises(InputError, match="no questions found"):
        parse_source(f"nq-open:{p}", want="questions").questions(errors)
    assert errors.n_skipped == 1


def test_empty_beir_and_multicpr(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "b/corpus.jsonl": "",
            "b/queries.jsonl": BEIR_QUERIES,
            "b/qrels/test.tsv": "query-id\tcorpus-id\tscore\n",
        },
    )
    with pytest.raises(InputError, match="corpus.jsonl: no documents found"):
        list(parse_source(tmp_path / "b").documents())
    with pytest.raises(InputError, match="test.tsv: no judged queries found"):
        parse_source(tmp_path / "b", want="questions").questions()
    _write(tmp_path, {"m/dev.query.txt": "\n", "m/qrels.dev.tsv": ""})
    with pytest.raises(InputError, match="dev.query.txt: no queries found"):
        parse_source(tmp_path / "m", want="questions").questions()


def test_missing_companion_files(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"m/dev.query.txt": MCPR_Q, "b/corpus.jsonl": BEIR_CORPUS, "b/queries.jsonl": BEIR_QUERIES},
    )
    (tmp_path / "b" / "qrels").mkdir()
    with pytest.raises(InputError, match="no qrels file qrels.dev.tsv or qrels.dev.txt"):
        parse_source(tmp_path / "m", want="questions").questions()
    with pytest.raises(InputError, match="no corpus.tsv"):
        list(parse_source(f"multicpr:{tmp_path / 'm'}").documents())
    with pytest.raises(InputError, match="not a corpus"):
        list(parse_source(f"multicpr:{tmp_path / 'm' / 'dev.query.txt'}").documents())
    with pytest.raises(InputError, match="no qrels file"):
        parse_source(tmp_path / "b", want="questions").questions()


def test_json_syntax_error_names_line(tmp_path: Path) -> None:
    p = tmp_path / "qs.json"
    p.write_text(
        '{\n  "data": [\n    {"id": "1", "question": "q"},\n    {"id": 2 "question": "r"}\n  ]\n}\n'
    )
    with pytest.raises(InputError, match=r"qs\.json, line 4: invalid JSON"):
        parse_source(f"qa-json:{p}", want="questions").questions()
    p.write_text('{"version": 1, "questions": []}')
    with pytest.raises(InputError, match=r"qs\.json, line 1, field 'data': missing field"):
        parse_source(f"qa-json:{p}", want="questions").questions()


def test_read_dpr_training_errors(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(j(DPR_OK, {**DPR_OK, "answers": "a"}), encoding="utf-8")
    with pytest.raises(InputError, match=r"t\.jsonl, line 2, field 'answers'"):
        read_dpr_training(p, ErrorLog())
    errors = ErrorLog(policy=ErrorPolicy.SKIP)
    assert len(read_dpr_training(p, errors)) == 1 and errors.n_skipped == 1
