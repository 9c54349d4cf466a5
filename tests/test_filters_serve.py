"""Metadata filters through the server (``/search``'s ``filter``), the MCP ``search`` tool
and the LangChain retriever: the same top ``k`` as ``Index.search(..., filter=...)``, and a
bad filter answered as a request or tool error naming it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from anygrain import Index

DOCS = [
    {"id": f"d{i}", "title": f"T{i}", "text": text, "lang": lang, "year": 2000 + i}
    for i, (text, lang) in enumerate(
        [
            ("Python is a programming language created by Guido van Rossum.", "en"),
            ("Python est un langage de programmation créé par Guido van Rossum.", "fr"),
            ("The Great Wall of China is about 21,196 kilometres long.", "en"),
            ("La Grande Muraille de Chine mesure environ 21 196 kilomètres.", "fr"),
            ("Mount Everest is Earth's highest mountain above sea level.", "en"),
            ("Python code uses indentation to delimit blocks.", "de"),
        ]
    )
]
QUESTION = "Python programming language Guido"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("filters-serve")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


def ids(hits: list[Any]) -> list[str]:
    return [h.passage_id if hasattr(h, "passage_id") else h["passage_id"] for h in hits]


def test_server_search_filter(index: Index) -> None:
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")
    from fastapi.testclient import TestClient

    from anygrain.serve import create_app

    client = TestClient(create_app(index.path))
    spec = {"lang": ["fr", "de"]}
    want = ids(index.search([QUESTION], 3, filter=spec)[0])
    assert len(want) == 2  # only two of them hold a query term
    r = client.get("/search", params={"q": QUESTION, "k": 3, "filter": json.dumps(spec)})
    assert r.status_code == 200, r.text
    assert ids(r.json()["hits"]) == want
    assert all(h["meta"]["lang"] in ("fr", "de") for h in r.json()["hits"])
    r = client.post("/search", json={"questions": [QUESTION, "Great Wall"], "k": 2, "filter": spec})
    assert r.status_code == 200, r.text
    assert ids(r.json()["results"][0]["hits"]) == want[:2]
    assert all(h["meta"]["lang"] != "en" for res in r.json()["results"] for h in res["hits"])
    # a filtered and an unfiltered request side by side: each gets its own hits
    r = client.post("/search", json={"questions": [QUESTION], "k": 3})
    assert ids(r.json()["results"][0]["hits"]) == ids(index.search([QUESTION], 3)[0])
    for bad in ('{"lang": {"$like": "f%"}}', "{oops"):
        r = client.get("/search", params={"q": QUESTION, "filter": bad})
        assert r.status_code == 422 and r.json()["error"].startswith("filter:")
    r = client.post("/search", json={"questions": [QUESTION], "filter": {"$xor": []}})
    assert r.status_code == 422 and "unknown operator" in r.json()["error"]


def test_mcp_search_filter(index: Index) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    from anygrain.integrations.mcp import MCP_MAJOR, create_server

    server = create_server(index.path, warm_up=False)

    async def go() -> tuple[Any, Any, Any]:
        if MCP_MAJOR >= 2:
            cm: Any = mcp.Client(server)
        else:
            from mcp.shared.memory import create_connected_server_and_client_session

            cm = create_connected_server_and_client_session(server._mcp_server)
        async with cm as c:
            tools = await c.list_tools()
            good = await c.call_tool(
                "search",
                {"query": QUESTION, "k": 2, "filter": {"year": {"$gte": 2003}}, "format": "full"},
            )
            bad = await c.call_tool("search", {"query": QUESTION, "filter": {"year": {"$x": 1}}})
            return tools, good, bad

    tools, good, bad = asyncio.run(go())
    search = next(t for t in tools.tools if t.name == "search")
    schema = search.input_schema if MCP_MAJOR >= 2 else search.inputSchema
    assert "filter" in schema["properties"]
    structured = good.structured_content if MCP_MAJOR >= 2 else good.structuredContent
    want = index.search([QUESTION], 2, filter={"year": {"$gte": 2003}})[0]
    assert ids(structured["hits"]) == ids(want)
    assert all(h["meta"]["year"] >= 2003 for h in structured["hits"])
    assert bool(bad.is_error if MCP_MAJOR >= 2 else bad.isError)
    assert "unknown operator '$x'" in bad.content[0].text


def test_langchain_retriever_filter(index: Index) -> None:
    pytest.importorskip("langchain_core", reason="the LangChain retriever needs langchain-core")
    from anygrain.integrations.langchain import AnygrainRetriever

    spec = {"lang": "fr"}
    want = ids(index.search([QUESTION], 2, filter=spec)[0])
    r = AnygrainRetriever(index=index, k=2, filter=spec)
    assert [d.metadata["passage_id"] for d in r.invoke(QUESTION)] == want
    assert all(d.metadata["lang"] == "fr" for d in r.invoke(QUESTION))
    # LangChain's spelling, and a per-call filter replacing the retriever's
    r2 = AnygrainRetriever(index=index, search_kwargs={"k": 2, "filter": spec})
    assert [d.metadata["passage_id"] for d in r2.invoke(QUESTION)] == want
    de = asyncio.run(r2.ainvoke(QUESTION, filter={"lang": "de"}))
    assert [d.metadata["lang"] for d in de] == ["de"]
    with pytest.raises(Exception, match="unknown operator"):
        AnygrainRetriever(index=index, filter={"lang": {"$regex": "f"}})
    with pytest.raises(ValueError, match="search_kwargs: fetch_k"):
        AnygrainRetriever(index=index, search_kwargs={"fetch_k": 9})


def test_search_index_takes_filter(index: Index, tmp_path: Path) -> None:
    from anygrain.api import search_index, search_questions

    spec = {"lang": "en"}
    assert ids(search_index(index, [QUESTION], 2, filter=spec)[0]) == ids(
        index.search([QUESTION], 2, filter=spec)[0]
    )
    got = list(search_questions(index, [QUESTION, "wall"], 2, filter=spec))
    assert all(h.meta["lang"] == "en" for q in got for h in q.hits)
