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
    deep_index,
    phrase_index,
    user_meta,
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
from anygrain.integrations.llamaindex import (  # noqa: E402
    HIDDEN,
    AnygrainRetriever,
    hit_node,
    hit_nodes,
)


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
    na, nb = hit_nodes([a, b])
    assert na.node.node_id == "python#0-6" and nb.node.node_id == "python#52-68"
    assert na.node.ref_doc_id == nb.node.ref_doc_id == "python"
    assert hit_node(a).node.node_id == "python"  # alone in its result: the user's id
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


# --- beside LlamaIndex's own retrievers, thresholds, depth, persistence --------------------
def user_nodes() -> list[TextNode]:
    """The corpus as a LlamaIndex user holds it: one node per record, with its id."""
    return [TextNode(id_=d["id"], text=d["text"], metadata=user_meta(d["id"])) for d in DOCS]


def test_fused_with_llamaindexs_bm25_no_node_comes_twice(index_dir: Path) -> None:
    bm25 = pytest.importorskip(
        "llama_index.retrievers.bm25", reason="llama-index-retrievers-bm25 is not installed"
    )
    from llama_index.core.retrievers import QueryFusionRetriever

    theirs = bm25.BM25Retriever.from_defaults(nodes=user_nodes(), similarity_top_k=4)
    ours = AnygrainRetriever(str(index_dir), k=4)
    for mode in ("reciprocal_rerank", "relative_score", "simple"):
        fused = QueryFusionRetriever(
            [ours, theirs],
            llm=MockLLM(),
            mode=mode,
            num_queries=1,  # the query as given: no LLM rewrites
            use_async=False,
            similarity_top_k=8,
        )
        for q in [*QUESTIONS, ALL_FOUR]:
            nodes = fused.retrieve(q)
            assert nodes
            texts = [n.node.get_content() for n in nodes]
            assert len(set(texts)) == len(texts), (mode, q)
            ids = [n.node.node_id for n in nodes]
            assert len(set(ids)) == len(ids) and set(ids) <= {d["id"] for d in DOCS}
    # the same passage from both: one node id, one hash
    a, b = ours.retrieve(QUESTIONS[0])[0].node, theirs.retrieve(QUESTIONS[0])[0].node
    assert a.node_id == b.node_id == "python" and a.hash == b.hash


def test_relevance_and_score_threshold(index_dir: Path) -> None:
    from anygrain.hits.hit import score_relevance

    nodes = AnygrainRetriever(str(index_dir), k=4).retrieve(ALL_FOUR)
    rel = [n.node.metadata["relevance"] for n in nodes]
    assert len(rel) == 4 and rel == sorted(rel, reverse=True)
    assert rel == [score_relevance(n.score or 0.0) for n in nodes]
    assert all(0.0 <= x <= 1.0 for x in rel)
    cut = (rel[0] + rel[1]) / 2
    kept = AnygrainRetriever(str(index_dir), k=4, score_threshold=cut).retrieve(ALL_FOUR)
    assert [n.node.node_id for n in kept] == [nodes[0].node.node_id]
    for bad in (-1, 1.01):
        with pytest.raises(ValueError, match="score_threshold"):
            AnygrainRetriever(str(index_dir), score_threshold=bad)


def test_similarity_top_k_is_k(index_dir: Path) -> None:
    r = AnygrainRetriever(str(index_dir), similarity_top_k=2)
    assert r.k == r.similarity_top_k == 2 and len(r.retrieve(ALL_FOUR)) == 2
    r.similarity_top_k = 3
    assert r.k == 3 and len(r.retrieve(ALL_FOUR)) == 3
    assert AnygrainRetriever(str(index_dir)).k == 4
    with pytest.raises(ValueError, match="differ"):
        AnygrainRetriever(str(index_dir), k=2, similarity_top_k=3)
    with pytest.raises(ValueError, match="k must be"):
        AnygrainRetriever(str(index_dir), similarity_top_k=1001)


def test_k_1000_returns_1000_ranked_nodes(tmp_path_factory: pytest.TempPathFactory) -> None:
    nodes = AnygrainRetriever(str(deep_index(tmp_path_factory)), k=1000).retrieve("grain")
    assert len(nodes) == 1000 and len({n.node.node_id for n in nodes}) == 1000
    assert [n.node.metadata["rank"] for n in nodes] == list(range(1, 1001))
    scores = [n.score for n in nodes]
    assert scores == sorted(scores, reverse=True)


def test_persist_and_from_persist_dir(tmp_path: Path) -> None:
    """A retriever over a temporary index persists the index and its settings, and opens
    again from them after the temporary directory is gone."""
    texts = [d["text"] for d in DOCS]
    idx = Index.from_texts(texts, [user_meta(d["id"]) for d in DOCS], [d["id"] for d in DOCS])
    r = AnygrainRetriever(idx, similarity_top_k=2, filter={"year": {"$gte": 1000}})
    want = [(n.node.node_id, n.score) for n in r.retrieve(ALL_FOUR)]
    r.persist(tmp_path / "saved")
    idx.close()  # the temporary index is removed
    again = AnygrainRetriever.from_persist_dir(tmp_path / "saved")
    assert again.k == 2 and again.filter == {"year": {"$gte": 1000}}
    assert [(n.node.node_id, n.score) for n in again.retrieve(ALL_FOUR)] == want
    assert AnygrainRetriever.from_persist_dir(tmp_path / "saved", similarity_top_k=1).k == 1
    with pytest.raises(FileExistsError):
        again.persist(tmp_path / "saved")
    with pytest.raises(FileNotFoundError, match="anygrain_retriever.json"):
        AnygrainRetriever.from_persist_dir(tmp_path)
