"""A filter on a field no passage has, or with a value of a type the field never holds, is
refused in one line naming the field and the fields there are, on every surface: the Python
API, ``anygrain search --filter``, the server, the MCP tool and the three framework
retrievers (the check is where they all pass: the mask over the index's passages,
:mod:`anygrain.index.filter_fields`).  A field whose absence passes (``$ne``, ``$exists:
false``) is warned about, and a value matching nothing is 0 hits, with a hint when it
differs from a stored one only by case or underscores."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest
from typer.testing import CliRunner

from anygrain import Index
from anygrain.cli.main import app
from anygrain.errors import UsageError

DOCS = [
    {"id": "sb50", "title": "Super_Bowl_50", "text": "Super Bowl 50 was an American football "
     "game played at Levi's Stadium.", "year": 2016, "tags": ["sport"], "src": {"lang": "en"}},
    {"id": "py", "title": "Python", "text": "Python is a programming language created by "
     "Guido van Rossum.", "year": 1991},
    {"id": "wall", "title": "Great_Wall", "text": "The Great Wall of China is a series of "
     "fortifications.", "flag": True},
]  # fmt: skip
QUESTION = "Super Bowl football game"
UNKNOWN = {"titel": "Super_Bowl_50"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("filter-fields")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


def names_unknown(message: str) -> None:
    """The one-line refusal of :data:`UNKNOWN`: the field, a near name, the fields there are."""
    assert "\n" not in message.strip(), message
    assert "no passage has field 'titel'" in message, message
    assert "did you mean 'title'?" in message and "year" in message and "doc_id" in message


# --- the Python API -------------------------------------------------------------------------


def test_api_refuses_a_field_no_passage_has(index: Index) -> None:
    with pytest.raises(UsageError) as e:
        index.search([QUESTION], 3, filter=UNKNOWN)
    names_unknown(str(e.value))
    # a dotted name: the fields beside it are listed
    with pytest.raises(UsageError, match=r"'src\.lnag' \(did you mean 'src\.lang'\?\); the "):
        index.search([QUESTION], 3, filter={"src.lnag": "en"})
    # needed under $or and $not too ($not over $ne: the field must be there)
    for spec in (
        {"$or": [{"year": 2016}, {"yeer": 1991}]},
        {"$not": {"yeer": {"$ne": 1}}},
        {"yeer": {"$exists": True}},
    ):
        with pytest.raises(UsageError, match="no passage has field 'yeer'"):
            index.search([QUESTION], 3, filter=spec)
    # the same field known: its hits
    assert [
        h.doc_id for h in index.search([QUESTION], 3, filter={"title": "Super_Bowl_50"})[0]
    ] == ["sb50"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            {"title": {"$gte": 2000}},
            "field 'title' $gte 2000 compares number, but 'title' holds text",
        ),
        ({"year": {"$lt": "2000"}}, "compares text, but 'year' holds number"),
        ({"tags": {"$gt": "a"}}, "'tags' holds list"),
        ({"year": "2016"}, "field 'year' holds number, never text like '2016'"),
        ({"flag": 1}, "field 'flag' holds boolean, never number"),
        ({"src": "en"}, "field 'src' holds object"),
        ({"tags": {"$nin": [3]}}, "field 'tags' holds list (of text), never number"),
    ],
)
def test_api_refuses_a_value_of_a_type_the_field_never_holds(
    index: Index, spec: dict[str, Any], says: str
) -> None:
    with pytest.raises(UsageError) as e:
        index.search([QUESTION], 3, filter=spec)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_absence_that_passes_is_warned_and_values_are_hinted(
    index: Index, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="anygrain"):
        # documented for optional fields: every passage lacks it, so every passage passes
        got = index.search([QUESTION], 3, filter={"archived": {"$ne": True}})[0]
        assert got == index.search([QUESTION], 3)[0]
        assert "no passage has field 'archived'" in caplog.text
        caplog.clear()
        # a known field, a value matching nothing: no hits, and the stored value named
        assert index.search([QUESTION], 3, filter={"title": "super bowl 50"})[0] == []
        assert "field 'title' holds 'Super_Bowl_50', not 'super bowl 50'" in caplog.text
        caplog.clear()
        # several types, one of them held (the command line's FIELD=VALUE): no complaint
        assert [h.doc_id for h in index.search([QUESTION], 3, filter=["year=2016"])[0]] == ["sb50"]
        assert index.search([QUESTION], 3, filter={"year": 1900})[0] == []
        assert caplog.text == ""


# --- the command line -----------------------------------------------------------------------


def test_cli_refuses_an_unknown_field_in_one_line(index: Index) -> None:
    r = CliRunner().invoke(
        app, ["search", str(index.path), QUESTION, "--filter", "titel=Super_Bowl_50"]
    )
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    names_unknown(r.output)


# --- the server -----------------------------------------------------------------------------


def test_server_answers_an_unknown_field_with_422(index: Index) -> None:
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")
    from fastapi.testclient import TestClient

    from anygrain.serve import create_app

    client = TestClient(create_app(index.path))
    r = client.get("/search", params={"q": QUESTION, "filter": json.dumps(UNKNOWN)})
    assert r.status_code == 422, r.text
    names_unknown(r.json()["error"])
    r = client.post("/search", json={"questions": [QUESTION], "filter": UNKNOWN})
    assert r.status_code == 422, r.text
    names_unknown(r.json()["error"])


# --- MCP ------------------------------------------------------------------------------------


def test_mcp_tool_error_names_an_unknown_field(index: Index) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp SDK (the mcp extra)")
    from anygrain.integrations.mcp import MCP_MAJOR, create_server

    server = create_server(index.path, warm_up=False)

    async def go() -> Any:
        if MCP_MAJOR >= 2:
            cm: Any = mcp.Client(server)
        else:
            from mcp.shared.memory import create_connected_server_and_client_session

            cm = create_connected_server_and_client_session(server._mcp_server)
        async with cm as c:
            return await c.call_tool("search", {"query": QUESTION, "filter": UNKNOWN})

    bad = asyncio.run(asyncio.wait_for(go(), 120))
    assert bool(bad.is_error if MCP_MAJOR >= 2 else bad.isError)
    names_unknown(bad.content[0].text)


# --- the framework retrievers ---------------------------------------------------------------


def test_langchain_retriever_names_an_unknown_field(index: Index) -> None:
    pytest.importorskip("langchain_core", reason="the LangChain retriever needs langchain-core")
    from anygrain.integrations.langchain import AnygrainRetriever

    with pytest.raises(ValueError) as e:
        AnygrainRetriever(index=index, k=2, filter=UNKNOWN).invoke(QUESTION)
    names_unknown(str(e.value))


def test_llamaindex_retriever_names_an_unknown_field(index: Index) -> None:
    pytest.importorskip("llama_index.core", reason="the LlamaIndex retriever needs llama-index")
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from anygrain.integrations.llamaindex import AnygrainRetriever

    with pytest.raises(ValueError) as e:
        AnygrainRetriever(index, k=2, filter=UNKNOWN).retrieve(QUESTION)
    names_unknown(str(e.value))
    llama = MetadataFilters(filters=[MetadataFilter(key="titel", value="Super_Bowl_50")])
    with pytest.raises(ValueError) as e:
        AnygrainRetriever(index, k=2, filter=llama).retrieve(QUESTION)
    names_unknown(str(e.value))


def test_haystack_retriever_names_an_unknown_field(index: Index) -> None:
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # offline: no usage reports
    pytest.importorskip("haystack", reason="the Haystack retriever needs haystack-ai")
    from anygrain.integrations.haystack import AnygrainRetriever

    haystack = {"field": "meta.titel", "operator": "==", "value": "Super_Bowl_50"}
    for spec in (UNKNOWN, haystack):
        with pytest.raises(ValueError) as e:
            AnygrainRetriever(str(index.path), top_k=2, filters=spec).run(QUESTION)
        names_unknown(str(e.value))


def test_the_survey_stops_only_once_every_test_is_cleared(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anygrain.index.filters as filters

    monkeypatch.setattr(filters, "BATCH", 1)  # one passage a batch: the survey may stop early
    index.__dict__.pop("_filter_masks", None)
    # the last passage alone has the field: read to the end, and kept
    assert [h.doc_id for h in index.search(["Great Wall"], 3, filter={"flag": True})[0]] == ["wall"]
    # cleared by the first passage, yet a field no passage has is refused all the same
    with pytest.raises(UsageError, match="no passage has field 'titel'"):
        index.search([QUESTION], 3, filter={"year": {"$gte": 2000}, "titel": "x"})
