"""Filters are bounded: one nested deeper than ``MAX_DEPTH`` levels or holding more than
``MAX_TERMS`` terms is refused when it is parsed, before anything is evaluated, with one
line naming the limit, on every surface: Python, ``anygrain search --filter``, the server
(HTTP 422, not 500), and the MCP ``search`` tool (a tool error; over stdio too, where a
message nested past what the SDK parses used to get no answer at all)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from anygrain import Index
from anygrain.cli.main import app
from anygrain.errors import UsageError
from anygrain.index.filters import MAX_DEPTH, MAX_TERMS, check_bounds, parse_filter

DOCS = [
    {"id": f"d{i}", "title": f"T{i}", "text": text, "year": 2000 + i}
    for i, text in enumerate(
        [
            "Python is a programming language created by Guido van Rossum.",
            "The Great Wall of China is about 21,196 kilometres long.",
            "Mount Everest is Earth's highest mountain above sea level.",
        ]
    )
]
QUESTION = "Python programming language"
DEEP = "nests deeper than 32 levels"
LARGE = f"more than {MAX_TERMS} terms"
LEAF = '{"year": 2001}'


def deep_text(n: int, op: str) -> str:
    """The JSON text of a filter with ``n`` ``op`` levels around one condition (written as
    text: the json module cannot write one thousands of levels deep)."""
    if op == "$not":
        return '{"$not": ' * n + LEAF + "}" * n
    return '{"$and": [' * n + LEAF + "]}" * n


def deep(n: int, op: str) -> dict[str, Any]:
    f: dict[str, Any] = {"year": 2001}
    for _ in range(n):
        f = {"$not": f} if op == "$not" else {"$and": [f]}
    return f


def large() -> dict[str, Any]:
    """A flat filter of more than MAX_TERMS terms (objects and values)."""
    return {"$or": [{"year": y} for y in range(MAX_TERMS // 2 + 1)]}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("filters-bounded")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


def one_line(message: str, says: str) -> None:
    assert says in message and "\n" not in message.strip(), message


# --- Python ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["$not", "$and"])
def test_a_deep_filter_is_refused_before_it_is_read(index: Index, op: str) -> None:
    for spec in (deep(300, op), deep_text(300, op), deep_text(5000, op)):
        with pytest.raises(UsageError) as e:
            parse_filter(spec)
        one_line(str(e.value), DEEP)
        with pytest.raises(UsageError) as e:
            index.search([QUESTION], 2, filter=spec)
        one_line(str(e.value), DEEP)
    # a value's lists count too; the filter's own and/or lists do not
    with pytest.raises(UsageError, match=DEEP):
        check_bounds({"year": {"$in": json.loads("[" * 40 + "]" * 40)}})
    check_bounds(deep(MAX_DEPTH - 1, op))  # at the limit: accepted
    assert index.search([QUESTION], 2, filter=deep(MAX_DEPTH - 1, "$and")) == index.search(
        [QUESTION], 2, filter={"year": 2001}
    )


def test_a_large_filter_is_refused(index: Index) -> None:
    for spec in (large(), json.dumps(large())):
        with pytest.raises(UsageError) as e:
            index.search([QUESTION], 2, filter=spec)
        one_line(str(e.value), LARGE)
    ok = {"$or": [{"year": y} for y in range(MAX_TERMS // 4)]}
    assert [h.doc_id for h in index.search([QUESTION], 2, filter=ok)[0]] == ["d0"]


# --- the command line -----------------------------------------------------------------------
def test_cli_refuses_deep_and_large_filters_in_one_line(index: Index) -> None:
    runner = CliRunner()
    args = ["search", str(index.path), QUESTION, "-k", "2"]
    for text, says in [
        (deep_text(300, "$not"), DEEP),
        (deep_text(300, "$and"), DEEP),
        (deep_text(5000, "$not"), DEEP),
        (json.dumps(large()), LARGE),
    ]:
        r = runner.invoke(app, [*args, "--filter", text])
        assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.exception
        assert "Traceback" not in r.output
        one_line(r.output, says)


# --- the server -----------------------------------------------------------------------------
def test_server_answers_deep_and_large_filters_with_422(index: Index) -> None:
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")
    from fastapi.testclient import TestClient

    from anygrain.serve import create_app

    client = TestClient(create_app(index.path))
    for op in ("$not", "$and"):
        # 1500 levels: past what the json module reads, within what a URL may hold
        for text in (deep_text(300, op), deep_text(1500, op)):
            r = client.get("/search", params={"q": QUESTION, "filter": text})
            assert r.status_code == 422, r.text
            one_line(r.json()["error"], DEEP)
        r = client.post("/search", json={"questions": [QUESTION], "filter": deep(300, op)})
        assert r.status_code == 422, r.text
        one_line(r.json()["error"], DEEP)
    r = client.post("/search", json={"questions": [QUESTION], "filter": large()})
    assert r.status_code == 422 and LARGE in r.json()["error"]
    assert client.get("/search", params={"q": QUESTION}).status_code == 200  # it goes on


# --- MCP ------------------------------------------------------------------------------------
def test_mcp_tool_refuses_deep_and_large_filters(index: Index) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    from anygrain.integrations.mcp import MCP_MAJOR, create_server

    server = create_server(index.path, warm_up=False)

    async def go() -> list[Any]:
        if MCP_MAJOR >= 2:
            cm: Any = mcp.Client(server)
        else:
            from mcp.shared.memory import create_connected_server_and_client_session

            cm = create_connected_server_and_client_session(server._mcp_server)
        async with cm as c:
            # the in-memory client itself writes messages up to about 190 levels deep
            return [
                await c.call_tool("search", {"query": QUESTION, "filter": f})
                for f in (deep(150, "$not"), deep(75, "$and"), large())
            ]

    for r, says in zip(asyncio.run(go()), (DEEP, DEEP, LARGE), strict=True):
        assert bool(r.is_error if MCP_MAJOR >= 2 else r.isError)
        one_line(r.content[0].text, says)


def test_every_stdio_request_gets_an_answer(index: Index) -> None:
    """JSON-RPC lines written to ``anygrain mcp`` as a client would: a filter nested 300
    (and 5000) levels deep is answered with a tool error, and the next request still works."""
    pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    argv = [sys.executable, "-m", "anygrain.cli", "mcp", str(index.path), "--threads", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert p.stdin is not None and p.stdout is not None

    def send(line: str) -> None:
        assert p.stdin is not None
        p.stdin.write(line.encode() + b"\n")
        p.stdin.flush()

    def answer(timeout: float = 120) -> dict[str, Any]:
        assert p.stdout is not None
        ready, _, _ = select.select([p.stdout], [], [], timeout)
        assert ready, "no answer"
        return json.loads(p.stdout.readline())  # type: ignore[no-any-return]

    def call(i: int, arguments: str) -> str:
        return (
            f'{{"jsonrpc": "2.0", "id": {i}, "method": "tools/call", '
            f'"params": {{"name": "search", "arguments": {arguments}}}}}'
        )

    try:
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        }
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}))
        assert answer()["id"] == 0
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        q = json.dumps(QUESTION)
        for i, text in enumerate(
            [deep_text(300, "$not"), deep_text(300, "$and"), deep_text(5000, "$not")], 1
        ):
            send(call(i, f'{{"query": {q}, "filter": {text}}}'))
            r = answer()
            assert r["id"] == i and r["result"]["isError"] is True
            one_line(r["result"]["content"][0]["text"], DEEP)
        send(call(9, f'{{"query": {q}, "k": 1, "format": "full"}}'))
        r = answer()
        assert r["id"] == 9 and not r["result"].get("isError")
        assert r["result"]["structuredContent"]["hits"][0]["doc_id"] == "d0"
    finally:
        p.stdin.close()
        p.terminate()
        p.wait(timeout=60)


def test_cut_deep_json_keeps_strings_and_shallow_text() -> None:
    pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    from anygrain.integrations.mcp import cut_deep_json

    shallow = json.dumps({"a": [1, {"b": '[{"x\\"]'}], "c": "}]"}).encode()
    assert cut_deep_json(shallow) == shallow
    assert json.loads(cut_deep_json(shallow, 2)) == {"a": [1, None], "c": "}]"}
    text = ('{"id": 1, "f": ' + deep_text(3000, "$and") + ', "s": "[[{"}').encode()
    cut = json.loads(cut_deep_json(text, 10))
    assert cut["id"] == 1 and cut["s"] == "[[{"
    node, below = cut["f"], 0
    while node["$and"] is not None:
        node, below = node["$and"][0], below + 1
    assert below == 4  # its objects at levels 2 to 10; the list under the last one is cut


# --- the Haystack retriever: its own filter syntax is translated recursively ----------------
@pytest.mark.parametrize("levels", [300, 3000])
def test_haystack_retriever_refuses_a_deep_filter_in_one_line(index: Index, levels: int) -> None:
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # offline: no usage reports
    pytest.importorskip("haystack", reason="the Haystack retriever needs haystack-ai")
    from anygrain.integrations.haystack import AnygrainRetriever

    f: dict[str, Any] = {"field": "meta.year", "operator": "==", "value": 2001}
    for _ in range(levels):
        f = {"operator": "NOT", "conditions": [f]}
    for spec in (f, deep(levels, "$not")):
        with pytest.raises(ValueError) as e:
            AnygrainRetriever(str(index.path), filters=spec)
        one_line(str(e.value), DEEP)
        with pytest.raises(ValueError) as e:
            AnygrainRetriever(str(index.path)).run(QUESTION, filters=spec)
        one_line(str(e.value), DEEP)


# --- the LlamaIndex retriever: MetadataFilters are translated recursively --------------------
@pytest.mark.parametrize("levels", [300, 3000])
def test_llamaindex_filters_refuse_a_deep_nest_in_one_line(levels: int) -> None:
    pytest.importorskip("llama_index.core", reason="the LlamaIndex retriever needs llama-index")
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from anygrain.integrations.llamaindex import metadata_filter

    f: MetadataFilters | MetadataFilter = MetadataFilter(key="year", value=2001)
    for _ in range(levels):
        f = MetadataFilters(filters=[f], condition="not")
    with pytest.raises(ValueError) as e:
        metadata_filter(f)
    one_line(str(e.value), DEEP)
    assert metadata_filter(MetadataFilters(filters=[MetadataFilter(key="year", value=1)])) == {
        "year": {"$eq": 1}
    }
