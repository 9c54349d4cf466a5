"""Deleted documents stay deleted through every door: ``search`` and ``search_encoded`` of
every kind (BM25, dense, hybrid, sharded, phrase at each unit, both ways a phrase index
masks), still ``k`` live hits where they exist; the server (and a server that reloads the
index after a delete), the MCP ``search`` tool and the LangChain, LlamaIndex and Haystack
retrievers."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anygrain import Index
from anygrain.api import delete_documents
from anygrain.corpus.records import SourceDocument
from anygrain.hits.hit import Hit, Unit

pytest.importorskip("torch")

TEXTS = [
    ("gone", "Paris is the capital of France and sits on the river Seine."),
    ("louvre", "The Louvre in Paris is the largest art museum of France."),
    ("berlin", "Berlin is the capital of Germany and has many museums."),
    ("madrid", "Madrid is the capital of Spain, on the river Manzanares."),
    ("rome", "Rome is the capital of Italy, on the river Tiber."),
    ("tea", "Tea is brewed from the leaves of a shrub grown in China."),
    ("jazz", "Jazz began in New Orleans early in the twentieth century."),
]
GONE = "gone"
QUERIES = ["capital of France on the river Seine", "Paris capital France", "river capital"]
N_LIVE = len(TEXTS) - 1  # one passage a document


def docs() -> list[SourceDocument]:
    return [SourceDocument(i, i.title(), t) for i, t in TEXTS]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded() -> Iterator[None]:
    from dense_helpers import single_threaded

    with single_threaded():
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each kind built over :data:`TEXTS` (never deleted from: tests copy it)."""
    from dense_helpers import tiny_biencoder, tiny_tokenizer
    from test_phrase_helpers import make_tiny_phrase_model

    root = tmp_path_factory.mktemp("deletions")
    bi = tiny_biencoder(0, tokenizer=tiny_tokenizer())
    phrase_model = str(make_tiny_phrase_model(tmp_path_factory))
    opts: dict[str, dict[str, Any]] = {
        "bm25": {},
        "dense": {"model": bi},
        "hybrid": {"model": bi},
        "sharded": {"of": "dense", "shards": 2, "model": bi},
        "phrase": {"model": phrase_model, "compress": "none", "keep": 1.0},
    }
    out = {}
    for kind, o in opts.items():
        Index.build(docs(), kind=kind, out=root / kind, lang="en", progress=False, **o)
        out[kind] = root / kind
    return out


