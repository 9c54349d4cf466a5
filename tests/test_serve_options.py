"""anygrain serve: the index's search options reach ``/search`` whatever the kind (a hybrid
index's ``fusion``, ``weight`` and ``depth`` here; a phrase index's ``sparse_weight`` in
tests/test_serve_api.py), checked by the index; and ``anygrain serve --verify``."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="anygrain serve needs fastapi (./install.sh installs it)")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")

from dense_helpers import single_threaded, tiny_biencoder
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from anygrain.cli.main import app as cli_app
from anygrain.index.base import Index
from anygrain.serve import create_app

pytestmark = pytest.mark.usefixtures("torch_one_thread")

Q = "Who created Python?"
# each differs from the index's saved fusion (zscore, its default weight, depth 100)
OVERRIDES: list[dict[str, Any]] = [
    {"fusion": "rrf"},
    {"fusion": "minmax", "weight": 0.25},
    {"weight": 3.0, "depth": 2},
]


@pytest.fixture(scope="module")
def hybrid_index(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    with single_threaded():
        return Index.build(
            f"squad:{squad}",
            kind="hybrid",
            out=tmp_path_factory.mktemp("idx") / "hybrid",
            model=tiny_biencoder(seed=1),
            progress=False,
        )


@pytest.fixture(scope="module")
def hybrid(hybrid_index: Index) -> TestClient:
    return TestClient(create_app(hybrid_index))


def scores(hits: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(h["passage_id"], round(h["score"], 4)) for h in hits]


def error_of(r: Any, status: int = 422) -> str:
    assert r.status_code == status, r.text
    return str(r.json()["error"])


@pytest.mark.parametrize("options", OVERRIDES)
def test_hybrid_fusion_options_reach_search(
    hybrid: TestClient, hybrid_index: Index, options: dict[str, Any]
) -> None:
    with single_threaded():
        want = [
            (h.passage_id, round(h.score, 4)) for h in hybrid_index.search([Q], 3, **options)[0]
        ]
        plain = [(h.passage_id, round(h.score, 4)) for h in hybrid_index.search([Q], 3)[0]]
    assert want != plain  # the override changes the ranking or the scores
    got = hybrid.get("/search", params={"q": Q, "k": 3, **options}).json()
    assert scores(got["hits"]) == want
    batch = hybrid.post("/search", json={"questions": [Q, Q], "k": 3, "options": options})
    assert [scores(r["hits"]) for r in batch.json()["results"]] == [want, want]
    assert scores(hybrid.get("/search", params={"q": Q, "k": 3}).json()["hits"]) == plain


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fusion": "mean"}, "fusion: unknown fusionmethod 'mean'"),
        ({"weight": -1}, "weight: fusion weight must be a finite number from 0 to 1000, got -1"),
        ({"weight": "x"}, "weight: fusion weight must be a finite number"),
        ({"depth": 0}, "depth: fusion depth must be a whole number from 1"),
        ({"depth": 2.5}, "depth: fusion depth must be a whole number"),
        (
            {"sparse_weight": 1},
            "the search option 'sparse_weight' needs a phrase index, not hybrid",
        ),
        ({"colour": "red"}, "no index kind takes the search option 'colour'"),
        ({"batch_size": 4}, "search option 'batch_size' is the server's to set"),
    ],
)
def test_bad_options_are_refused_naming_them(
    hybrid: TestClient, options: dict[str, Any], message: str
) -> None:
    assert message in error_of(hybrid.get("/search", params={"q": Q, **options}))
    body = {"questions": [Q], "options": options}
    assert message in error_of(hybrid.post("/search", json=body))


def test_options_of_the_request_itself_and_odd_values(hybrid: TestClient) -> None:
    post = {"questions": [Q]}
    msg = error_of(hybrid.post("/search", json={**post, "options": {"unit": "passage"}}))
    assert "'unit' is a field of the request, not a search option" in msg
    msg = error_of(hybrid.post("/search", json={**post, "options": {"weight": [1, 2]}}))
    assert "search option 'weight' takes a number, a string or a boolean, not list" in msg
    twice = {**post, "sparse_weight": 1, "options": {"sparse_weight": 2}}
    assert "sparse_weight is given twice" in error_of(hybrid.post("/search", json=twice))
    # None is no option, as for Index.search
    r = hybrid.post("/search", json={**post, "options": {"weight": None}})
    assert r.status_code == 200, r.text


def test_the_openapi_schema_documents_the_options(hybrid: TestClient) -> None:
    spec = hybrid.get("/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/v1/search"]["get"]["parameters"]}
    assert params["fusion"]["in"] == "query" and "Hybrid" in params["fusion"]["description"]
    assert params["sparse_weight"]["schema"] == {"type": "number"}
    body = spec["components"]["schemas"]["BatchRequest"]["properties"]
    assert "fusion" in body["options"]["description"]


# --- anygrain serve --verify ------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bm25_dir(squad: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bm25"
    Index.build(f"squad:{squad}", kind="bm25", out=out, progress=False)
    return out


def test_serve_verify_refuses_a_damaged_index(bm25_dir: Path) -> None:
    files = json.loads((bm25_dir / "index.json").read_text())["files"]
    damaged = next(rel for rel in sorted(files) if (bm25_dir / rel).stat().st_size > 0)
    with open(bm25_dir / damaged, "r+b") as f:  # same size, one byte changed
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    argv = ["serve", str(bm25_dir), "--verify", "--port", str(free_port())]
    r = CliRunner().invoke(cli_app, argv)
    assert r.exit_code == 1, r.output
    assert damaged in r.output and "not serving it" in r.output and "http://" not in r.output


def test_serve_verify_serves_an_intact_index(
    bm25_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    served: list[Any] = []

    def run(self: uvicorn.Server, sockets: Any = None) -> None:
        served.append(self.config.app)
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    argv = ["serve", str(bm25_dir), "--verify", "--port", str(free_port())]
    r = CliRunner().invoke(cli_app, argv)
    assert r.exit_code == 0, r.output
    assert "files match their checksums" in r.output and "http://127.0.0.1:" in r.output
    assert len(served) == 1
