"""The LangChain retriever in a chain that answers with citations, with LangChain's fake chat
models (offline): the prompt the model gets quotes the exact span of each hit with its
title, passage and offsets; the sources returned beside the answer round-trip their
metadata; 8 concurrent ``ainvoke`` calls of the chain return what 8 sequential ``invoke``
calls return.  (LangChain's standard retriever tests: ``test_integrations_langchain.py``.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langchain_core", reason="the LangChain retriever needs langchain-core (the langchain extra)"
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
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.fake_chat_models import (  # noqa: E402
    FakeListChatModel,
    ParrotFakeChatModel,
)
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import Runnable, RunnablePassthrough  # noqa: E402

from anygrain import Index  # noqa: E402
from anygrain.integrations.langchain import AnygrainRetriever  # noqa: E402

PROMPT = ChatPromptTemplate.from_template(
    "Answer from these quotes, citing them as [n]:\n{context}\n\nQuestion: {question}"
)


def cite(docs: list[Document]) -> str:
    """Each document as ``[n] "QUOTE" (TITLE, PASSAGE_ID START-END)``: the span (the whole
    passage for passage hits) and where it lies in its document."""
    return "\n".join(
        f'[{i}] "{d.metadata["answer"] or d.page_content}" '
        f"({d.metadata['title']}, {d.metadata['passage_id']} "
        f"{d.metadata['start']}-{d.metadata['end']})"
        for i, d in enumerate(docs, 1)
    )


def chain(retriever: AnygrainRetriever, llm: Any) -> Runnable[Any, Any]:
    """question -> {question, sources, answer}: the answer with the documents it cites."""
    answer = (
        {"context": lambda x: cite(x["sources"]), "question": lambda x: x["question"]}
        | PROMPT
        | llm
        | StrOutputParser()
    )
    return {"question": RunnablePassthrough(), "sources": retriever} | RunnablePassthrough.assign(
        answer=answer
    )


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bm25_index(tmp_path_factory)


def test_the_model_gets_the_quotes_and_the_answer_keeps_its_sources(index_dir: Path) -> None:
    retriever = AnygrainRetriever(index=str(index_dir), k=2)
    # the parrot answers with its prompt: what the model was shown
    out = chain(retriever, ParrotFakeChatModel()).invoke(QUESTIONS[0])
    sources = out["sources"]
    assert sources and sources[0].metadata["doc_id"] == "python"
    for d in sources:
        check_hit(d.page_content, d.metadata, d.id)
    m = sources[0].metadata
    assert (
        f'[1] "{DOCS[0]["text"]}" (Python, {m["passage_id"]} 0-{len(DOCS[0]["text"])})'
        in (out["answer"])
    )
    assert out["answer"].endswith(f"Question: {QUESTIONS[0]}")
    # a model that answers: the citation [1] resolves to the source and its metadata
    said = chain(retriever, FakeListChatModel(responses=["Guido van Rossum [1]."])).invoke(
        QUESTIONS[0]
    )
    assert said["answer"] == "Guido van Rossum [1]."
    cited = said["sources"][0]
    assert "Guido van Rossum" in cited.page_content and cited.metadata["author"] == "Guido"


def test_a_sentence_index_quotes_the_exact_span(tmp_path_factory: pytest.TempPathFactory) -> None:
    idx = Index.load(phrase_index(tmp_path_factory))
    retriever = AnygrainRetriever(index=idx, k=3, unit="sentence")
    out = chain(retriever, ParrotFakeChatModel()).invoke(QUESTIONS[0])
    assert out["sources"]
    for i, d in enumerate(out["sources"], 1):
        s, e = check_hit(d.page_content, d.metadata, d.id)
        quote = d.page_content[s:e]
        assert d.metadata["unit"] == "sentence" and quote == d.metadata["answer"]
        assert (
            f'[{i}] "{quote}" ({d.metadata["title"]}, {d.metadata["passage_id"]} '
            in (out["answer"])
        )


def test_concurrent_async_chains_return_what_sequential_chains_return(index_dir: Path) -> None:
    c = chain(AnygrainRetriever(index=str(index_dir), k=3), ParrotFakeChatModel())

    def key(out: dict[str, Any]) -> tuple[str, list[str | None]]:
        return out["answer"], [d.id for d in out["sources"]]

    sequential = [key(c.invoke(q)) for q in EIGHT]

    async def together() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(c.ainvoke(q) for q in EIGHT)))

    assert [key(o) for o in asyncio.run(together())] == sequential


def test_a_filtered_retriever_cites_exactly_the_matching_top_k(index_dir: Path) -> None:
    """The chain's sources under a metadata filter: the top k that match, by brute force."""
    for spec, keep in [
        ({"year": {"$gte": 1000}}, lambda m: m.get("year", 0) >= 1000),
        ({"$not": {"year": 1991}}, lambda m: m.get("year") != 1991),
        ({"source.lang": "en"}, lambda m: m.get("source", {}).get("lang") == "en"),
    ]:
        for k in (1, 2):
            retriever = AnygrainRetriever(index=str(index_dir), k=k, filter=spec)
            out = chain(retriever, ParrotFakeChatModel()).invoke(ALL_FOUR)
            want = brute_force(index_dir, ALL_FOUR, k, keep)
            assert [d.metadata["passage_id"] for d in out["sources"]] == want, spec
            for d in out["sources"]:
                check_hit(d.page_content, d.metadata, d.id)
