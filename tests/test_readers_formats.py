"""Every reader on tiny fixtures written here: ids, titles, offsets, metadata, detection, forcing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from own_docs_helpers import csv_file, docx_file, html_file, md_file, pdf_file, rst_file, tsv_file

from anygrain.corpus.formats import FORMATS, parse_source
from anygrain.corpus.readers._io import IdSet, split_qrels, split_tsv
from anygrain.corpus.readers.dpr_qas import unquote_twice_quoted
from anygrain.corpus.readers.dpr_train import read_dpr_training
from anygrain.corpus.readers.multicpr import read_multicpr_questions
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError, ErrorLog


def _lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    return _lines(path, [json.dumps(r, ensure_ascii=False) for r in records])


def _check_offsets(docs: list[SourceDocument]) -> None:
    for doc in docs:
        for sp in doc.passages or []:
            piece = doc.text[sp.start : sp.end]
            assert piece and piece == piece.strip(), (doc.doc_id, sp)


# --- fixture writers ---------------------------------------------------------------------------


def dpr_tsv(tmp: Path) -> Path:
    return _lines(
        tmp / "psgs.tsv",
        [
            "id\ttext\ttitle",
            "11\tAaron is a prophet and high priest.\tAaron",
            '12\t"""Moses"" was his younger brother."\tAaron',
            '13\t"Heartbeat". The series ran for 18 years.\tHeartbeat',
            "14\tBeta is the second letter.\tBeta",
            "15\tAaron appears again later in the file.\tAaron",
        ],
    )


def dpr_tsv_noheader(tmp: Path) -> Path:
    return _lines(tmp / "psgs.tsv", ["1\tSome passage text here.\tSome title"])


def multicpr_corpus(tmp: Path) -> Path:
    return _lines(tmp / "corpus.tsv", ["1\t大落地窗 客厅", "2\t种花 阳台", "3\t墙面底漆"])


def jsonl_corpus(tmp: Path) -> Path:
    return _jsonl(
        tmp / "docs.jsonl",
        [
            {"id": "d1", "title": "First", "text": "Alpha beta.\n\nGamma delta.", "url": "u1"},
            {"id": 2, "text": "No title here."},
        ],
    )


