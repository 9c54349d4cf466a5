"""``AnygrainRetriever``, the LlamaIndex retriever: a ``RetrieverQueryEngine`` answering with
LlamaIndex's ``MockLLM`` (offline: it answers with its prompt), then what anygrain promises:
the span indexes the answer inside the node's text, the node's character offsets are the
passage's in its document, metadata round-trips, and 8 concurrent ``aretrieve`` calls return
what 8 sequential ``retrieve`` calls return."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip(
    "llama_index.core",
    reason="the LlamaIndex retriever needs llama-index-core (the llamaindex extra)",
)

from integration_corpus import (  # noqa: E402
    ALL_FOUR,
    DOCS,
    EIGHT,
    QUESTIONS,
    bm25_index,
    brute_force,
    check_hit,
    phrase_index,
)
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from anygrain import Index  # noqa: E402
from anygrain.integrations.llamaindex import HIDDEN, AnygrainRetriever, hit_node  # noqa: E402


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bm25_index(tmp_path_factory)


def check_node(n: NodeWithScore, rank: int) -> tuple[int, int]:
    """One node: :func:`integration_corpus.check_hit`, then LlamaIndex's own fields."""
    node = n.node
    assert isinstance(node, TextNode)
    m = node.metadata
    span = check_hit(node.text, m, node.node_id)
    assert (node.start_char_idx, node.end_char_idx) == (m["start"], m["end"])
    assert node.ref_doc_id == m["doc_id"]
    assert n.score == pytest.approx(m["score"]) and m["rank"] == rank
    # what the LLM is shown: the passage, its title and the user's fields, no bookkeeping
    shown = node.get_content(MetadataMode.LLM)
    assert node.text in shown and f"title: {m['title']}" in shown
    assert not any(f"\n{key}: " in f"\n{shown}" for key in HIDDEN)
    return span


def test_nodes_carry_the_passage_the_offsets_and_the_metadata(index_dir: Path) -> None:
    r = AnygrainRetriever(str(index_dir), k=4)
    assert isinstance(r, BaseRetriever)
    for q in QUESTIONS:
        nodes = r.retrieve(q)
        assert 1 <= len(nodes) <= 4
        for rank, n in enumerate(nodes, 1):
            assert check_node(n, rank) == (0, len(n.node.get_content()))
            assert n.node.metadata["unit"] == "passage"
    top = AnygrainRetriever(str(index_dir), k=1).retrieve(QUESTIONS[0])
    assert len(top) == 1 and top[0].node.metadata["doc_id"] == "python"
    assert top[0].node.metadata["author"] == "Guido"
    assert top[0].node.metadata["tags"] == ["language"]
    wall = AnygrainRetriever(str(index_dir), k=1).retrieve(QUESTIONS[1])[0].node
    assert wall.metadata["source"] == DOCS[1]["source"]


def test_a_query_engine_with_the_mock_llm_cites_the_nodes(index_dir: Path) -> None:
    retriever = AnygrainRetriever(str(index_dir), k=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUESTIONS[0])
    assert response.source_nodes and len(response.source_nodes) <= 2
    best = response.source_nodes[0]
    assert best.node.metadata["doc_id"] == "python"
    # the mock answers with its prompt: the context the LLM got holds the retrieved passage
    assert DOCS[0]["text"] in str(response) and "Guido" in str(response)
    for rank, n in enumerate(response.source_nodes, 1):
        check_node(n, rank)
    # async: the same sources
    again = asyncio.run(engine.aquery(QUESTIONS[0]))
    assert [n.node.node_id for n in again.source_nodes] == [
        n.node.node_id for n in response.source_nodes
    ]


def test_from_an_index_object_and_the_same_service(index_dir: Path) -> None:
    idx = Index.load(index_dir)
    a = AnygrainRetriever(idx, k=2)
    b = AnygrainRetriever(idx, k=3, unit="passage")
    assert a.service is b.service  # one service per index: one tokenizer thread
    assert AnygrainRetriever(a.service).service is a.service
    got = [n.node.metadata["passage_id"] for n in a.retrieve(QUESTIONS[2])]
    assert got == [h.passage_id for h in idx.search([QUESTIONS[2]], k=2)[0]]


