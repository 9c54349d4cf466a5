"""The LangChain retriever beside LangChain's own: fused with its BM25 retriever in an
``EnsembleRetriever`` with no document twice (ids are the user's document ids), a relevance
in [0, 1] that ``score_threshold`` keeps, 1,000 ranked documents at ``k=1000``, built from
Python (``from_texts``, ``from_documents``), and the ``create_retriever_tool`` example of
docs/integrations.md run as written.  The Python API's ``search_index`` takes the same
threshold and depth."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "langchain_core", reason="the LangChain retriever needs langchain-core (the langchain extra)"
)

from integration_corpus import (  # noqa: E402
    ALL_FOUR,
    DEEP,
    DOCS,
    QUESTIONS,
    bm25_index,
    deep_index,
    user_meta,
)
from langchain_core.documents import Document  # noqa: E402

from anygrain import api  # noqa: E402
from anygrain.errors import UsageError  # noqa: E402
from anygrain.hits.hit import score_relevance  # noqa: E402
from anygrain.integrations.langchain import AnygrainRetriever  # noqa: E402

IDS = [d["id"] for d in DOCS]
INTEGRATIONS_MD = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bm25_index(tmp_path_factory)


def user_documents() -> list[Document]:
    """The corpus as a LangChain user holds it: one Document per record, with its id."""
    return [Document(id=d["id"], page_content=d["text"], metadata=user_meta(d["id"])) for d in DOCS]


def test_fused_with_langchains_bm25_no_document_comes_twice(index_dir: Path) -> None:
    bm25_mod = pytest.importorskip("langchain_community.retrievers", reason="langchain-community")
    ensemble_mod = pytest.importorskip("langchain_classic.retrievers", reason="langchain-classic")
    pytest.importorskip("rank_bm25", reason="LangChain's BM25Retriever needs rank_bm25")
    theirs = bm25_mod.BM25Retriever.from_documents(user_documents(), k=4)
    ours = AnygrainRetriever(index=str(index_dir), k=4)
    fused = ensemble_mod.EnsembleRetriever(retrievers=[ours, theirs], weights=[0.5, 0.5])
    for q in [*QUESTIONS, ALL_FOUR]:
        docs = fused.invoke(q)
        assert docs
        ids = [d.id for d in docs]
        assert len(set(ids)) == len(ids) and set(ids) <= set(IDS), ids
        assert len({d.page_content for d in docs}) == len(docs)
        # keyed by id, as a cache or a store is: both retrievers' documents of one passage
        # are one document
        both = [*ours.invoke(q), *theirs.invoke(q)]
        assert len({d.id for d in both}) == len({d.page_content for d in both})


def test_relevance_and_score_threshold(index_dir: Path) -> None:
    r = AnygrainRetriever(index=str(index_dir), k=4)
    docs = r.invoke(ALL_FOUR)
    assert len(docs) == 4
    rel = [d.metadata["relevance"] for d in docs]
    assert all(0.0 <= x <= 1.0 for x in rel) and rel == sorted(rel, reverse=True)
    assert rel == [score_relevance(d.metadata["score"]) for d in docs]
    cut = (rel[1] + rel[2]) / 2  # keeps the top two
    for kept in (
        AnygrainRetriever(index=str(index_dir), k=4, score_threshold=cut).invoke(ALL_FOUR),
        AnygrainRetriever(
            index=str(index_dir), search_kwargs={"k": 4, "score_threshold": cut}
        ).invoke(ALL_FOUR),
        r.invoke(ALL_FOUR, score_threshold=cut),
    ):
        assert [d.id for d in kept] == [d.id for d in docs[:2]]
    assert r.invoke(ALL_FOUR, score_threshold=1.0) == []
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="score_threshold"):
            AnygrainRetriever(index=str(index_dir), score_threshold=bad)
        with pytest.raises(ValueError, match="score_threshold"):
            r.invoke(ALL_FOUR, score_threshold=bad)


def test_k_1000_returns_1000_ranked_documents(tmp_path_factory: pytest.TempPathFactory) -> None:
    deep = deep_index(tmp_path_factory)
    r = AnygrainRetriever(index=str(deep), k=1000)
    docs = r.invoke("grain")
    assert len(docs) == 1000
    assert [d.metadata["rank"] for d in docs] == list(range(1, 1001))
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    assert len({d.id for d in docs}) == 1000 and DEEP > 1000
    with pytest.raises(ValueError, match="less than or equal to 1000"):
        AnygrainRetriever(index=str(deep), k=1001)
    with pytest.raises(ValueError, match="k must be"):
        r.invoke("grain", k=1001)


def test_from_texts_and_from_documents() -> None:
    texts = [d["text"] for d in DOCS]
    metas = [{"title": d["title"], **user_meta(d["id"])} for d in DOCS]
    r = AnygrainRetriever.from_texts(texts, metadatas=metas, ids=IDS, k=2, score_threshold=0.0)
    assert r.k == 2 and r.score_threshold == 0.0
    top = r.invoke(QUESTIONS[0])
    assert top[0].id == "python" and top[0].metadata["author"] == "Guido"
    assert top[0].metadata["title"] == "Python" and len(top) <= 2
    r2 = AnygrainRetriever.from_documents(user_documents(), k=1, kind="bm25")
    wall = r2.invoke(QUESTIONS[1])
    assert [d.id for d in wall] == ["wall"] and wall[0].metadata["source"] == DOCS[1]["source"]
    with pytest.raises(TypeError, match="index"):
        AnygrainRetriever.from_texts(texts, index="x")


def section_code(heading: str, fence: str) -> list[str]:
    """The ``fence`` blocks under ``heading`` in docs/integrations.md (up to the next
    heading of any level)."""
    text = INTEGRATIONS_MD.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    nxt = re.search(r"\n#{2,3} ", text[start + 1 :])
    section = text[start : start + 1 + nxt.start() if nxt else len(text)]
    return re.findall(rf"```{fence}\n(.*?)```", section, re.S)


def test_the_documented_retriever_tool_runs_and_keeps_the_citation() -> None:
    """docs/integrations.md's ``create_retriever_tool`` example, run as written: it prints
    what the docs show, the passage with its citation."""
    pytest.importorskip("langchain_core.tools")
    heading = "### As an agent's tool: `create_retriever_tool`"
    (code,) = section_code(heading, "python")
    (shown,) = section_code(heading, "text")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(INTEGRATIONS_MD), "exec"), {})  # noqa: S102
    assert out.getvalue() == shown
    assert "[source: Python (python), characters 0-" in shown


def test_the_python_api_search_takes_a_threshold_and_depth(
    index_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    hits = api.search_index(str(index_dir), [ALL_FOUR], 4)[0]
    rel = [h.relevance for h in hits]
    cut = (rel[0] + rel[1]) / 2
    kept = api.search_index(str(index_dir), [ALL_FOUR], 4, score_threshold=cut)[0]
    assert [h.passage_id for h in kept] == [hits[0].passage_id]
    with pytest.raises(UsageError, match="score_threshold"):
        api.search_index(str(index_dir), [ALL_FOUR], 4, score_threshold=2)
    deep = api.search_index(str(deep_index(tmp_path_factory)), ["grain"], 1000)[0]
    assert len(deep) == 1000
    assert [h.score for h in deep] == sorted((h.score for h in deep), reverse=True)