def beir_dir(tmp: Path) -> Path:
    root = tmp / "scifact"
    _jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "c1", "title": "Cells", "text": "Cells divide.", "metadata": {"y": 1}},
            {"_id": "c2", "title": "", "text": "Atoms bond."},
            {"_id": "c3", "title": "Stars", "text": "Stars burn."},
        ],
    )
    _jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "do cells divide?"},
            {"_id": "q2", "text": "do atoms bond?", "metadata": {}},
            {"_id": "q3", "text": "do stars burn?"},
        ],
    )
    _lines(root / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore", "q1\tc1\t1", "q2\tc2\t2"])
    _lines(root / "qrels" / "dev.tsv", ["query-id\tcorpus-id\tscore", "q3\tc3\t1", "q3\tc1\t0"])
    return root


WIKITEXT = [
    " ",
    " = Robert Boulter = ",
    " ",
    " Robert Boulter is an English film , television and theatre actor . ",
    " ",
    " = = Career = = ",
    " ",
    " In 2000 he had a guest @-@ starring role . ",
    " ",
    " = = = 2000 – 2005 = = = ",
    " He starred in Herons . ",
    " = Du Fu = ",
    " Du Fu was a Chinese poet . ",
]


def wikitext(tmp: Path) -> Path:
    return _lines(tmp / "wiki.test.raw", WIKITEXT)


def text_dir(tmp: Path) -> Path:
    root = tmp / "notes"
    _lines(root / "a.txt", ["First file.", "", "Second paragraph."])
    _lines(root / "sub" / "b.txt", ["Nested file."])
    _lines(root / ".hidden" / "c.txt", ["Skipped."])
    (root / "readme.md").write_text("not a txt", encoding="utf-8")
    return root


def txt_only_dir(tmp: Path) -> Path:
    """A directory of .txt files alone: still the text format (a .md beside them makes it a
    folder of your own files, read whole: tests/test_own_documents.py)."""
    root = tmp / "plain"
    _lines(root / "a.txt", ["First file."])
    _lines(root / "sub" / "b.txt", ["Nested file."])
    return root


def text_file(tmp: Path) -> Path:
    (tmp / "essay.txt").write_bytes(b"Line one.\r\nLine two.\r\n")
    return tmp / "essay.txt"


def nq_open(tmp: Path) -> Path:
    return _jsonl(
        tmp / "NQ-open.dev.jsonl",
        [
            {"question": "who wrote hamlet", "answer": ["Shakespeare", "William Shakespeare"]},
            {"question": "capital of france", "answer": ["Paris", "Paris"], "extra": 1},
        ],
    )


def dpr_qas(tmp: Path) -> Path:
    return _lines(
        tmp / "nq-test.qa.csv",
        [
            "who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']",
            '"""Who said, """"How can you rule a country?"""\t[\'Charles de Gaulle\', "De Gaulle"]',
            "On what would you perform a \"Smith Grind\"?\t['Skateboard']",
        ],
    )


def dpr_qas_curated(tmp: Path) -> Path:
    return _jsonl(
        tmp / "topics.dpr.curated.test.txt",
        [{"question": "How tall is Mount McKinley?", "answer": ["20\\s?,?320 feet|6,194 m"]}],
    )


def multicpr_dir(tmp: Path) -> Path:
    root = tmp / "ecom"
    _lines(root / "dev.query.txt", ["200000\t大落地窗", "200001\t种花呂线", "200002\t墙面底漆"])
    _lines(root / "qrels.dev.tsv", ["200000\t0\t260\t1", "200001\t0\t779\t1", "200001\t0\t5\t0"])
    return root


def kilt(tmp: Path) -> Path:
    return _jsonl(
        tmp / "nq-dev-kilt.jsonl",
        [
            {
                "id": 1,
                "input": "how did Chen Yi-hsiung die?",
                "meta": {"template": "XXX"},
                "output": [
                    {
                        "answer": "suicide",
                        "provenance": [{"wikipedia_id": "10287141", "title": "Chen Yi-hsiung"}],
                    },
                    {"answer": "suicide", "provenance": [{"wikipedia_id": 99, "title": "Other"}]},
                    {"provenance": [{"wikipedia_id": "10287141"}]},
                ],
            },
            {"id": "q2", "input": "a test-set question without output"},
        ],
    )


def _ctx(pid: str, title: str, text: str, key: str = "passage_id") -> dict[str, object]:
    return {"title": title, "text": text, "score": 1.0, key: pid}


DPR_RECORDS: list[dict[str, object]] = [
    {
        "dataset": "nq",
        "question": "who sings does he love me with reba",
        "answers": ["Linda Davis"],
        "positive_ctxs": [
            _ctx("118", "Does He Love You", "a duet by Reba and Linda Davis"),
            _ctx("118", "Does He Love You", "a duet by Reba and Linda Davis"),
        ],
        "negative_ctxs": [_ctx("7", "Other", "unrelated text")],
        "hard_negative_ctxs": [{"title": "Hard", "text": "close but wrong"}],
    },
    {
        "question": "which nfl team won super bowl 50",
        "answers": ["Denver Broncos"],
        "positive_ctxs": [_ctx("9", "Super Bowl 50", "The Broncos won.", key="psg_id")],
    },
]


def dpr_train_jsonl(tmp: Path) -> Path:
    return _jsonl(tmp / "nq3_tiny.jsonl", DPR_RECORDS)


def dpr_train_json(tmp: Path) -> Path:
    p = tmp / "biencoder-nq-dev.json"
    p.write_text(json.dumps(DPR_RECORDS, indent=4), encoding="utf-8")
    return p


def qa_json(tmp: Path) -> Path:
    p = tmp / "questions.json"
    data = {
        "data": [
            {"id": "1", "question": "who won season 4", "answers": ["Kevin Skinner"]},
            {"question": "how many goals", "answers": ["61"], "split": "dev"},
        ]
    }
    p.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return p


def squad(tmp: Path) -> Path:
    p = tmp / "dev-v1.1.json"
    para = {
        "context": "Python was created by Guido.",
        "qas": [
            {"id": "q1", "question": "Who?", "answers": [{"text": "Guido", "answer_start": 22}]}
        ],
    }
    p.write_text(json.dumps({"version": "1.1", "data": [{"title": "Py", "paragraphs": [para]}]}))
    return p


# --- detection ---------------------------------------------------------------------------------

DETECT: list[tuple[Callable[[Path], Path], str, str | None]] = [
    (dpr_tsv, "dpr-tsv", None),
    (dpr_tsv_noheader, "dpr-tsv", None),
    (multicpr_corpus, "multicpr", "multicpr"),  # same format; reading questions fails clearly
    (jsonl_corpus, "jsonl", None),
    (beir_dir, "beir", "beir"),
    (wikitext, "wikitext", None),
    (text_dir, "folder", None),  # its readme.md is read too
    (txt_only_dir, "text", None),
    (md_file, "markdown", None),
    (rst_file, "rst", None),
    (html_file, "html", None),
    (csv_file, "csv", None),
    (tsv_file, "tsv", None),
    (pdf_file, "pdf", None),
    (docx_file, "docx", None),
    (text_file, "text", None),
    (nq_open, None, "nq-open"),
    (dpr_qas, None, "dpr-qas"),
    (dpr_qas_curated, None, "dpr-qas"),
    (multicpr_dir, "multicpr", "multicpr"),
    (kilt, None, "kilt"),
    (dpr_train_jsonl, None, "dpr-train"),
    (dpr_train_json, None, "dpr-train"),
    (qa_json, None, "qa-json"),
    (squad, "squad", "squad"),
]


@pytest.mark.parametrize(
    ("make", "docs_fmt", "qs_fmt"), DETECT, ids=[d[0].__name__ for d in DETECT]
)
def test_detection(
    tmp_path: Path, make: Callable[[Path], Path], docs_fmt: str | None, qs_fmt: str | None
) -> None:
    path = make(tmp_path)
    for want, expected in (("documents", docs_fmt), ("questions", qs_fmt)):
        if expected is None:
            # Nothing else may claim it either: no silent misreading as another format.
            with pytest.raises(AnygrainError, match="could not detect"):
                parse_source(path, want=want)
        else:
            src = parse_source(path, want=want)
            assert (src.format.name, src.detected) == (expected, True), want


def test_every_registered_format_has_a_fixture() -> None:
    covered = {f for _, d, q in DETECT for f in (d, q) if f} | {"dpr-qas-regex"}
    assert set(FORMATS) == covered


def test_forcing_format_prefix(tmp_path: Path) -> None:
    path = nq_open(tmp_path)
    src = parse_source(f"dpr-qas:{path}", want="questions")
    assert (src.format.name, src.detected) == ("dpr-qas", False)
    assert len(src.questions()) == 2
    forced = parse_source(f"dpr-qas-regex:{dpr_qas(tmp_path)}", want="questions").questions()
    assert all(q.answers_are_regex for q in forced)
    # A file no sniffer claims can still be read when forced.
    odd = _lines(tmp_path / "odd.data", ["x1\tSome text here.\tTitle"])
    assert parse_source(f"dpr-tsv:{odd}").format.name == "dpr-tsv"


# --- content -----------------------------------------------------------------------------------


def test_dpr_tsv_groups_rows_by_title(tmp_path: Path) -> None:
    docs = list(parse_source(dpr_tsv(tmp_path)).documents())
    assert [d.doc_id for d in docs] == ["Aaron", "Heartbeat", "Beta", "Aaron#2"]
    aaron = docs[0]
    assert aaron.title == "Aaron"
    assert aaron.text == 'Aaron is a prophet and high priest. "Moses" was his younger brother.'
    assert [sp.id for sp in aaron.passages or []] == ["11", "12"]
    assert [aaron.text[sp.start : sp.end] for sp in aaron.passages or []] == [
        "Aaron is a prophet and high priest.",
        '"Moses" was his younger brother.',
    ]
    # A raw (not CSV-quoted) field that merely starts with a quote is kept as is.
    assert docs[1].text == '"Heartbeat". The series ran for 18 years.'
    assert docs[3].title == "Aaron" and docs[3].origin.endswith("psgs.tsv:6")
    assert aaron.origin.endswith("psgs.tsv:2")
    _check_offsets(docs)


def test_dpr_tsv_header_in_other_order(tmp_path: Path) -> None:
    p = _lines(tmp_path / "p.tsv", ["title\tid\ttext", "T\t7\tHello world."])
    (doc,) = parse_source(p).documents()
    assert (doc.doc_id, doc.text, (doc.passages or [])[0].id) == ("T", "Hello world.", "7")


def test_multicpr_corpus(tmp_path: Path) -> None:
    docs = list(parse_source(multicpr_corpus(tmp_path)).documents())
    assert [(d.doc_id, d.text) for d in docs][0] == ("1", "大落地窗 客厅")
    assert all(d.passages and d.passages[0].id == d.doc_id for d in docs)
    _check_offsets(docs)
    # A domain directory reads its corpus.tsv.
    (tmp_path / "dev.query.txt").write_text("9\tq\n", encoding="utf-8")
    assert len(list(parse_source(f"multicpr:{tmp_path}").documents())) == 3


def test_jsonl_corpus(tmp_path: Path) -> None:
    docs = list(parse_source(jsonl_corpus(tmp_path)).documents())
    assert [(d.doc_id, d.title) for d in docs] == [("d1", "First"), ("2", "")]
    assert docs[0].meta == {"url": "u1"} and docs[0].passages is None
    assert docs[1].origin.endswith("docs.jsonl:2")
    pyserini = _jsonl(tmp_path / "pyserini.jsonl", [{"id": "p", "contents": "Body."}])
    (doc,) = parse_source(pyserini).documents()
    assert (doc.doc_id, doc.text) == ("p", "Body.")


def test_beir(tmp_path: Path) -> None:
    root = beir_dir(tmp_path)
    docs = list(parse_source(root).documents())
    assert [(d.doc_id, d.title) for d in docs] == [("c1", "Cells"), ("c2", ""), ("c3", "Stars")]
    assert docs[0].meta == {"metadata": {"y": 1}}
    assert [sp.id for d in docs for sp in d.passages or []] == ["c1", "c2", "c3"]
    _check_offsets(docs)
    qs = parse_source(root, want="questions").questions()
    assert [q.id for q in qs] == ["q1", "q2"]  # test split only
    assert qs[1].qrels == {"c2": 2} and qs[1].gold == ["c2"] and qs.has_qrels
    dev = parse_source(f"beir:{root / 'qrels' / 'dev.tsv'}", want="questions").questions()
    assert [q.id for q in dev] == ["q3"]
    assert dev[0].qrels == {"c3": 1, "c1": 0} and dev[0].gold == ["c3"]
    (root / "qrels" / "test.tsv").unlink()
    assert [q.id for q in parse_source(root, want="questions").questions()] == ["q3"]


def test_wikitext(tmp_path: Path) -> None:
    docs = list(parse_source(wikitext(tmp_path)).documents())
    assert [d.doc_id for d in docs] == ["Robert Boulter", "Du Fu"]
    rb = docs[0]
    texts = [rb.text[sp.start : sp.end] for sp in rb.passages or []]
    assert texts == [
        "Robert Boulter is an English film , television and theatre actor .",
        "In 2000 he had a guest @-@ starring role .",
        "He starred in Herons .",
    ]
    assert "Career" in rb.text and all("=" not in t for t in texts)
    assert [sp.meta.get("section") for sp in rb.passages or []] == [
        None,
        "Career",
        "Career / 2000 – 2005",
    ]
    assert [sp.id for sp in rb.passages or []] == [f"Robert Boulter_{i}" for i in range(3)]
    assert rb.origin.endswith("wiki.test.raw:2") and docs[1].origin.endswith(":12")
    _check_offsets(docs)


def test_text_directory_and_file(tmp_path: Path) -> None:
    docs = list(parse_source(f"text:{text_dir(tmp_path)}").documents())
    assert [(d.doc_id, d.title) for d in docs] == [("a.txt", "a"), ("sub/b.txt", "b")]
    assert docs[0].text == "First file.\n\nSecond paragraph.\n" and docs[0].passages is None
    (doc,) = parse_source(text_file(tmp_path)).documents()
    assert (doc.doc_id, doc.title, doc.text) == ("essay.txt", "essay", "Line one.\nLine two.\n")


def test_text_directory_reports_every_file_read_or_skipped(tmp_path: Path) -> None:
    """A directory mixing .jsonl and .txt: the .jsonl file is not read as text, and says so."""
    root = text_dir(tmp_path)
    _jsonl(root / "more.jsonl", [{"id": "d1", "text": "A JSONL document."}])
    errors = ErrorLog()
    docs = list(parse_source(f"text:{root}").documents(errors))
    assert [d.doc_id for d in docs] == ["a.txt", "sub/b.txt"]
    notes = {Path(n.path).relative_to(root).as_posix(): n for n in errors.files}
    assert sorted(notes) == [".hidden/c.txt", "a.txt", "more.jsonl", "readme.md", "sub/b.txt"]
    assert notes["a.txt"].read and notes["sub/b.txt"].read
    assert not notes["more.jsonl"].read
    assert "not a .txt file" in notes["more.jsonl"].reason
    assert f"jsonl:{root / 'more.jsonl'}" in notes["more.jsonl"].reason
    assert notes[".hidden/c.txt"].reason == "hidden file or directory"
    assert str(notes["more.jsonl"]).startswith("skipped ")
    assert [n.path for n in errors.files_skipped] == [
        str(root / ".hidden" / "c.txt"),
        str(root / "more.jsonl"),
        str(root / "readme.md"),
    ]


def test_nq_open(tmp_path: Path) -> None:
    qs = parse_source(nq_open(tmp_path), want="questions").questions()
    assert [q.id for q in qs] == ["1", "2"]
    assert qs[0].answers == ["Shakespeare", "William Shakespeare"]
    assert qs[1].answers == ["Paris"] and qs[1].meta == {"extra": 1}
    assert not qs[0].answers_are_regex and qs.format == "nq-open"
    with_ids = _jsonl(tmp_path / "ids.jsonl", [{"id": "x7", "question": "q?", "answer": []}])
    assert parse_source(with_ids, want="questions").questions()[0].id == "x7"


def test_dpr_qas(tmp_path: Path) -> None:
    qs = parse_source(dpr_qas(tmp_path), want="questions").questions()
    assert [q.id for q in qs] == ["1", "2", "3"]
    assert qs[0].answers == ["Wilhelm Conrad Röntgen"]
    assert qs[1].text == 'Who said, "How can you rule a country?'
    assert qs[1].answers == ["Charles de Gaulle", "De Gaulle"]
    assert qs[2].text == 'On what would you perform a "Smith Grind"?'
    assert not any(q.answers_are_regex for q in qs)
    curated = parse_source(dpr_qas_curated(tmp_path), want="questions").questions()
    assert curated[0].answers_are_regex and curated[0].answers == ["20\\s?,?320 feet|6,194 m"]


def test_split_tsv_and_unquote() -> None:
    assert split_tsv('1\t"a ""b"" c"\tT', 3) == ["1", 'a "b" c', "T"]
    assert split_tsv('1\t"a" b\tT', 3) == ["1", '"a" b', "T"]
    assert split_tsv('1\t"open quote\tT', 3) == ["1", '"open quote', "T"]
    assert unquote_twice_quoted('"a ""b"" c"') == 'a "b" c'
    assert unquote_twice_quoted('"a" and "b"') == '"a" and "b"'


def test_id_set() -> None:
    ids = IdSet()
    assert ids.add("5") and ids.add("05") and ids.add("x") and ids.add("99999999999")
    assert not ids.add("5") and not ids.add("05") and not ids.add("x")


def test_multicpr_questions(tmp_path: Path) -> None:
    root = multicpr_dir(tmp_path)
    qs = parse_source(root, want="questions").questions()
    assert [q.id for q in qs] == ["200000", "200001", "200002"]
    assert qs[0].text == "大落地窗" and qs[0].qrels == {"260": 1} and qs[0].gold == ["260"]
    assert qs[1].qrels == {"779": 1, "5": 0} and qs[1].gold == ["779"]
    assert not qs[2].answerable  # kept, with no judgements
    same = parse_source(root / "dev.query.txt", want="questions").questions()
    assert [q.id for q in same] == [q.id for q in qs]
    pref = read_multicpr_questions(root, ErrorLog(), prefix="ecom-")
    # The prefix goes on the judged passage ids too, to match a corpus read with it.
    assert pref[0].id == "ecom-200000" and pref[0].qrels == {"ecom-260": 1}
    assert pref[1].qrels == {"ecom-779": 1, "ecom-5": 0} and pref[1].gold == ["ecom-779"]


def test_qrels_whitespace_separated_trec_layout(tmp_path: Path) -> None:
    """Anserini/Pyserini qrels (``qid 0 docid rel`` with spaces, named .txt) read like tabs."""
    root = tmp_path / "msmarco"
    _lines(
        root / "dev.query.txt", ["1048585\twhat is paula deen's brother", "2\tAndrogen receptor"]
    )
    _lines(root / "qrels.dev.txt", ["1048585 0 7187158 1", "2  0   1234 1", "2 0 99 0"])
    qs = parse_source(f"multicpr:{root}", want="questions").questions()
    assert qs[0].qrels == {"7187158": 1} and qs[0].gold == ["7187158"]
    assert qs[1].qrels == {"1234": 1, "99": 0} and qs[1].gold == ["1234"]
    # the tab layout keeps reading as before
    _lines(root / "qrels.dev.tsv", ["1048585\t0\t7187158\t1"])
    (root / "qrels.dev.txt").unlink()
    assert parse_source(f"multicpr:{root}", want="questions").questions()[0].qrels == {"7187158": 1}
    beir = tmp_path / "beir"
    _jsonl(beir / "corpus.jsonl", [{"_id": "c1", "text": "one"}, {"_id": "c2", "text": "two"}])
    _jsonl(beir / "queries.jsonl", [{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "x"}])
    _lines(beir / "qrels" / "test.tsv", ["q1 0 c1 2", "q2 c2 1"])
    bq = parse_source(beir, want="questions").questions()
    assert bq[0].qrels == {"c1": 2} and bq[1].qrels == {"c2": 1}


def test_split_qrels() -> None:
    assert split_qrels("q1 0  d1\t1") == ["q1 0  d1", "1"]  # a tab line splits on tabs only
    assert split_qrels("q1 0  d1 1") == ["q1", "0", "d1", "1"]
    assert split_qrels("q1\t0\td 1\t1") == ["q1", "0", "d 1", "1"]


def test_kilt(tmp_path: Path) -> None:
    qs = parse_source(kilt(tmp_path), want="questions").questions()
    assert [q.id for q in qs] == ["1", "q2"]
    q = qs[0]
    assert q.text == "how did Chen Yi-hsiung die?" and q.answers == ["suicide"]
    assert q.gold == ["10287141", "99"]
    assert q.meta == {
        "titles": ["Chen Yi-hsiung", "Other"],
        "kilt": {"template": "XXX"},
        # One provenance set per output, for KILT's max-over-sets R-precision.
        "gold_sets": [["10287141"], ["99"], ["10287141"]],
    }
    assert qs[1].answers == [] and qs[1].gold == []


@pytest.mark.parametrize("make", [dpr_train_jsonl, dpr_train_json])
def test_dpr_train(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    path = make(tmp_path)
    examples = read_dpr_training(path, ErrorLog())
    assert len(examples) == 2
    ex = examples[0]
    assert ex.question == "who sings does he love me with reba" and ex.answers == ["Linda Davis"]
    assert ex.positives[0] == ("118", "Does He Love You", "a duet by Reba and Linda Davis")
    assert len(ex.positives) == 2 and ex.negatives == [("7", "Other", "unrelated text")]
    assert ex.hard_negatives == [(None, "Hard", "close but wrong")]
    assert ex.meta == {"dataset": "nq"}
    assert examples[1].positives[0][0] == "9" and examples[1].negatives == []
    qs = parse_source(path, want="questions").questions()
    assert qs[0].gold == ["118"] and qs[0].meta["positive_titles"] == ["Does He Love You"]
    assert qs[1].gold == ["9"]
    # Ids are the lines where records start.
    lines = path.read_text().splitlines()
    assert [lines[int(q.id) - 1].strip()[:1] for q in qs] == ["{", "{"]


def test_qa_json(tmp_path: Path) -> None:
    path = qa_json(tmp_path)
    qs = parse_source(path, want="questions").questions()
    assert qs[0].id == "1" and qs[0].answers == ["Kevin Skinner"]
    # Without an id the record's line number stands in.
    assert path.read_text().splitlines()[int(qs[1].id) - 1].strip() == "{"
    assert qs[1].meta == {"split": "dev"}


def test_squad_answers_off_their_answer_start_are_counted_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Annotator spans cut mid-word keep their answers (matched by text), but never silently."""
    from anygrain.corpus.readers.squad import MISPLACED_ANSWERS

    ctx = "Guido van Rossum created Python in 1991."
    qas = [
        {"id": "ok", "question": "Who?", "answers": [{"text": "Guido van Rossum", "answer_start": 0}]},
        {"id": "cut", "question": "What?", "answers": [{"text": "ython", "answer_start": 24}]},
        {"id": "off", "question": "When?", "answers": [
            {"text": "1991", "answer_start": 3}, {"text": "in 1991", "answer_start": 32}]},
        {"id": "none", "question": "Where?", "answers": [{"text": "Python"}]},  # no offset
    ]  # fmt: skip
    f = tmp_path / "s.json"
    data = {"data": [{"title": "T", "paragraphs": [{"context": ctx, "qas": qas}]}]}
    f.write_text(json.dumps(data), encoding="utf-8")
    errors = ErrorLog()
    with caplog.at_level("WARNING", logger="anygrain"):
        qs = parse_source(f"squad:{f}", want="questions").questions(errors)
    assert [q.answers for q in qs] == [
        ["Guido van Rossum"],
        ["ython"],
        ["1991", "in 1991"],
        ["Python"],
    ]
    assert errors.noted == {MISPLACED_ANSWERS: 2} and errors.n_skipped == 0
    assert f"{f}: 2 answers do not occur at their answer_start; matched by text" in caplog.text
    caplog.clear()
    data["data"][0]["paragraphs"][0]["qas"] = qas[:1]
    f.write_text(json.dumps(data), encoding="utf-8")
    errors = ErrorLog()
    with caplog.at_level("WARNING", logger="anygrain"):
        parse_source(f"squad:{f}", want="questions").questions(errors)
    assert errors.noted == {} and "answer_start" not in caplog.text
