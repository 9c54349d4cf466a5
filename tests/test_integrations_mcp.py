"""The MCP server (``anygrain mcp``): the official SDK's in-process client over a small
BM25 index and a tiny phrase index (tool schemas, read-only hints and titles, the unit
enum, the compact and full search responses with the REST API's model, documents, the
filter fields ``info`` lists, bad input answered as a one-line tool error), concurrent
calls, and one stdio round trip with ``anygrain mcp`` started as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")

from anygrain import Index  # noqa: E402
from anygrain.hits.hit import Hit, Unit  # noqa: E402
from anygrain.integrations.mcp import MCP_MAJOR, create_server  # noqa: E402
from anygrain.serve.mcp_compact import (  # noqa: E402
    CONFIDENCE_DIGITS,
    SCORE_DIGITS,
    PassageHits,
    compact_hits,
    compact_passages,
)
from anygrain.serve.schemas import (  # noqa: E402
    DocumentOut,
    HitOut,
    InfoResponse,
    PassageOut,
    SearchResponse,
)
from anygrain.serve.service import MAX_K  # noqa: E402

DOCS = [
    {
        "id": "python",
        "title": "Python",
        "text": "Python is a programming language. It was created by Guido van Rossum and "
        "first released in 1991.",
        "author": "Guido",
        "year": 1991,
    },
    {
        "id": "wall",
        "title": "Great Wall",
        "text": "The Great Wall of China was built over many centuries. Its total length is "
        "about 21,196 kilometres.",
        "tags": ["history", "china"],
    },
    {
        "id": "everest",
        "title": "Mount Everest",
        "text": "Mount Everest is Earth's highest mountain above sea level. Its peak is "
        "8,849 metres high.",
    },
]
QUESTIONS = ["Who created Python?", "How long is the Great Wall?", "How high is Everest?"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("mcp")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


@pytest.fixture(scope="module")
def server(index: Index) -> Any:
    return create_server(index.path)


def _structured(r: Any) -> Any:
    return r.structured_content if MCP_MAJOR >= 2 else r.structuredContent


def _is_error(r: Any) -> bool:
    return bool(r.is_error if MCP_MAJOR >= 2 else r.isError)


def _schema(tool: Any, which: str) -> dict[str, Any]:
    if MCP_MAJOR >= 2:
        return tool.input_schema if which == "input" else tool.output_schema  # type: ignore[no-any-return]
    return tool.inputSchema if which == "input" else tool.outputSchema  # type: ignore[no-any-return]


@asynccontextmanager
async def connect(server: Any) -> AsyncIterator[Any]:
    """A client session with ``server`` in this process (mcp 2: ``Client(server)``; mcp 1:
    the SDK's memory streams)."""
    if MCP_MAJOR >= 2:
        async with mcp.Client(server) as c:
            yield c
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(server._mcp_server) as c:
            yield c


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _nulls(value: Any) -> bool:
    """Whether a JSON value holds a null outside metadata."""
    if isinstance(value, dict):
        return any(v is None or (k != "meta" and _nulls(v)) for k, v in value.items())
    if isinstance(value, list):
        return any(v is None or _nulls(v) for v in value)
    return False


@pytest.fixture(scope="module")
def phrase_server(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tiny phrase index of the SQuAD-format fixture (a random model: what is checked is
    the response's shape, not its answers), served."""
    pytest.importorskip("torch", reason="the tiny phrase model needs torch")
    from test_phrase_helpers import make_tiny_phrase_model

    model = make_tiny_phrase_model(tmp_path_factory)
    out = tmp_path_factory.mktemp("mcp-phrase") / "phrase"
    idx = Index.build(f"squad:{squad}", kind="phrase", out=out, model=str(model), progress=False)
    return create_server(idx.path, warm_up=False)


def list_tools(server: Any) -> dict[str, Any]:
    async def go() -> list[Any]:
        async with connect(server) as c:
            return list((await c.list_tools()).tools)

    return {t.name: t for t in run(go())}


def call(server: Any, tool: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with connect(server) as c:
            return await c.call_tool(tool, args)

    return run(go())


def test_the_tools_and_their_schemas(server: Any) -> None:
    tools = list_tools(server)
    assert set(tools) == {"search", "get_passage", "get_document", "info"}
    search = _schema(tools["search"], "input")
    assert set(search["properties"]) == {
        "query",
        "k",
        "unit",
        "filter",
        "min_confidence",
        "format",
    }
    assert search["required"] == ["query"]
    assert search["properties"]["k"]["maximum"] == MAX_K
    assert search["properties"]["k"]["minimum"] == 1
    assert search["properties"]["format"]["enum"] == ["compact", "full"]
    assert search["properties"]["format"]["default"] == "compact"
    assert _schema(tools["get_passage"], "input")["required"] == ["id"]
    assert _schema(tools["get_document"], "input")["required"] == ["id"]
    # the output schemas are the REST API's models (one definition for both)
    out = _schema(tools["search"], "output")
    assert set(out["properties"]) == set(SearchResponse.model_fields)
    assert set(out["$defs"]["HitOut"]["properties"]) == set(HitOut.model_fields)
    assert set(out["$defs"]["PassageHits"]["properties"]) == set(PassageHits.model_fields)
    # the compact form's hits are rows, the names of their values given once per response
    assert out["$defs"]["PassageHits"]["properties"]["hits"]["items"]["type"] == "array"
    assert "hit_fields" in out["properties"] and "SpanOut" not in out["$defs"]
    assert set(_schema(tools["get_passage"], "output")["properties"]) == set(
        PassageOut.model_fields
    )
    assert set(_schema(tools["get_document"], "output")["properties"]) == set(
        DocumentOut.model_fields
    )
    assert set(_schema(tools["info"], "output")["properties"]) == set(InfoResponse.model_fields)


def test_k_is_bounded_by_the_servers_max_k(index: Index) -> None:
    from anygrain.serve.service import SearchService

    small = create_server(SearchService.load(index.path, max_k=5), warm_up=False)
    k = _schema(list_tools(small)["search"], "input")["properties"]["k"]
    assert k["maximum"] == 5 and k["default"] == 5
    r = call(small, "search", {"query": "python", "k": 6})
    assert _is_error(r) and "k: Input should be less than or equal to 5" in r.content[0].text


def test_every_tool_is_read_only_and_titled(server: Any) -> None:
    for tool in list_tools(server).values():
        hints = tool.annotations
        assert tool.title and hints is not None and hints.title == tool.title
        if MCP_MAJOR >= 2:
            assert hints.read_only_hint is True and hints.open_world_hint is False
        else:
            assert hints.readOnlyHint is True and hints.openWorldHint is False


def test_unit_is_an_enum_of_the_index_units(server: Any, phrase_server: Any) -> None:
    for s in (server, phrase_server):
        units = s.anygrain_service.info()["units"]
        unit = _schema(list_tools(s)["search"], "input")["properties"]["unit"]
        assert unit["enum"] == units and unit["type"] == "string"
        assert unit["default"] == s.anygrain_service.info()["default_unit"]
    assert (
        "phrase" not in _schema(list_tools(server)["search"], "input")["properties"]["unit"]["enum"]
    )
    phrase_units = phrase_server.anygrain_service.info()["units"]
    assert {"phrase", "sentence", "passage", "document"} <= set(phrase_units)


def test_search_returns_the_rest_schema_with_spans_and_metadata(server: Any, index: Index) -> None:
    async def go() -> Any:
        async with connect(server) as c:
            return await c.call_tool("search", {"query": QUESTIONS[0], "k": 2, "format": "full"})

    r = run(go())
    assert not _is_error(r)
    body = SearchResponse(**_structured(r))  # validates against the REST model
    want = index.search(QUESTIONS[:1], k=2)[0]
    assert [h.passage_id for h in body.hits] == [h.passage_id for h in want]
    top = body.hits[0]
    assert top.doc_id == "python" and top.rank == 1
    assert top.before + top.answer + top.after == top.text
    assert top.meta == {"author": "Guido", "year": 1991, "start": 0, "end": len(DOCS[0]["text"])}
    # the text content carries the same JSON (clients without structured output read it)
    assert json.loads(r.content[0].text) == _structured(r)
    assert body.passages is None and "passages" not in _structured(r)
    assert "hit_fields" not in _structured(r)


def test_compact_search_returns_each_passage_once_with_its_hits(phrase_server: Any) -> None:
    """The default: each passage's text once, its hits under it (rank, score, the span
    inside that text, its answer), the same hits as the full form, in less text."""

    async def go() -> tuple[Any, Any]:
        async with connect(phrase_server) as c:
            args = {"query": "Who created Python?", "k": 10, "unit": "phrase"}
            return (
                await c.call_tool("search", args),
                await c.call_tool("search", {**args, "format": "full"}),
            )

    compact, full = run(go())
    assert not _is_error(compact) and not _is_error(full)
    body = SearchResponse(**_structured(compact))
    assert body.hits == [] and body.passages and "hits" not in _structured(compact)
    assert body.hit_fields == ["rank", "score", "span", "answer"]
    ids = [p.passage_id for p in body.passages]
    assert len(ids) == len(set(ids))  # each passage once
    spans = compact_hits(body.hit_fields, body.passages)
    assert [h["rank"] for _, h in spans] == list(range(1, len(spans) + 1))
    hits = SearchResponse(**_structured(full)).hits
    assert len(hits) == len(spans) == 10 and len(ids) < len(hits)  # some passage has two
    for (p, h), whole in zip(spans, hits, strict=True):
        assert p.passage_id == whole.passage_id and p.text == whole.text
        assert h["span"] == whole.span and h["answer"] == p.text[slice(*whole.span)]
        assert h["answer"] == whole.answer
        assert h["score"] == pytest.approx(whole.score, rel=10.0 ** (1 - SCORE_DIGITS))
        assert p.meta == whole.meta and p.doc_id == whole.doc_id
    # a title once per document, none where it is the doc_id (SQuAD's titles are)
    assert all(p.title is None for p in body.passages)
    assert all(h.title == h.doc_id for h in hits)
    # passages come in the order of their best hit
    assert [p.hits[0][0] for p in body.passages] == sorted(p.hits[0][0] for p in body.passages)
    # no nulls, no repeats: the text a model reads is the structured content, compactly
    text = compact.content[0].text
    assert json.loads(text) == _structured(compact) and not _nulls(_structured(compact))
    if MCP_MAJOR >= 2:  # mcp 1.x indents the text itself
        assert "\n" not in text
    unique = sum(len(p.text) for p in body.passages)
    assert len(text) < len(full.content[0].text) / 2 and len(text) < 2 * unique + 1500


def test_the_full_form_on_request_is_the_rest_response(server: Any, index: Index) -> None:
    r = call(server, "search", {"query": QUESTIONS[1], "k": 3, "format": "full"})
    body = SearchResponse(**_structured(r))
    want = index.search(QUESTIONS[1:2], k=3)[0]
    assert [h.passage_id for h in body.hits] == [h.passage_id for h in want]
    assert all(h.before + h.answer + h.after == h.text for h in body.hits)
    # the compact form of the same search: the same passages, ranks and scores
    compact = SearchResponse(**_structured(call(server, "search", {"query": QUESTIONS[1], "k": 3})))
    assert compact.passages is not None and compact.hit_fields == ["rank", "score"]
    got = [
        (s["rank"], p.passage_id, s["score"])
        for p, s in compact_hits(compact.hit_fields, compact.passages)
    ]
    assert [g[:2] for g in got] == [(h.rank, h.passage_id) for h in body.hits]
    assert [g[2] for g in got] == pytest.approx(
        [h.score for h in body.hits], rel=10.0 ** (1 - SCORE_DIGITS)
    )


def test_compact_answers_keep_their_confidence(server: Any) -> None:
    """Unit answer (the shipped reader over the BM25 index): each answer's span and
    calibrated confidence (to CONFIDENCE_DIGITS significant digits) under its passage."""
    args = {"query": QUESTIONS[0], "k": 3, "unit": "answer"}
    r = call(server, "search", args)
    assert not _is_error(r), r.content[0].text
    body = SearchResponse(**_structured(r))
    assert body.unit == "answer" and body.passages
    whole = SearchResponse(**_structured(call(server, "search", {**args, "format": "full"})))
    assert body.hit_fields == ["rank", "score", "span", "answer", "confidence"]
    spans = compact_hits(body.hit_fields, body.passages)
    assert len(spans) == len(whole.hits)
    for (p, h), w in zip(spans, whole.hits, strict=True):
        assert w.span is not None and h["span"] == w.span
        assert h["answer"] == p.text[slice(*w.span)] == w.answer
        assert w.confidence is not None and h["confidence"] == float(
            f"{w.confidence:.{CONFIDENCE_DIGITS}g}"
        )


def _hit(passage: str, doc: str, title: str, score: float, **more: Any) -> Hit:
    text = f"The text of {passage}."
    return Hit(Unit.PASSAGE, score, 0, passage, doc, title, text, **more)


def test_compact_rows_name_their_fields_once_and_titles_are_not_repeated() -> None:
    """Passage hits: rows of rank and score alone; a confidence column where some hit has
    one (null in the others); a title left out where it is the doc_id or was given by an
    earlier passage of its document."""
    hits = [
        _hit("a_0", "a", "A", 3.0, confidence=0.25),
        _hit("a_1", "a", "A", 2.0),
        _hit("same_0", "same", "same", 1.5),
        _hit("b_0", "b", "A", 1.0),  # another document of the same title
    ]
    fields, passages = compact_passages(hits)
    assert fields == ["rank", "score", "confidence"]
    assert [p.hits for p in passages] == [
        [[1, 3.0, 0.25]],
        [[2, 2.0, None]],
        [[3, 1.5, None]],
        [[4, 1.0, None]],
    ]
    assert [p.title for p in passages] == ["A", None, None, "A"]
    assert [p.doc_id for p in passages] == ["a", "a", "same", "b"]
    back = compact_hits(fields, passages)
    assert [(p.passage_id, h) for p, h in back][:2] == [
        ("a_0", {"rank": 1, "score": 3.0, "confidence": 0.25}),
        ("a_1", {"rank": 2, "score": 2.0, "confidence": None}),
    ]
    # spans: the answer at each, and JSON's lists read back as tuples
    spans = [
        _hit("a_0", "a", "A", 2.0, span=(4, 8)),
        _hit("a_0", "a", "A", 1.0, span=(0, 3)),
    ]
    fields, passages = compact_passages(spans)
    assert fields == ["rank", "score", "span", "answer"] and len(passages) == 1
    assert passages[0].hits == [[1, 2.0, (4, 8), "text"], [2, 1.0, (0, 3), "The"]]
    as_json = [PassageHits(**p.model_dump(mode="json")) for p in passages]
    assert [h["span"] for _, h in compact_hits(fields, as_json)] == [(4, 8), (0, 3)]


def test_get_passage_and_info(server: Any, index: Index) -> None:
    async def go() -> tuple[Any, Any]:
        async with connect(server) as c:
            return (
                await c.call_tool("get_passage", {"id": "wall_0"}),
                await c.call_tool("info", {}),
            )

    p, i = run(go())
    assert not _is_error(p) and not _is_error(i)
    passage = PassageOut(**_structured(p))
    assert passage.text == DOCS[1]["text"] and passage.doc_id == "wall"
    assert passage.meta["tags"] == ["history", "china"]
    assert all(passage.text[s:e].strip() for s, e in passage.sentences)
    info = InfoResponse(**_structured(i))
    assert info.kind == "bm25" and info.index == index.path.name and "passage" in info.units


def test_info_lists_the_fields_a_filter_may_name(server: Any) -> None:
    info = InfoResponse(**_structured(call(server, "info", {})))
    assert info.filter_fields is not None
    fields = {f.field: f for f in info.filter_fields}
    assert list(fields)[:3] == ["doc_id", "title", "passage_id"]
    assert set(fields["doc_id"].examples) <= {d["id"] for d in DOCS}
    assert len(fields["doc_id"].examples) == 3  # a few values: at most three
    assert fields["author"].types == ["string"] and fields["author"].examples == ["Guido"]
    assert fields["year"].types == ["integer"] and fields["year"].examples == [1991]
    assert fields["tags"].types == ["array"] and fields["tags"].examples == ["history", "china"]
    assert {"start", "end"} <= set(fields)
    # what it lists filters: a field and one of its values
    r = call(server, "search", {"query": "wall", "filter": {"tags": "china"}, "format": "full"})
    assert {h["doc_id"] for h in _structured(r)["hits"]} == {"wall"}


@pytest.fixture(scope="module")
def book_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A document cut into six passages (one per paragraph), and a short one."""
    root = tmp_path_factory.mktemp("mcp-book")
    chapters = [
        f"Chapter {i} tells of the river town number {i} and its bridges." for i in range(6)
    ]
    docs = [
        {"id": "book", "title": "Rivers", "text": "\n\n".join(chapters), "lang": "en"},
        {"id": "note", "title": "Note", "text": "A short note on bridges."},
    ]
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    idx = Index.build(
        str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", split="paragraph", progress=False
    )
    server = create_server(idx.path, warm_up=False)
    setattr(server, "chapters", chapters)  # noqa: B010
    return server


def test_get_document_returns_its_passages_in_order(book_server: Any) -> None:
    chapters = book_server.chapters
    whole = DocumentOut(**_structured(call(book_server, "get_document", {"id": "book"})))
    assert whole.doc_id == "book" and whole.title == "Rivers" and whole.n_passages == 6
    assert [p.text for p in whole.passages] == chapters and whole.next_offset is None
    assert whole.meta == {"lang": "en"} and all(p.meta is None for p in whole.passages)
    assert all(p.start is not None and p.end is not None for p in whole.passages)
    # a size cap: whole passages up to max_chars, and where to go on
    two = len(chapters[0]) + len(chapters[1])
    part = DocumentOut(
        **_structured(call(book_server, "get_document", {"id": "book", "max_chars": two}))
    )
    assert [p.text for p in part.passages] == chapters[:2] and part.next_offset == 2
    rest = DocumentOut(
        **_structured(call(book_server, "get_document", {"id": "book", "offset": 2}))
    )
    assert rest.offset == 2 and [p.text for p in rest.passages] == chapters[2:]
    # the first passage comes whole, however small the cap
    one = DocumentOut(
        **_structured(call(book_server, "get_document", {"id": "book", "max_chars": 1}))
    )
    assert [p.text for p in one.passages] == chapters[:1] and one.next_offset == 1
    note = DocumentOut(**_structured(call(book_server, "get_document", {"id": "note"})))
    assert note.n_passages == 1 and note.passages[0].passage_id == "note_0"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"id": "nowhere"}, "no document 'nowhere'"),
        ({"id": "  "}, "no document id"),
        ({"id": "book", "offset": 6}, "past the end"),
        ({"id": "book", "offset": -1}, "offset"),
        ({"id": "book", "max_chars": 0}, "max_chars"),
        ({}, "id"),
    ],
)
def test_get_document_refuses_in_one_line(
    book_server: Any, args: dict[str, Any], says: str
) -> None:
    r = call(book_server, "get_document", args)
    assert _is_error(r) and says in r.content[0].text and "\n" not in r.content[0].text


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("search", {"query": "", "k": 2}, "query"),
        ("search", {"query": "x" * 2000}, "query"),
        ("search", {"query": "python", "k": 0}, "k"),
        ("search", {"query": "python", "k": MAX_K + 1}, "k"),
        ("search", {"query": "python", "k": "many"}, "k"),
        ("search", {"query": "python", "unit": "phrase"}, "unit: Input should be 'passage'"),
        ("search", {"query": "python", "unit": "paragraph"}, "unit: Input should be"),
        ("search", {"query": "python", "format": "short"}, "'compact' or 'full'"),
        ("search", {"query": "python", "filter": {"year": {"$like": 1}}}, "filter"),
        ("search", {"query": "   "}, "empty"),
        ("search", {}, "query"),
        ("get_passage", {"id": "no-such-passage"}, "no passage"),
        ("get_passage", {"id": ""}, "no passage id"),
    ],
)
def test_bad_input_is_a_tool_error_and_the_server_goes_on(
    server: Any, tool: str, args: dict[str, Any], says: str
) -> None:
    async def go() -> tuple[Any, Any]:
        async with connect(server) as c:
            bad = await c.call_tool(tool, args)
            good = await c.call_tool("search", {"query": "python", "k": 1})
            return bad, good

    bad, good = run(go())
    assert _is_error(bad) and says in bad.content[0].text
    assert "\n" not in bad.content[0].text and "errors.pydantic.dev" not in bad.content[0].text
    assert not _is_error(good) and _structured(good)["passages"]


def test_concurrent_calls_return_what_sequential_calls_return(server: Any) -> None:
    qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(8)]

    def ranked(r: Any) -> list[tuple[str, float]]:
        return [(h["passage_id"], round(h["score"], 5)) for h in _structured(r)["hits"]]

    async def go() -> tuple[list[Any], list[Any]]:
        async with connect(server) as c:
            args = [{"query": q, "k": 3, "format": "full"} for q in qs]
            one = [await c.call_tool("search", a) for a in args]
            many = await asyncio.gather(*(c.call_tool("search", a) for a in args))
            return one, list(many)

    one, many = run(go())
    assert [ranked(r) for r in many] == [ranked(r) for r in one]


def test_stdio_round_trip(index: Index) -> None:
    """``anygrain mcp INDEX`` as a desktop agent starts it: a subprocess on stdio."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "anygrain.cli", "mcp", str(index.path), "--threads", "1"]
    params = mcp.StdioServerParameters(command=argv[0], args=argv[1:], env=env)

    async def go() -> tuple[list[str], Any]:
        if MCP_MAJOR >= 2:
            async with mcp.Client(params, read_timeout_seconds=120) as c:
                names = [t.name for t in (await c.list_tools()).tools]
                return names, await c.call_tool("search", {"query": QUESTIONS[2], "k": 1})
        async with (
            mcp.stdio_client(params) as (read, write),
            mcp.ClientSession(read, write) as c,
        ):
            await c.initialize()
            names = [t.name for t in (await c.list_tools()).tools]
            return names, await c.call_tool("search", {"query": QUESTIONS[2], "k": 1})

    names, r = asyncio.run(asyncio.wait_for(go(), 180))
    assert sorted(names) == ["get_document", "get_passage", "info", "search"]
    assert not _is_error(r)
    top = _structured(r)["passages"][0]
    assert top["doc_id"] == "everest" and top["meta"]["start"] == 0
    assert _structured(r)["hit_fields"][0] == "rank" and top["hits"][0][0] == 1


def test_the_cli_refuses_a_missing_index(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "anygrain.cli", "mcp", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode != 0 and r.stdout == ""
    assert "nowhere" in r.stderr
