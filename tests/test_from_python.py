"""Indexes from Python objects: ``Index.from_texts`` / ``Index.from_documents`` (texts,
dicts, anygrain documents, and LangChain / LlamaIndex / Haystack documents, duck-typed:
stand-ins here, no framework imported), metadata and ids round-tripping to the hits, the
build's checksums, and the managed temporary directory's lifetime."""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from anygrain import Index
from anygrain.corpus.records import SourceDocument
from anygrain.errors import InputError

TEXTS = [
    "Python is a programming language created by Guido van Rossum.",
    "The Great Wall of China is about 21,196 kilometres long.",
    "Mount Everest is Earth's highest mountain above sea level.",
]
METAS: list[dict[str, Any] | None] = [
    {"source": "wiki", "year": 1991, "tags": ["code"], "nested": {"a": 1}},
    {"source": "survey", "year": 2012},
    None,
]


@dataclass
class LangChainDoc:  # langchain_core.documents.Document's fields
    page_content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class LlamaNode:  # llama_index.core TextNode / Document
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    id_: str = "node"


@dataclass
class HaystackDoc:  # haystack.Document
    content: str
    meta: dict[str, Any] = field(default_factory=dict)
    id: str = "hs"


def by_doc(index: Index, query: str = "Python Wall Everest") -> dict[str, Any]:
    return {h.doc_id: h for h in index.search([query], 10)[0]}


def test_from_texts_round_trips_metadata_and_ids(tmp_path: Path) -> None:
    idx = Index.from_texts(TEXTS, METAS, ids=["py", "wall", "everest"], out=tmp_path / "i")
    assert idx.path == tmp_path / "i" and idx.kind.value == "bm25"
    hits = by_doc(idx)
    assert set(hits) == {"py", "wall", "everest"}
    for doc_id, meta in zip(["py", "wall", "everest"], METAS, strict=True):
        h = hits[doc_id]
        assert {k: v for k, v in h.meta.items() if k not in ("start", "end")} == (meta or {})
        assert h.text == TEXTS[["py", "wall", "everest"].index(doc_id)]
    # the same build as files: index.json last, every file's checksum recorded and checked
    manifest = json.loads((tmp_path / "i" / "index.json").read_text(encoding="utf-8"))
    assert manifest["files"]
    reopened = Index.load(tmp_path / "i", verify="full")
    assert by_doc(reopened)["py"].meta == hits["py"].meta
    assert idx.search(["Python"], 3, filter={"source": "survey"})[0] == []
    assert [h.doc_id for h in idx.search(["Wall"], 3, filter={"year": 2012})[0]] == ["wall"]


def test_from_texts_without_ids_numbers_the_documents() -> None:
    with Index.from_texts(TEXTS) as idx:
        assert set(by_doc(idx)) == {"0", "1", "2"}


def test_managed_directory_lives_as_long_as_the_index() -> None:
    idx = Index.from_texts(TEXTS, METAS)
    path = idx.path
    assert (path / "index.json").exists()
    idx.close()
    assert not path.parent.exists()
    idx.close()  # twice is fine
    idx = Index.from_texts(TEXTS)
    path = idx.path
    del idx
    gc.collect()
    assert not path.parent.exists()


def test_from_documents_takes_every_document_type(tmp_path: Path) -> None:
    docs = [
        LangChainDoc(TEXTS[0], {"fw": "langchain", "title": "Python"}, id="lc1"),
        LlamaNode(TEXTS[1], {"fw": "llamaindex"}, id_="li1"),
        HaystackDoc(TEXTS[2], {"fw": "haystack"}, id="hs1"),
        {"text": "Tea is a drink made from leaves.", "metadata": {"fw": "dict"}, "id": "d1"},
        {"page_content": "Jazz is a music genre.", "meta": {"fw": "dict2"}},
        SourceDocument("sd1", "Ocean", "The ocean is salty water.", meta={"fw": "anygrain"}),
        "A plain string about iron.",
    ]
    idx = Index.from_documents(docs, out=tmp_path / "i")
    hits = {h.doc_id: h for h in idx.search(["Python Wall Everest tea jazz ocean iron"], 10)[0]}
    assert {d: h.meta["fw"] for d, h in hits.items() if "fw" in h.meta} == {
        "lc1": "langchain",
        "li1": "llamaindex",
        "hs1": "haystack",
        "d1": "dict",
        "4": "dict2",  # no id: its position
        "sd1": "anygrain",
    }
    assert hits["lc1"].title == "Python"  # a title in the metadata is the title
    assert "6" in hits and hits["6"].meta == {"start": 0, "end": len(docs[6])}  # type: ignore[arg-type]


def test_from_documents_other_kinds(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer

    with single_threaded():
        model = tiny_biencoder(0, tokenizer=tiny_tokenizer())
        docs = [
            LangChainDoc(t, m or {}, id=f"x{i}") for i, t in enumerate(TEXTS) for m in [METAS[i]]
        ]
        with Index.from_documents(docs, kind="dense", model=model, lang="en") as idx:
            assert idx.kind.value == "dense"
            hits = idx.search(["Python"], 3, filter={"year": {"$gt": 2000}})[0]
            assert [h.doc_id for h in hits] == ["x1"]


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: Index.from_texts(TEXTS, METAS[:2]), "2 metadatas for 3 texts"),
        (lambda: Index.from_texts(TEXTS, ids=["a", "b"]), "2 ids for 3 texts"),
        (lambda: Index.from_texts(TEXTS, ids=["a", "b", "a"]), "the same id 'a'"),
        (lambda: Index.from_texts([]), "no documents given"),
        (lambda: Index.from_texts(["ok", ""]), "document 1: no text"),
        (lambda: Index.from_texts([b"bytes"]), "text 0 is a bytes"),  # type: ignore[list-item]
        (lambda: Index.from_texts(["x"], [{"when": object()}]), "metadata is not JSON"),
        (lambda: Index.from_texts(["x"], ["meta"]), "metadata is a str"),  # type: ignore[list-item]
        (lambda: Index.from_documents([42]), "a int is no document"),
    ],
)
def test_bad_input_is_one_line(call: Any, says: str) -> None:
    with pytest.raises(InputError) as e:
        call()
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("framework", ["langchain_core", "llama_index.core", "haystack"])
def test_from_documents_real_framework_documents(framework: str) -> None:
    """The duck typing holds for the real classes, where their packages are installed."""
    pytest.importorskip(framework, reason=f"{framework} is not installed")
    if framework == "langchain_core":
        from langchain_core.documents import Document

        doc: Any = Document(page_content=TEXTS[0], metadata={"fw": "lc"}, id="x")
    elif framework == "llama_index.core":
        from llama_index.core.schema import TextNode

        doc = TextNode(text=TEXTS[0], metadata={"fw": "lc"}, id_="x")
    else:
        from haystack import Document as HaystackDocument

        doc = HaystackDocument(content=TEXTS[0], meta={"fw": "lc"}, id="x")
    with Index.from_documents([doc]) as idx:
        (h,) = idx.search(["Python"], 3)[0]
        assert (h.doc_id, h.text, h.meta) == (
            "x",
            TEXTS[0],
            {"fw": "lc", "start": 0, "end": len(TEXTS[0])},
        )
