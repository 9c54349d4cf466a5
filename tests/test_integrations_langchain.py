"""``AnygrainRetriever``, the LangChain retriever: LangChain's standard retriever tests
(``langchain-tests``, where installed), then what anygrain promises on top: the span
indexes the answer inside the returned text, metadata round-trips, and 8 concurrent async
calls return what 8 sequential calls return.  A small BM25 index, and a tiny phrase index
for spans at the phrase and sentence grains."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langchain_core", reason="the LangChain retriever needs langchain-core (the langchain extra)"
)

from integration_corpus import DOCS, QUESTIONS  # noqa: E402  (the adapters share one corpus)
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from anygrain import Index  # noqa: E402
from anygrain.integrations.langchain import (  # noqa: E402
    AnygrainRetriever,
    hit_document,
    hit_documents,
)


def _build(root: Path) -> Path:
    (root / "docs.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8"
    )
    out = root / "bm25"
    if not out.exists():
        Index.build(str(root / "docs.jsonl"), kind="bm25", out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("lc"))


def user_meta(doc_id: str) -> dict[str, Any]:
    d = next(d for d in DOCS if d["id"] == doc_id)
    return {k: v for k, v in d.items() if k not in ("id", "title", "text")}


def check_document(doc: Document) -> None:
    """The span indexes the answer inside page_content, the id names passage and span, the
    corpus metadata is there (flat, and whole under ``meta``)."""
    m = doc.metadata
    text = doc.page_content
    doc_text = next(d["text"] for d in DOCS if d["id"] == m["doc_id"])
    assert text == doc_text[m["start"] : m["end"]]
    if m["span"] is not None:
        s, e = m["span"]
        assert text[s:e] == m["answer"] and m["answer"].strip()
    else:
        s, e = 0, len(text)
        assert m["answer"] == ""
    assert doc.id in (m["doc_id"], f"{m['doc_id']}#{m['char_start']}-{m['char_end']}")
    assert 0.0 <= m["relevance"] <= 1.0
    want = user_meta(m["doc_id"])
    assert {k: m[k] for k in want} == want
    assert m["meta"] == {**want, "start": m["start"], "end": m["end"]}
    assert not {"text", "before", "after"} & set(m)
    json.dumps(m)  # JSON all the way (vector stores, tracing)


# --- LangChain's standard retriever tests -------------------------------------------------
try:
    from langchain_tests.integration_tests import RetrieversIntegrationTests
except ImportError:  # pragma: no cover - langchain-tests absent: our own checks below
    RetrieversIntegrationTests = None  # type: ignore[assignment,misc]

if RetrieversIntegrationTests is not None and "pytest_asyncio" in sys.modules:
    # The standard async test carries no asyncio mark (LangChain's repositories run
    # pytest-asyncio in auto mode), and a subclass may not override it: mark it in place
    # rather than switch the whole suite to auto mode.
    pytest.mark.asyncio(RetrieversIntegrationTests.test_ainvoke_returns_documents)

    class TestStandardRetriever(RetrieversIntegrationTests):  # type: ignore[misc]
        @pytest.fixture(autouse=True)
        def _index(self, tmp_path_factory: pytest.TempPathFactory) -> None:
            type(self).index_dir = _build(tmp_path_factory.getbasetemp())

        @property
        def retriever_constructor(self) -> type[BaseRetriever]:
            return AnygrainRetriever

        @property
        def retriever_constructor_params(self) -> dict[str, Any]:
            return {"index": str(self.index_dir)}

        @property
        def retriever_query_example(self) -> str:
            return "Python, the Great Wall, Mount Everest or Zürich?"  # all four match

else:

    def test_standard_retriever_tests() -> None:
        pytest.skip("langchain-tests (with pytest-asyncio) is not installed (the dev extra)")


# --- anygrain's promises ------------------------------------------------------------------
def test_documents_carry_the_passage_the_span_and_the_metadata(index_dir: Path) -> None:
    r = AnygrainRetriever(index=str(index_dir), k=4)
    assert isinstance(r, BaseRetriever)
    for q in [*QUESTIONS, "Python, the Great Wall, Mount Everest or Zürich?"]:
        docs = r.invoke(q)
        assert 1 <= len(docs) <= 4  # BM25 returns the passages sharing a term with q
        for rank, d in enumerate(docs, 1):
            check_document(d)
            assert d.metadata["rank"] == rank and d.metadata["unit"] == "passage"
    assert len(docs) == 4
    top = r.invoke(QUESTIONS[0], k=1)
    assert len(top) == 1 and top[0].metadata["doc_id"] == "python"
    assert top[0].metadata["author"] == "Guido" and top[0].metadata["tags"] == ["language"]
    wall = r.invoke(QUESTIONS[1], k=1)[0]
    assert wall.metadata["source"] == {"url": "https://example.org/wall", "lang": "en"}


def test_from_an_index_object_and_the_same_service(index_dir: Path) -> None:
    idx = Index.load(index_dir)
    a = AnygrainRetriever(index=idx, k=2)
    b = AnygrainRetriever(index=idx, k=3)
    assert a.service is b.service  # one service per index: one tokenizer thread
    assert AnygrainRetriever(index=a.service).service is a.service
    got = [d.metadata["passage_id"] for d in a.invoke(QUESTIONS[2])]
    assert got == [h.passage_id for h in idx.search([QUESTIONS[2]], k=2)[0]]


def test_bad_arguments_are_refused(index_dir: Path) -> None:
    with pytest.raises(ValueError, match="phrase index"):
        AnygrainRetriever(index=str(index_dir), unit="phrase")
    with pytest.raises(ValueError):
        AnygrainRetriever(index=str(index_dir), k=0)
    with pytest.raises(TypeError):
        AnygrainRetriever(index=42)
    r = AnygrainRetriever(index=str(index_dir))
    with pytest.raises(ValueError, match="empty"):
        r.invoke("   ")


def test_concurrent_async_calls_return_what_sequential_calls_return(index_dir: Path) -> None:
    r = AnygrainRetriever(index=str(index_dir), k=3)
    qs = [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(8)]

    def key(docs: list[Document]) -> list[tuple[str | None, float]]:
        return [(d.id, round(d.metadata["score"], 5)) for d in docs]

    sequential = [key(r.invoke(q)) for q in qs]

    async def together() -> list[list[Document]]:
        return list(await asyncio.gather(*(r.ainvoke(q) for q in qs)))

    assert [key(d) for d in asyncio.run(together())] == sequential


def test_phrase_and_sentence_spans(tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a phrase index the span is the phrase or sentence, exactly inside page_content."""
    pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_phrase_model

    root = tmp_path_factory.mktemp("lc-phrase")
    (root / "docs.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8"
    )
    model = make_tiny_phrase_model(tmp_path_factory)
    idx = Index.build(
        str(root / "docs.jsonl"),
        kind="phrase",
        out=root / "phrase",
        model=str(model),
        progress=False,
    )
    for unit in ("phrase", "sentence"):
        r = AnygrainRetriever(index=idx, k=3, unit=unit)
        docs = r.invoke(QUESTIONS[0])
        assert docs and all(d.metadata["unit"] == unit for d in docs)
        for d in docs:
            assert d.metadata["span"] is not None
            check_document(d)
        # one call's unit for one call
        assert r.invoke(QUESTIONS[0], unit="passage")[0].metadata["span"] is None


def test_hit_documents_keep_two_spans_of_one_document_apart() -> None:
    """Ids are the user's document ids; two hits of one document in one result are told
    apart by their offsets in it."""
    from anygrain.hits.hit import Hit, Unit

    text = DOCS[0]["text"]
    meta = {"start": 0, "end": len(text)}
    a = Hit(Unit.PHRASE, 1.0, 0, "python_0", "python", "Python", text, span=(0, 6), meta=meta)
    b = Hit(Unit.PHRASE, 0.5, 0, "python_0", "python", "Python", text, span=(52, 68), meta=meta)
    w = Hit(Unit.PHRASE, 0.2, 1, "wall_0", "wall", "Great Wall", DOCS[1]["text"], span=(4, 14))
    da, db, dw = hit_documents([a, b, w])
    assert (da.id, db.id, dw.id) == ("python#0-6", "python#52-68", "wall")
    assert da.metadata["answer"] == "Python" and db.metadata["answer"] == text[52:68]
    assert hit_document(a).id == "python"
