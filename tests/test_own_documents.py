"""Your own documents: a folder of Markdown, reStructuredText, HTML, PDF, DOCX, text, CSV,
TSV and JSONL files read whole; every hit citing its file, page and heading path, with
offsets into the file's extracted text at every grain; passages that follow the file's
sections and pages; files that cannot be read skipped and counted by why; and ``add``
reading only new and changed files.  Every fixture is written here
(tests/own_docs_helpers.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from own_docs_helpers import (
    PDF_PAGES,
    broken_files,
    csv_file,
    damaged_pdf,
    docx_file,
    folder,
    html_file,
    jsonl_file,
    md_file,
    pdf_file,
    rst_file,
    tsv_file,
    write,
)
from typer.testing import CliRunner

from anygrain import Index
from anygrain.cli.main import app
from anygrain.corpus import files as files_mod
from anygrain.corpus.formats import parse_source
from anygrain.corpus.records import SourceDocument, Span
from anygrain.corpus.splitters import PASSAGE_WORDS, SplitSpec, split_document
from anygrain.errors import AnygrainError, ErrorLog, InputError, UsageError
from anygrain.hits.hit import Hit, Unit

runner = CliRunner()
QUESTIONS = [
    "proxy server address",
    "revenue growth Europe",
    "warehouse in Lyon",
    "budget for hardware",
    "metadata filter field value",
    "cache_dir renamed",
    "glaciers carve valleys",
    "plumber leak",
    "ranking function",
]


def docs_of(path: Path | str, **fields: Any) -> list[SourceDocument]:
    from anygrain.corpus.fields import FieldMap, with_read_options

    src = with_read_options(str(path), FieldMap.of(**fields)) if fields else parse_source(path)
    return list(src.documents())


def passages(
    doc: SourceDocument, split: str = "auto"
) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [
        (doc.text[sp.start : sp.end], sp.title, sp.meta)
        for sp in split_document(doc, SplitSpec.parse(split))
    ]


def check_hit(h: Hit, index: Index) -> None:
    """The hit's span is where its offsets say in its file's extracted text, and its
    provenance names the file."""
    text = index.corpus.document_text(h.doc_id)
    assert h.char_start is not None and h.char_end is not None
    assert text[h.char_start : h.char_end] == h.answer_text
    assert isinstance(h.meta["source"], str) and h.citation.startswith(h.meta["source"])
    js = json.loads(json.dumps(h.to_json(1)))
    assert (js["char_start"], js["char_end"], js["citation"]) == (
        h.char_start,
        h.char_end,
        h.citation,
    )
    if h.meta["format"] == "pdf":
        page = h.meta["page"]
        assert h.answer_text in "\n".join(PDF_PAGES[page - 1]) and h.citation.endswith(
            f"page {page}"
        )


# --- each format ---------------------------------------------------------------------------
def test_markdown_headings_code_and_front_matter(tmp_path: Path) -> None:
    (doc,) = docs_of(md_file(tmp_path))
    assert doc.doc_id == "install.md" and doc.title == "Install guide"
    assert doc.text == md_file(tmp_path).read_text(encoding="utf-8")  # offsets into the file
    assert doc.meta["tags"] == ["setup", "network"] and doc.meta["updated"] == "2024-05-01"
    assert doc.meta["front_matter_source"] == "the wiki" and doc.meta["source"] == "install.md"
    assert doc.meta["format"] == "markdown" and len(doc.meta["sha256"]) == 64
    got = passages(doc)
    heads = [m.get("headings") for _, _, m in got]
    assert heads == [
        None,
        ["Install"],
        ["Install", "Configuration"],
        ["Install", "Configuration", "Proxies"],
        ["Upgrading"],
    ]
    text, title, _ = got[3]
    assert (
        text.startswith("Set HTTP_PROXY")
        and title == "Install guide › Install › Configuration › Proxies"
    )
    assert "# this line is code, not a heading" in got[2][0]  # fenced code kept as text
    assert not any("title: Install guide" in t or "## " in t for t, _, _ in got)


def test_rst_sections_and_field_list(tmp_path: Path) -> None:
    (doc,) = docs_of(rst_file(tmp_path))
    assert (doc.title, doc.meta["author"], doc.meta["format"]) == ("User guide", "Ada", "rst")
    got = passages(doc)
    assert [m["headings"] for _, _, m in got] == [
        ["User guide"],
        ["User guide", "Searching"],
        ["User guide", "Searching", "Filters"],
        ["User guide", "Exporting"],
    ]
    assert "not a title" in got[2][0]  # an indented literal block is no section title
    assert not any(":author:" in t for t, _, _ in got)


def test_html_main_content_without_furniture(tmp_path: Path) -> None:
    pytest.importorskip("selectolax")
    (doc,) = docs_of(html_file(tmp_path))
    assert doc.title == "Release notes" and doc.meta["author"] == "The team"
    for furniture in ("Home", "Menu item", "Sidebar", "Copyright", "console.log", "color: red"):
        assert furniture not in doc.text
    got = passages(doc)
    assert [m["headings"] for _, _, m in got] == [
        ["Version 2.0"],
        ["Version 2.0", "Breaking changes"],
    ]
    assert got[0][0] == "Version 2.0 brings faster indexing of large folders."
    assert "anygrain index docs --out idx\nanygrain search" in got[1][0]  # <pre> kept as is
    assert "Option Default" in got[1][0]


def test_pdf_page_by_page(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    (doc,) = docs_of(pdf_file(tmp_path))
    assert doc.title == "Annual report" and doc.meta["page_count"] == 3
    assert doc.meta["pages_without_text"] == [2]
    got = passages(doc)
    assert [m["page"] for _, _, m in got] == [1, 3]
    assert got[0][0] == "\n".join(PDF_PAGES[0]) and got[1][0] == "\n".join(PDF_PAGES[2])


def test_docx_headings_and_tables(tmp_path: Path) -> None:
    pytest.importorskip("docx")
    (doc,) = docs_of(docx_file(tmp_path))
    assert doc.title == "Meeting minutes"
    got = passages(doc)
    assert [m["headings"] for _, _, m in got] == [["Decisions"], ["Decisions", "Budget"]]
    assert got[1][0].endswith("Owner | Grace")


def test_csv_tsv_jsonl_with_field_options(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no text field .*--text-field"):
        docs_of(csv_file(tmp_path))
    rows = docs_of(
        csv_file(tmp_path), text_field="answer", title_field="question", meta_fields="topic"
    )
    assert [(d.doc_id, d.title) for d in rows] == [
        ("q1", "How do I install?"),
        ("q2", "Where are settings?"),
    ]
    assert rows[1].text == "In the TOML file\nin your home directory."
    assert {k: rows[1].meta[k] for k in ("topic", "source", "line", "format")} == {
        "topic": "config",
        "source": "faq.csv",
        "line": 3,
        "format": "csv",
    }
    assert "answer" not in rows[1].meta and "id" not in rows[1].meta
    (term,) = docs_of(tsv_file(tmp_path))
    assert (term.doc_id, term.text, term.meta["term"]) == (
        "glossary.tsv:2",
        "A ranking function for search.",
        "BM25",
    )
    with pytest.raises(InputError, match=r"facts.jsonl, line 2: no field 'slug' \(--id-field"):
        docs_of(jsonl_file(tmp_path), text_field="body", id_field="slug")
    facts = docs_of(jsonl_file(tmp_path), text_field="body")
    assert [d.doc_id for d in facts] == ["facts.jsonl:1", "facts.jsonl:2"]
    assert facts[0].meta["slug"] == "a" and facts[0].meta["line"] == 1


def test_field_options_are_refused_where_they_do_nothing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--text-field name the fields of CSV"):
        Index.build(str(md_file(tmp_path)), kind="bm25", out=tmp_path / "i", text_field="x")
    with pytest.raises(UsageError, match="not one"):
        Index.from_texts(["a text"], text_field="x")
    plain = tmp_path / "plain"
    md_file(plain)
    with pytest.raises(UsageError, match="none was read here"):
        Index.build(str(plain), kind="bm25", out=tmp_path / "j", text_field="x", progress=False)
    with pytest.raises(UsageError, match="does not take --text-field"):
        Index.build(
            f"text:{write(tmp_path / 't.txt', 'x')}",
            kind="bm25",
            out=tmp_path / "k",
            text_field="x",
        )


# --- files that cannot be read ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("empty.md", "empty file"),
        ("image.md", "a binary file"),
        ("latin1.md", r"not UTF-8 \(invalid byte at line 1\)"),
        ("broken.pdf", "a damaged PDF"),
        ("scan.pdf", "no text layer on its 1 page"),
    ],
)
def test_one_unreadable_file_is_a_one_line_error(tmp_path: Path, name: str, message: str) -> None:
    pytest.importorskip("pypdf")
    broken_files(tmp_path)
    with pytest.raises(InputError, match=message) as e:
        docs_of(tmp_path / name)
    assert str(tmp_path / name) in str(e.value) and "\n" not in str(e.value)
    r = runner.invoke(app, ["index", str(tmp_path / name), "--out", str(tmp_path / "i"), "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1 and name in r.stderr


def test_folder_skips_and_counts_what_it_cannot_read(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    root = tmp_path / "mixed"
    want = broken_files(root)
    md_file(root)
    errors = ErrorLog()  # the default, stop: a file that cannot be read is a skip, not a stop
    docs = list(parse_source(root).documents(errors))
    assert [d.doc_id for d in docs] == ["install.md"]
    skipped = {Path(f.path).name: f.category for f in errors.files_skipped}
    assert skipped == want
    line = errors.files_summary()
    assert line.startswith("read 1 file (markdown 1); skipped 7 (")
    for category in set(want.values()):
        assert category in line


def test_missing_reader_library_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files_mod._installed.cache_clear()
    real = files_mod._installed.__wrapped__
    monkeypatch.setattr(files_mod, "_installed", lambda m: m != "pypdf" and real(m))
    root = tmp_path / "d"
    md_file(root)
    damaged_pdf(root)
    errors = ErrorLog()
    assert len(list(parse_source(root).documents(errors))) == 1
    (note,) = errors.files_skipped
    assert (
        "pip install 'anygrain[docs]'" in note.reason
        and note.category == "pdf reader not installed"
    )
    with pytest.raises(InputError, match=r"needs pypdf: pip install 'anygrain\[docs\]'"):
        docs_of(root / "broken.pdf")


# --- passages that follow the document -------------------------------------------------------
def test_passages_stay_in_their_section_and_window() -> None:
    long_para = " ".join(f"Sentence number {i} talks about storage." for i in range(80))
    text = f"{long_para}\n\nShort one.\n\nOther section text.\n\nPage two."
    a = len(long_para) + 2 + len("Short one.")
    sections = [
        Span(0, a, title="Doc › A", meta={"headings": ["A"]}),
        Span(a + 2, a + 2 + len("Other section text."), title="Doc › B", meta={"headings": ["B"]}),
        Span(len(text) - len("Page two."), len(text), title="Doc", meta={"page": 2}),
    ]
    doc = SourceDocument("d", "Doc", text, sections=sections)
    spans = list(split_document(doc, SplitSpec()))
    for sp in spans:
        sec = next(s for s in sections if s.start <= sp.start and sp.end <= s.end)  # within one
        assert (sp.title, sp.meta) == (sec.title, sec.meta)
        assert len(text[sp.start : sp.end].split()) <= PASSAGE_WORDS
        assert text[sp.start : sp.end].strip() == text[sp.start : sp.end]
    assert len([sp for sp in spans if sp.meta.get("headings") == ["A"]]) >= 3
    # every word is in exactly one passage
    assert sum(len(text[sp.start : sp.end].split()) for sp in spans) == len(text.split())
    assert [sp.meta.get("page") for sp in spans][-1] == 2
    # other splits cut within sections too
    for spec in ("w5", "paragraph", "chars:40"):
        for sp in split_document(doc, SplitSpec.parse(spec)):
            assert any(s.start <= sp.start and sp.end <= s.end for s in sections), spec


# --- a folder indexed, searched and cited ----------------------------------------------------
@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pypdf")
    pytest.importorskip("selectolax")
    root = folder(tmp_path_factory.mktemp("own") / "mydocs")
    broken_files(root / "junk")
    return root


@pytest.fixture(scope="module")
def bm25(mixed: Path) -> Index:
    return Index.build(str(mixed), kind="bm25", out=mixed.parent / "bm25", progress=False)


def test_every_bm25_hit_cites_its_file(bm25: Index) -> None:
    store = bm25.corpus
    own = [" ".join(store.passage(r).text.split()[:8]) for r in range(len(store))]
    hits = bm25.search(own, k=5)
    seen = {h.passage_id for hs in hits for h in hs}
    assert len(seen) == len(store)  # every passage checked
    for hs in hits:
        for h in hs:
            check_hit(h, bm25)
    hits = bm25.search(QUESTIONS, k=1)
    top = {q: hs[0] for q, hs in zip(QUESTIONS, hits, strict=True)}
    assert top["proxy server address"].citation == "install.md › Install › Configuration › Proxies"
    assert top["warehouse in Lyon"].citation == "report.pdf · page 3"
    assert top["revenue growth Europe"].citation == "report.pdf · page 1"
    assert top["budget for hardware"].citation == "minutes.docx › Decisions › Budget"
    assert (
        top["metadata filter field value"].citation
        == "docs/guide.rst › User guide › Searching › Filters"
    )
    assert top["cache_dir renamed"].citation == "web/notes.html › Version 2.0 › Breaking changes"
    assert top["glaciers carve valleys"].citation == "facts.jsonl · line 1"
    assert top["proxy server address"].title == "Install guide › Install › Configuration › Proxies"
    manifest = bm25.corpus.manifest
    assert manifest["source_format"] == "folder"


def test_hits_filter_on_provenance(bm25: Index) -> None:
    (hits,) = bm25.search(["installer"], k=10, filter={"source": "install.md"})
    assert hits and all(h.meta["source"] == "install.md" for h in hits)


def test_cli_index_summary_and_cited_output(mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    r = runner.invoke(app, ["index", str(mixed), "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    summary = [line for line in r.stderr.splitlines() if line.startswith("read ")]
    assert summary == [
        "read 8 files (docx 1, html 1, jsonl 1, markdown 1, pdf 1, rst 1, text 1, tsv 1); "
        "skipped 8 (empty file 2, binary file 1, damaged PDF 1, no text field 1, "
        "no text layer (scanned PDF) 1, not UTF-8 1, unsupported .png 1)"
    ]
    assert f"skipped {mixed / 'faq.csv'}: no text field" in r.stderr  # each skip named
    assert f"skipped {mixed / 'junk' / 'scan.pdf'}: no text layer" in r.stderr
    assert "indexed" in r.stdout and "(folder)" in r.stdout
    r = runner.invoke(app, ["search", str(out), "proxy server address", "-k", "1"])
    assert "install.md › Install ›" in r.stdout and "Proxies" in r.stdout
    r = runner.invoke(app, ["search", str(out), "warehouse in Lyon", "-k", "1", "--json"])
    hit = json.loads(r.stdout)
    assert hit["citation"] == "report.pdf · page 3" and hit["meta"]["page"] == 3
    assert hit["char_end"] - hit["char_start"] == len(hit["text"])


def test_server_and_frameworks_carry_provenance(bm25: Index) -> None:
    pytest.importorskip("pydantic")
    from anygrain.serve import page
    from anygrain.serve.schemas import hits_out

    (hits,) = bm25.search(["warehouse in Lyon"], k=1)
    (out,) = hits_out(hits)
    assert (out.citation, out.meta["page"], out.char_start) == (
        "report.pdf · page 3",
        3,
        hits[0].char_start,
    )
    assert "h.citation" in page._TEMPLATE  # each card is headed by it
    try:
        from anygrain.integrations.langchain import hit_document
    except ImportError:
        pass
    else:
        m = hit_document(hits[0]).metadata
        assert (m["source"], m["page"], m["citation"], m["char_start"]) == (
            "report.pdf",
            3,
            "report.pdf · page 3",
            hits[0].char_start,
        )
    try:
        from anygrain.integrations.llamaindex import hit_node
    except ImportError:
        pass
    else:
        n = hit_node(hits[0]).node
        assert (
            n.metadata["source"] == "report.pdf" and n.metadata["char_start"] == hits[0].char_start
        )
    try:
        from anygrain.integrations.haystack import hit_document as haystack_document
    except ImportError:
        pass
    else:
        d = haystack_document(hits[0])
        assert (
            d.meta["source"] == "report.pdf"
            and d.meta["page"] == 3
            and d.meta["char_end"] == hits[0].char_end
        )


# --- every grain -----------------------------------------------------------------------------
@pytest.mark.usefixtures("torch_one_thread")
def test_phrase_and_answer_grains_cite_their_file(
    tmp_path_factory: pytest.TempPathFactory, bm25: Index
) -> None:
    torch = pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_model, make_tiny_phrase_model

    from anygrain.api import search_index
    from anygrain.reader import Reader

    small = tmp_path_factory.mktemp("small") / "docs"
    md_file(small)
    pdf_file(small)
    model = make_tiny_phrase_model(tmp_path_factory)
    idx = Index.build(
        str(small), kind="phrase", out=small.parent / "phrase", model=str(model), progress=False
    )
    for unit in (Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT):
        got = idx.search(QUESTIONS[:3], k=3, unit=unit)
        assert all(got)
        for hs in got:
            for h in hs:
                assert h.unit is unit
                check_hit(h, idx)
    reader_dir = tmp_path_factory.mktemp("reader")
    tiny = make_tiny_model(reader_dir / "tiny")
    torch.manual_seed(0)
    Reader.from_pretrained(str(tiny), max_length=48, max_question_length=16, stride=8).save(
        reader_dir / "r"
    )
    answers = search_index(bm25, QUESTIONS, 2, unit="answer", reader=str(reader_dir / "r"), read=3)
    assert all(answers)
    for hs in answers:
        for h in hs:
            assert h.unit is Unit.ANSWER and h.span is not None
            check_hit(h, bm25)


# --- updates ---------------------------------------------------------------------------------
def test_add_reads_only_new_and_changed_files_and_delete_by_file(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    md_file(root)
    write(root / "todo.txt", "Buy milk.\n")
    idx_dir = tmp_path / "idx"
    Index.build(str(root), kind="bm25", out=idx_dir, progress=False)
    from anygrain.api import add_documents, delete_documents

    errors = ErrorLog()
    idx = add_documents(idx_dir, str(root), errors=errors, progress=False)
    assert idx.corpus.n_documents == 2 and "tombstones" not in idx.manifest
    assert errors.files_summary() == "read 0 files; skipped 2 (unchanged 2)"
    # one file changed, one new
    with (root / "install.md").open("a", encoding="utf-8") as f:
        f.write("\nSOCKS proxies are supported as well.\n")
    write(root / "sub" / "new.md", "# Llamas\n\nLlamas live in the Andes.\n")
    errors = ErrorLog()
    idx = add_documents(idx_dir, str(root), errors=errors, progress=False)
    assert errors.files_summary() == "read 2 files (markdown 2; 1 changed); skipped 1 (unchanged 1)"
    assert idx.corpus.n_documents == 4
    (hits,) = idx.search(["SOCKS proxies"], k=20)
    assert {h.doc_id for h in hits} == {"install.md#2"}  # the old version is deleted
    assert all(h.meta["source"] == "install.md" and h.meta["version"] == 2 for h in hits)
    for h in hits:
        assert idx.corpus.document_text(h.doc_id)[h.char_start : h.char_end] == h.text
    (hits,) = idx.search(["Andes"], k=1)
    assert hits[0].citation == "sub/new.md › Llamas"
    res = delete_documents(idx_dir, files=["install.md"])
    assert res["deleted"] == ["install.md#2"]  # install.md was deleted already
    (hits,) = Index.load(idx_dir).search(["installer proxy"], k=20)
    assert all(h.meta["source"] != "install.md" for h in hits)
    with pytest.raises(AnygrainError, match="no document read from 'gone.md'"):
        delete_documents(idx_dir, files=["gone.md"])
    r = runner.invoke(app, ["delete", str(idx_dir), "--file", "sub/new.md"])
    assert r.exit_code == 0 and json.loads(r.stdout)["deleted"] == ["sub/new.md"]
    r = runner.invoke(app, ["add", str(idx_dir), str(root), "-q"])
    assert r.exit_code == 0, r.output
    files = json.loads(r.stdout)["files"]
    # both deleted files come back, as new versions of their documents
    assert (files["new"], files["changed"], files["unchanged"]) == (2, 0, 1)
    assert Index.load(idx_dir).corpus.n_documents == 6


# --- a large folder is streamed --------------------------------------------------------------
_WALK = """
import sys, tracemalloc
from anygrain.corpus.formats import parse_source
from anygrain.errors import ErrorLog, ErrorPolicy
errors = ErrorLog(ErrorPolicy.SKIP)
tracemalloc.start()
n = total = 0
for doc in parse_source(sys.argv[1]).documents(errors):
    if not n:  # the readers' modules are imported by then
        tracemalloc.reset_peak()
    n += 1
    total += len(doc.text)
print(n, total, tracemalloc.get_traced_memory()[1])
"""


def test_a_large_folder_is_read_one_file_at_a_time(tmp_path: Path) -> None:
    root = tmp_path / "many"
    body = "word " * 200  # 1 KB a file, 50 MB in all
    for i in range(50_000):
        write(root / f"d{i // 1000:02d}" / f"n{i:05d}.md", f"# Note {i}\n\n{body}\n")
    # a fresh process: tracemalloc counts every thread's allocations, and threads an earlier
    # test left running must not count against the walk
    out = subprocess.run(
        [sys.executable, "-c", _WALK, str(root)], capture_output=True, text=True, check=True
    ).stdout
    n, total, peak = map(int, out.split())
    assert n == 50_000 and total > 50_000_000
    assert peak < total / 2, (peak, total)  # a note of each file, never all the texts
