"""The MCP server (``anygrain mcp``): the official SDK's in-process client over a small
BM25 index (tool schemas, structured output with the REST API's models, bad input answered
as a tool error), concurrent calls, and one stdio round trip with ``anygrain mcp`` started
as a subprocess."""

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
from anygrain.integrations.mcp import MCP_MAJOR, create_server  # noqa: E402
from anygrain.serve.schemas import HitOut, InfoResponse, PassageOut, SearchResponse  # noqa: E402
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


def test_the_tools_and_their_schemas(server: Any) -> None:
    async def go() -> list[Any]:
        async with connect(server) as c:
            return list((await c.list_tools()).tools)

    tools = {t.name: t for t in run(go())}
    assert set(tools) == {"search", "get_passage", "info"}
    search = _schema(tools["search"], "input")
    assert set(search["properties"]) == {"query", "k", "unit", "filter", "min_confidence"}
    assert search["required"] == ["query"]
    assert search["properties"]["k"]["maximum"] == MAX_K
    assert search["properties"]["k"]["minimum"] == 1
    assert _schema(tools["get_passage"], "input")["required"] == ["id"]
    # the output schemas are the REST API's models (one definition for both)
    out = _schema(tools["search"], "output")
    assert set(out["properties"]) == set(SearchResponse.model_fields)
    assert set(out["$defs"]["HitOut"]["properties"]) == set(HitOut.model_fields)
    assert set(_schema(tools["get_passage"], "output")["properties"]) == set(
        PassageOut.model_fields
    )
    assert set(_schema(tools["info"], "output")["properties"]) == set(InfoResponse.model_fields)


def test_search_returns_the_rest_schema_with_spans_and_metadata(server: Any, index: Index) -> None:
    async def go() -> Any:
        async with connect(server) as c:
            return await c.call_tool("search", {"query": QUESTIONS[0], "k": 2})

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


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("search", {"query": "", "k": 2}, "query"),
        ("search", {"query": "x" * 2000}, "query"),
        ("search", {"query": "python", "k": 0}, "k"),
        ("search", {"query": "python", "k": MAX_K + 1}, "k"),
        ("search", {"query": "python", "k": "many"}, "k"),
        ("search", {"query": "python", "unit": "phrase"}, "phrase index"),
        ("search", {"query": "python", "unit": "paragraph"}, "unknown unit"),
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
    assert not _is_error(good) and _structured(good)["hits"]


def test_concurrent_calls_return_what_sequential_calls_return(server: Any) -> None:
    qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(8)]

    def ranked(r: Any) -> list[tuple[str, float]]:
        return [(h["passage_id"], round(h["score"], 5)) for h in _structured(r)["hits"]]

    async def go() -> tuple[list[Any], list[Any]]:
        async with connect(server) as c:
            one = [await c.call_tool("search", {"query": q, "k": 3}) for q in qs]
            many = await asyncio.gather(*(c.call_tool("search", {"query": q, "k": 3}) for q in qs))
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
    assert sorted(names) == ["get_passage", "info", "search"]
    assert not _is_error(r)
    hit = _structured(r)["hits"][0]
    assert hit["doc_id"] == "everest" and hit["meta"]["start"] == 0


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
