"""anygrain serve for agents and frameworks: ``k`` up to 1,000 (capped by ``--max-k``), the
``/v1`` paths with named operation ids (the old paths kept as aliases), ``/docs`` from
bundled files, the optional API key and CORS origins (FastAPI's TestClient, no sockets,
over a BM25 index of tiny passages)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="anygrain serve needs fastapi (./install.sh installs it)")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")

from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import anygrain.models.shipped as shipped  # noqa: E402
from anygrain.cli.main import app as cli_app  # noqa: E402
from anygrain.errors import AnygrainError  # noqa: E402
from anygrain.index.base import Index  # noqa: E402
from anygrain.serve import create_app  # noqa: E402
from anygrain.serve.service import SearchService  # noqa: E402

N_PASSAGES = 1200  # more than the largest k a request may ask for
KEY = "s3cret-key"
ORIGIN = "http://localhost:3000"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    """Tiny passages that all hold "common" (so k=1000 finds 1000), each a word of its own
    repeated a different number of times (so the scores differ)."""
    root = tmp_path_factory.mktemp("serve-v1")
    rows = [
        {"id": f"d{i}", "title": f"T{i}", "text": f"common word{i} " + "filler " * (i % 7)}
        for i in range(N_PASSAGES)
    ]
    (root / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Index.build(str(root / "c.jsonl"), kind="bm25", out=root / "bm25", progress=False)


@pytest.fixture(scope="module")
def client(index: Index) -> TestClient:
    return TestClient(create_app(index, warm_up=False))


@pytest.fixture(scope="module")
def keyed(index: Index) -> TestClient:
    return TestClient(create_app(index, warm_up=False, api_key=KEY, cors_origins=[ORIGIN]))


def error_of(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    return str(r.json()["error"])


# --- k up to 1,000, capped by --max-k ----------------------------------------------------
def test_k_1000_returns_1000_ranked_hits_in_order(client: TestClient, index: Index) -> None:
    r = client.get("/v1/search", params={"q": "common", "k": 1000})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    want = index.search(["common"], 1000)[0]
    assert len(hits) == len(want) == 1000
    assert [h["rank"] for h in hits] == list(range(1, 1001))
    assert [h["passage_id"] for h in hits] == [h.passage_id for h in want]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    r = client.post("/v1/search", json={"questions": ["common", "common word7"], "k": 1000})
    assert r.status_code == 200, r.text
    assert [len(q["hits"]) for q in r.json()["results"]] == [1000, 1000]


def test_a_k_above_the_cap_is_refused_naming_max_k(client: TestClient, index: Index) -> None:
    msg = error_of(client.get("/v1/search", params={"q": "common", "k": 1001}), 422)
    assert msg == "k must be between 1 and 1000 (the server's --max-k), got 1001"
    capped = TestClient(create_app(index, warm_up=False, max_k=50))
    assert len(capped.get("/v1/search", params={"q": "common", "k": 50}).json()["hits"]) == 50
    msg = error_of(capped.get("/v1/search", params={"q": "common", "k": 51}), 422)
    assert "between 1 and 50 (the server's --max-k), got 51" in msg
    msg = error_of(capped.post("/v1/search", json={"questions": ["common"], "k": 51}), 422)
    assert "--max-k" in msg
    assert capped.get("/v1/info").json()["limits"]["max_k"] == 50
    spec = capped.get("/openapi.json").json()
    k = next(p for p in spec["paths"]["/v1/search"]["get"]["parameters"] if p["name"] == "k")
    assert "1 to 50" in k["description"]


@pytest.mark.parametrize("bad", [0, -3, True])
def test_a_bad_max_k_is_refused(index: Index, bad: Any) -> None:
    with pytest.raises(AnygrainError, match="--max-k must be a positive integer"):
        create_app(index, warm_up=False, max_k=bad)


def test_serve_refuses_a_bad_max_k_in_one_line(index: Index) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(cli_app, ["serve", str(index.path), "--port", str(port), "--max-k", "0"])
    assert r.exit_code != 0 and "--max-k must be a positive integer" in r.output
    assert "Traceback" not in r.output


# --- /v1 paths, operation ids, aliases -------------------------------------------------
def test_v1_paths_have_named_operation_ids(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ops = {
        (path, method): op["operationId"]
        for path, item in spec["paths"].items()
        for method, op in item.items()
    }
    assert ops == {
        ("/v1/search", "get"): "search",
        ("/v1/search", "post"): "search_batch",
        ("/v1/ask", "get"): "ask",
        ("/v1/passages/{passage_id}", "get"): "get_passage",
        ("/v1/health", "get"): "health",
        ("/v1/info", "get"): "info",
    }


def test_old_paths_answer_as_the_v1_paths(client: TestClient) -> None:
    params = {"q": "word12", "k": 3}
    assert (
        client.get("/search", params=params).json()["hits"]
        == (client.get("/v1/search", params=params).json()["hits"])
    )
    body = {"questions": ["word12"], "k": 2}
    assert (
        client.post("/search", json=body).json()["results"]
        == (client.post("/v1/search", json=body).json()["results"])
    )
    assert client.get("/info").json() == client.get("/v1/info").json()
    assert client.get("/health").json()["status"] == client.get("/v1/health").json()["status"]


def test_get_passage(client: TestClient) -> None:
    hit = client.get("/v1/search", params={"q": "word12", "k": 1}).json()["hits"][0]
    r = client.get(f"/v1/passages/{hit['passage_id']}")
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["passage_id"] == hit["passage_id"] and p["text"] == hit["text"]
    assert p["doc_id"] == "d12" and p["meta"]["start"] == 0
    assert error_of(client.get("/v1/passages/nope"), 404) == "no passage 'nope' in this index"


def test_ask_is_the_answer_grain(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    # no reader here (none ships, none given): ask says how to give one, as unit answer does
    monkeypatch.setattr(shipped, "reader_ships", lambda lang: False)
    c = TestClient(create_app(index, warm_up=False))
    assert "--reader" in error_of(c.get("/v1/ask", params={"q": "common"}), 400)
    assert error_of(c.get("/v1/ask", params={"q": ""}), 422) == "the question is empty"
    msg = error_of(c.get("/v1/ask", params={"q": "common", "unit": "passage"}), 422)
    assert msg == "/v1/ask reads answers: it takes no unit (see /v1/search)"


# --- /docs, bundled ------------------------------------------------------------------
def test_docs_are_served_from_bundled_files(client: TestClient) -> None:
    pytest.importorskip("swagger_ui_bundle", reason="the serve extra ships Swagger UI's files")
    r = client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", r.text)  # nothing from a CDN
    assert "/openapi.json" in r.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/docs/assets/{asset}" in r.text
        a = client.get(f"/docs/assets/{asset}")
        assert a.status_code == 200 and len(a.content) > 10_000


# --- API key and CORS ----------------------------------------------------------------
def test_the_api_key_guards_the_api(keyed: TestClient) -> None:
    params = {"q": "common", "k": 2}
    for path in ("/v1/search", "/search", "/v1/info", "/v1/passages/d1_0"):
        msg = error_of(keyed.get(path, params=params), 401)
        assert "X-API-Key" in msg and "Bearer" in msg
    r = keyed.post("/v1/search", json={"questions": ["common"]})
    assert r.status_code == 401
    assert keyed.get("/v1/search", params=params, headers={"X-API-Key": "wrong"}).status_code == 401
    ok = keyed.get("/v1/search", params=params, headers={"X-API-Key": KEY})
    assert ok.status_code == 200 and len(ok.json()["hits"]) == 2
    bearer = {"Authorization": f"Bearer {KEY}"}
    assert keyed.get("/v1/info", headers=bearer).status_code == 200
    # the page (which asks for the key), the docs and the health probe need none
    page = keyed.get("/")
    assert page.status_code == 200 and 'id="key"' in page.text
    assert keyed.get("/openapi.json").status_code == 200
    assert keyed.get("/v1/health").json()["status"] == "ok"
    spec = keyed.get("/openapi.json").json()
    assert set(spec["components"]["securitySchemes"]) == {"apiKey", "bearer"}
    assert spec["paths"]["/v1/search"]["get"]["security"] == [{"apiKey": []}, {"bearer": []}]
    assert "security" not in spec["paths"]["/v1/health"]["get"]


def test_without_a_key_the_page_has_no_key_field(client: TestClient) -> None:
    assert 'id="key"' not in client.get("/").text
    assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})


@pytest.mark.parametrize("bad", ["", "two words", "caf\u00e9", "tab\there"])
def test_a_bad_api_key_is_refused(index: Index, bad: str) -> None:
    with pytest.raises(AnygrainError, match="--api-key must be"):
        create_app(index, warm_up=False, api_key=bad)


def test_cors_lets_the_given_origins_call(keyed: TestClient) -> None:
    pre = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "x-api-key",
    }
    r = keyed.options("/v1/search", headers=pre)  # a preflight needs no key
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    assert "x-api-key" in r.headers["access-control-allow-headers"].lower()
    r = keyed.get("/v1/info", headers={"Origin": ORIGIN, "X-API-Key": KEY})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    # a 401 carries the CORS headers too, so the calling page can read the error
    r = keyed.get("/v1/info", headers={"Origin": ORIGIN})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == ORIGIN
    r = keyed.get("/v1/info", headers={"Origin": "http://evil.example", "X-API-Key": KEY})
    assert "access-control-allow-origin" not in r.headers


def test_no_cors_headers_without_origins(client: TestClient) -> None:
    r = client.get("/v1/info", headers={"Origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("bad", ["localhost:3000", "http://x.org/path", "ftp://x.org"])
def test_a_bad_cors_origin_is_refused(index: Index, bad: str) -> None:
    with pytest.raises(AnygrainError, match="--cors-origin"):
        create_app(index, warm_up=False, cors_origins=[bad])


def test_serve_command_has_the_new_options() -> None:
    r = CliRunner().invoke(cli_app, ["serve", "--help"], terminal_width=200)
    assert r.exit_code == 0
    for option in ("--max-k", "--api-key", "--cors-origin"):
        assert option in r.output


def test_a_service_given_keeps_its_own_max_k(index: Index) -> None:
    service = SearchService(index, max_k=5)
    c = TestClient(create_app(service, warm_up=False))
    assert "between 1 and 5" in error_of(c.get("/v1/search", params={"q": "x", "k": 6}), 422)
    with pytest.raises(AnygrainError, match="max_k are the SearchService's"):
        create_app(service, warm_up=False, max_k=7)


def test_paths_in_the_docs_exist(client: TestClient) -> None:
    """Every endpoint docs/serve.md names is one the server has."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    spec = client.get("/openapi.json").json()
    for path in spec["paths"]:
        assert path in doc, f"docs/serve.md does not document {path}"
