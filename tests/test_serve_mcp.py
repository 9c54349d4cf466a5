"""``anygrain serve --mcp`` (``mount_http(create_app(...))``): the MCP server mounted at
``/mcp`` beside the REST API, one service for both, reached through the official SDK's
streamable HTTP client against uvicorn on a loopback port; and ``GET /search``'s
``FIELD=VALUE`` filters (the search page's filter field; tests/test_serve_page_meta.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("httpx", reason="the HTTP tests need httpx (the dev extra)")
pytest.importorskip("uvicorn", reason="anygrain serve needs uvicorn")

import httpx  # noqa: E402

from anygrain import Index  # noqa: E402
from anygrain.errors import AnygrainError  # noqa: E402
from anygrain.serve import create_app  # noqa: E402
from anygrain.serve.mcp_compact import compact_hits  # noqa: E402
from anygrain.serve.schemas import SearchResponse  # noqa: E402

DOCS = [
    {"id": f"d{i}", "title": f"T{i}", "text": text, "lang": lang, "year": 2000 + i}
    for i, (text, lang) in enumerate(
        [
            ("Python is a programming language created by Guido van Rossum.", "en"),
            ("Python est un langage de programmation créé par Guido van Rossum.", "fr"),
            ("The Great Wall of China is about 21,196 kilometres long.", "en"),
            ("Python code uses indentation to delimit blocks.", "de"),
        ]
    )
]
DOCS.append(
    {
        "id": "evil",
        "title": "<b>Evil</b>",
        "text": "Python snakes are not a programming language.",
        "lang": "<script>alert(1)</script>",
    }
)
QUESTION = "Python programming language Guido"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("serve-mcp")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(index: Index) -> Iterator[str]:
    """The app with the MCP server mounted, under uvicorn in a thread (its lifespan runs the
    MCP session manager): the base URL."""
    pytest.importorskip("mcp", reason="serve --mcp needs the mcp SDK (the mcp extra)")
    import uvicorn

    from anygrain.integrations.mcp import mount_http

    app = create_app(index.path, warm_up=False)
    server = mount_http(app)
    assert getattr(server, "anygrain_service") is app.state.service  # noqa: B009  (one service)
    with pytest.raises(AnygrainError, match="already"):
        mount_http(app)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


def _mcp_session(url: str) -> Any:
    """An async context manager: a client session with the server at ``url``."""
    from contextlib import asynccontextmanager

    import mcp

    from anygrain.integrations.mcp import MCP_MAJOR

    @asynccontextmanager
    async def connect() -> Any:
        if MCP_MAJOR >= 2:
            async with mcp.Client(url, read_timeout_seconds=60) as c:
                yield c
        else:  # mcp 1.x
            from mcp.client.streamable_http import streamablehttp_client

            async with (
                streamablehttp_client(url) as (read, write, _),
                mcp.ClientSession(read, write) as c,
            ):
                await c.initialize()
                yield c

    return connect()


def _structured(r: Any) -> Any:
    return getattr(r, "structured_content", None) or getattr(r, "structuredContent", None)


def _is_error(r: Any) -> bool:
    return bool(getattr(r, "is_error", None) or getattr(r, "isError", None))


def test_mcp_mounted_beside_the_rest_api(served: str, index: Index) -> None:
    spec = {"lang": ["fr", "de"]}
    want = [h.passage_id for h in index.search([QUESTION], 3, filter=spec)[0]]
    assert want

    async def go() -> tuple[list[str], Any, Any, Any, Any]:
        async with _mcp_session(served + "/mcp") as c:
            names = [t.name for t in (await c.list_tools()).tools]
            args = {"query": QUESTION, "k": 3, "filter": spec}
            found = await c.call_tool("search", {**args, "format": "full"})
            compact = await c.call_tool("search", args)
            doc = await c.call_tool("get_document", {"id": "d1"})
            bad = await c.call_tool("search", {"query": QUESTION, "k": 0})
            bad_filter = await c.call_tool(
                "search", {"query": QUESTION, "filter": {"lang": {"$like": "f%"}}}
            )
            info = await c.call_tool("info", {})
            return names, found, compact, doc, bad, bad_filter, info

    names, found, compact, doc, bad, bad_filter, info = asyncio.run(asyncio.wait_for(go(), 120))
    assert sorted(names) == ["get_document", "get_passage", "info", "search"]
    assert not _is_error(found)
    body = SearchResponse(**_structured(found))  # the REST API's model
    assert [h.passage_id for h in body.hits] == want
    assert all(h.meta["lang"] in ("fr", "de") for h in body.hits)
    # the compact form (the default) of the same search: the same model, each passage once
    short = SearchResponse(**_structured(compact))
    assert short.passages is not None and short.hit_fields is not None and not short.hits
    assert [p.passage_id for p, _ in compact_hits(short.hit_fields, short.passages)] == want
    assert _structured(doc)["passages"][0]["text"] == DOCS[1]["text"]
    assert _is_error(bad) and "k" in bad.content[0].text and "\n" not in bad.content[0].text
    assert _is_error(bad_filter) and "filter" in bad_filter.content[0].text
    assert _structured(info)["index"] == index.path.name
    assert {"lang", "year"} <= {f["field"] for f in _structured(info)["filter_fields"]}
    # REST in the same app, the same service: same hits; its 404s keep the API's shape
    with httpx.Client(base_url=served, timeout=60) as http:
        r = http.get("/search", params={"q": QUESTION, "k": 3, "filter": json.dumps(spec)})
        assert r.status_code == 200, r.text
        assert [h["passage_id"] for h in r.json()["hits"]] == want
        assert http.get("/health").json()["searches"] >= 2  # the MCP search counted too
        assert http.get("/nowhere").json() == {"error": "Not Found"}


def test_no_mcp_route_unless_mounted(index: Index) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(create_app(index.path, warm_up=False))
    assert client.post("/mcp", json={}).status_code == 404


def test_serve_mcp_without_the_sdk_says_to_install_it(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from typer.testing import CliRunner

    from anygrain.cli.main import app as cli_app

    monkeypatch.setitem(sys.modules, "anygrain.integrations.mcp", None)  # its import fails
    r = CliRunner().invoke(cli_app, ["serve", str(index.path), "--mcp", "--port", "1"])
    assert r.exit_code != 0
    assert "pip install 'anygrain[mcp]'" in r.output and "--mcp" in r.output
    r = CliRunner().invoke(cli_app, ["mcp", str(index.path)])
    assert r.exit_code != 0 and "pip install 'anygrain[mcp]'" in r.output


def test_get_search_takes_field_value_filters(index: Index) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(create_app(index.path, warm_up=False))

    def ids(params: dict[str, Any]) -> list[str]:
        r = client.get("/search", params={"q": QUESTION, "k": 5, **params})
        assert r.status_code == 200, r.text
        return [h["passage_id"] for h in r.json()["hits"]]

    def want(spec: dict[str, Any]) -> list[str]:
        return [h.passage_id for h in index.search([QUESTION], 5, filter=spec)[0]]

    assert ids({"filter": "lang=fr,de"}) == want({"lang": ["fr", "de"]})
    assert ids({"filter": " lang=en year=2000 "}) == want({"lang": "en", "year": 2000})
    assert ids({"filter": "title=<b>Evil</b>"}) == want({"title": "<b>Evil</b>"}) != []
    assert ids({"filter": "  "}) == ids({})
    r = client.get("/search", params={"q": QUESTION, "filter": "oops"})
    assert r.status_code == 422 and "FIELD=VALUE" in r.json()["error"]