def test_bad_arguments_are_refused(index_dir: Path) -> None:
    with pytest.raises(ValueError, match="phrase index"):
        AnygrainRetriever(str(index_dir), unit="phrase")
    with pytest.raises(ValueError, match="k must be"):
        AnygrainRetriever(str(index_dir), k=0)
    with pytest.raises(TypeError):
        AnygrainRetriever(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        AnygrainRetriever(str(index_dir)).retrieve("   ")


def test_concurrent_async_calls_return_what_sequential_calls_return(index_dir: Path) -> None:
    r = AnygrainRetriever(str(index_dir), k=3)

    def key(nodes: list[NodeWithScore]) -> list[tuple[str, float]]:
        return [(n.node.node_id, round(n.score or 0.0, 5)) for n in nodes]

    sequential = [key(r.retrieve(q)) for q in EIGHT]

    async def together() -> list[list[NodeWithScore]]:
        return list(await asyncio.gather(*(r.aretrieve(q) for q in EIGHT)))

    assert [key(n) for n in asyncio.run(together())] == sequential


def test_phrase_and_sentence_spans(tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a phrase index the span is the phrase or sentence, exactly inside the node text."""
    idx = Index.load(phrase_index(tmp_path_factory))
    for unit in ("phrase", "sentence"):
        nodes = AnygrainRetriever(idx, k=3, unit=unit).retrieve(QUESTIONS[0])
        assert nodes and all(n.node.metadata["unit"] == unit for n in nodes)
        for rank, n in enumerate(nodes, 1):
            assert n.node.metadata["span"] is not None
            check_node(n, rank)


def test_two_spans_of_one_passage_are_two_nodes() -> None:
    from anygrain.hits.hit import Hit, Unit

    text = DOCS[0]["text"]
    meta = {"author": "Guido", "start": 0, "end": len(text)}
    a = Hit(Unit.PHRASE, 1.0, 0, "python_0", "python", "Python", text, span=(0, 6), meta=meta)
    b = Hit(Unit.PHRASE, 0.5, 0, "python_0", "python", "Python", text, span=(52, 68), meta=meta)
    na, nb = hit_node(a, 1), hit_node(b, 2)
    assert na.node.node_id == "python_0#0-6" and nb.node.node_id == "python_0#52-68"
    assert na.node.metadata["answer"] == "Python"
    assert nb.node.metadata["answer"] == "Guido van Rossum" == text[52:68]


def test_a_filter_returns_exactly_the_matching_top_k(index_dir: Path) -> None:
    """anygrain's filter syntax and LlamaIndex's MetadataFilters, against brute force."""
    year = MetadataFilter(key="year", value=1500, operator=FilterOperator.GT)
    cases = [
        ({"year": {"$gte": 1000}}, lambda m: m.get("year", 0) >= 1000),
        (MetadataFilters(filters=[year]), lambda m: m.get("year", 0) > 1500),
        (
            MetadataFilters(
                filters=[year, MetadataFilter(key="source.lang", value="en")],
                condition=FilterCondition.OR,
            ),
            lambda m: m.get("year", 0) > 1500 or m.get("source", {}).get("lang") == "en",
        ),
        (
            MetadataFilters(filters=[year], condition=FilterCondition.NOT),
            lambda m: not m.get("year", 0) > 1500,
        ),
        (
            MetadataFilters(
                filters=[MetadataFilter(key="tags", value="language", operator="contains")]
            ),
            lambda m: "language" in m.get("tags", []),
        ),
    ]
    for spec, keep in cases:
        for k in (1, 2):
            want = brute_force(index_dir, ALL_FOUR, k, keep)
            nodes = AnygrainRetriever(str(index_dir), k=k, filter=spec).retrieve(ALL_FOUR)
            assert [n.node.metadata["passage_id"] for n in nodes] == want, spec
            for rank, n in enumerate(nodes, 1):
                check_node(n, rank)
    with pytest.raises(ValueError, match="text_match"):
        AnygrainRetriever(
            str(index_dir),
            filter=MetadataFilters(
                filters=[MetadataFilter(key="author", value="Gu", operator="text_match")]
            ),
        )
    with pytest.raises(ValueError, match="unknown operator"):
        AnygrainRetriever(str(index_dir), filter={"year": {"$regex": "19"}})