def deleted_copy(built: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    p = tmp_path / kind
    shutil.copytree(built[kind], p)
    delete_documents(p, [GONE])
    return p


def key(hits: list[Hit]) -> list[tuple[Any, ...]]:
    return [(h.passage_row, h.span, h.unit, round(h.score, 4)) for h in hits]


def assert_live(found: list[list[Hit]]) -> None:
    assert not [h.doc_id for hs in found for h in hs if h.doc_id == GONE]


# --- every kind, both doors -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid", "sharded"])
def test_passage_kinds_hide_a_deleted_document_through_both_doors(
    built: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    idx = Index.load(deleted_copy(built, kind, tmp_path))
    k = len(TEXTS)  # asking for every passage: the deleted one is the only one left out
    via_search = idx.search(QUERIES, k)
    via_encoded = idx.search_encoded(idx.encode(QUERIES), k)
    assert [key(h) for h in via_search] == [key(h) for h in via_encoded]
    assert_live(via_search)
    if kind != "bm25":  # every passage scores: k live hits where k exist
        assert all(len(hs) == N_LIVE for hs in via_encoded)
    # with a filter too, and k live hits that match it
    spec = {"doc_id": {"$ne": "jazz"}}
    filtered = idx.search_encoded(idx.encode(QUERIES), k, filter=spec)
    assert [key(h) for h in filtered] == [key(h) for h in idx.search(QUERIES, k, filter=spec)]
    assert_live(filtered)
    assert not any(h.doc_id == "jazz" for hs in filtered for h in hs)


@pytest.mark.parametrize("scope", [True, False], ids=["scope", "over-fetch"])
@pytest.mark.parametrize("unit", [Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT])
def test_phrase_units_hide_a_deleted_document_through_both_doors(
    built: dict[str, Path], unit: Unit, scope: bool, tmp_path: Path, monkeypatch: Any
) -> None:
    """Both ways a phrase index masks rows: few live rows searched alone, and hits
    over-fetched and dropped (forced here: the corpus is small)."""
    import anygrain.index.filters as filters

    if not scope:
        monkeypatch.setattr(filters, "SCOPE_ROWS", 0)
    idx = Index.load(deleted_copy(built, "phrase", tmp_path))
    k = 10 if unit is Unit.PHRASE else len(TEXTS)
    via_search = idx.search(QUERIES, k, unit=unit)
    via_encoded = idx.search_encoded(idx.encode(QUERIES), k, unit=unit)
    assert [key(h) for h in via_search] == [key(h) for h in via_encoded]
    assert_live(via_encoded)
    if unit in (Unit.PASSAGE, Unit.DOCUMENT):  # every live passage holds a phrase
        assert all(len(hs) == N_LIVE for hs in via_encoded)


def test_an_index_with_deletions_is_reopened_with_them(
    built: dict[str, Path], tmp_path: Path
) -> None:
    p = deleted_copy(built, "dense", tmp_path)
    for _ in range(2):  # a second load (as a server's reload) reads the same tombstones
        idx = Index.load(p)
        assert idx.tombstones is not None and GONE in idx.tombstones.docs
        assert_live(idx.search_encoded(idx.encode(QUERIES), len(TEXTS)))


# --- the server, MCP and the framework retrievers -------------------------------------------
def test_server_hides_a_deleted_document_and_one_deleted_while_serving(
    built: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")
    from fastapi.testclient import TestClient

    from anygrain.serve import create_app

    p = tmp_path / "dense"
    shutil.copytree(built["dense"], p)
    client = TestClient(create_app(p))
    params = {"q": QUERIES[0], "k": len(TEXTS)}
    r = client.get("/search", params=params)
    assert r.status_code == 200 and GONE in {h["doc_id"] for h in r.json()["hits"]}
    delete_documents(p, [GONE])  # index.json rewritten: the server reopens the index
    r = client.get("/search", params=params)
    assert r.status_code == 200, r.text
    assert [h["doc_id"] for h in r.json()["hits"]].count(GONE) == 0
    assert len(r.json()["hits"]) == N_LIVE
    r = client.post("/search", json={"questions": QUERIES, "k": len(TEXTS)})
    assert r.status_code == 200, r.text
    assert all(h["doc_id"] != GONE for res in r.json()["results"] for h in res["hits"])
    # and a server started on the index after the delete
    fresh = TestClient(create_app(p)).get("/search", params=params)
    assert fresh.status_code == 200 and GONE not in {h["doc_id"] for h in fresh.json()["hits"]}


def test_mcp_search_hides_a_deleted_document(built: dict[str, Path], tmp_path: Path) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    from anygrain.integrations.mcp import MCP_MAJOR, create_server

    server = create_server(deleted_copy(built, "dense", tmp_path), warm_up=False)

    async def go() -> Any:
        if MCP_MAJOR >= 2:
            cm: Any = mcp.Client(server)
        else:
            from mcp.shared.memory import create_connected_server_and_client_session

            cm = create_connected_server_and_client_session(server._mcp_server)
        async with cm as c:
            args = {"query": QUERIES[0], "k": len(TEXTS), "format": "full"}
            return await c.call_tool("search", args)

    r = asyncio.run(go())
    hits = (r.structured_content if MCP_MAJOR >= 2 else r.structuredContent)["hits"]
    assert len(hits) == N_LIVE and GONE not in {h["doc_id"] for h in hits}


def test_langchain_retriever_hides_a_deleted_document(
    built: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("langchain_core", reason="the LangChain retriever needs langchain-core")
    from anygrain.integrations.langchain import AnygrainRetriever

    r = AnygrainRetriever(index=str(deleted_copy(built, "dense", tmp_path)), k=len(TEXTS))
    got = [d.metadata["doc_id"] for d in r.invoke(QUERIES[0])]
    assert len(got) == N_LIVE and GONE not in got


def test_llamaindex_retriever_hides_a_deleted_document(
    built: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("llama_index.core", reason="the LlamaIndex retriever needs llama-index")
    from anygrain.integrations.llamaindex import AnygrainRetriever

    r = AnygrainRetriever(str(deleted_copy(built, "dense", tmp_path)), k=len(TEXTS))
    got = [n.node.metadata["doc_id"] for n in r.retrieve(QUERIES[0])]
    assert len(got) == N_LIVE and GONE not in got


def test_haystack_retriever_hides_a_deleted_document(
    built: dict[str, Path], tmp_path: Path
) -> None:
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # offline: no usage reports
    pytest.importorskip("haystack", reason="the Haystack retriever needs haystack-ai")
    from anygrain.integrations.haystack import AnygrainRetriever

    r = AnygrainRetriever(str(deleted_copy(built, "dense", tmp_path)), top_k=len(TEXTS))
    got = [d.meta["doc_id"] for d in r.run(QUERIES[0])["documents"]]
    assert len(got) == N_LIVE and GONE not in got


def test_answers_are_read_from_live_passages_only(built: dict[str, Path], tmp_path: Path) -> None:
    """Unit ``answer``: the server's reader reads the passages ``search_encoded`` found."""
    import torch
    from test_phrase_helpers import make_tiny_model

    from anygrain.reader import Reader
    from anygrain.serve.service import SearchService

    tiny = make_tiny_model(tmp_path / "tiny")
    torch.manual_seed(0)
    Reader.from_pretrained(str(tiny), max_length=48, max_question_length=16, stride=8).save(
        tmp_path / "reader"
    )
    idx = Index.load(deleted_copy(built, "dense", tmp_path))
    service = SearchService(idx, reader=str(tmp_path / "reader"), read=len(TEXTS))
    got = service.search(QUERIES, unit="answer", k=len(TEXTS)).hits
    assert all(hs for hs in got)
    assert_live(got)
