"""The tiny corpus the framework retrievers' tests search (LlamaIndex, Haystack, the LangChain
chain), and the checks they share: written by the tests, built once per test session (a
BM25 index, and a phrase index over a random tiny phrase model for spans at the phrase and
sentence grains) under pytest's base temporary directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anygrain import Index

DOCS: list[dict[str, Any]] = [
    {
        "id": "python",
        "title": "Python",
        "text": "Python is a programming language. It was created by Guido van Rossum and "
        "first released in 1991. Python uses indentation to delimit blocks.",
        "author": "Guido",
        "year": 1991,
        "tags": ["language"],
    },
    {
        "id": "wall",
        "title": "Great Wall",
        "text": "The Great Wall of China was built over many centuries. Its total length is "
        "about 21,196 kilometres according to a 2012 survey.",
        "source": {"url": "https://example.org/wall", "lang": "en"},
    },
    {
        "id": "everest",
        "title": "Mount Everest",
        "text": "Mount Everest is Earth's highest mountain above sea level. Its peak is "
        "8,849 metres high. It lies in the Himalayas.",
    },
    {
        "id": "zurich",
        "title": "Zürich",
        "text": "Zürich is the largest city in Switzerland. The river Limmat flows through "
        "Zürich into Lake Zürich.",
        "year": 1218,
    },
]
QUESTIONS = [
    "Who created Python?",
    "How long is the Great Wall of China?",
    "How high is Mount Everest?",
    "Which river flows through Zürich?",
]
#: Eight queries, two of each question (one with trailing spaces): concurrent calls.
EIGHT = [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(8)]


def _corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    src = root / "docs.jsonl"
    if not src.exists():
        src.write_text(
            "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8"
        )
    return src


def bm25_index(factory: pytest.TempPathFactory) -> Path:
    """The BM25 index of :data:`DOCS`, built on first use in the session."""
    root = factory.getbasetemp() / "integration-corpus"
    out = root / "bm25"
    if not out.exists():
        Index.build(str(_corpus(root)), kind="bm25", out=out, progress=False)
    return out


def phrase_index(factory: pytest.TempPathFactory) -> Path:
    """A phrase index of :data:`DOCS` (a random tiny phrase model: its spans are exact, not
    right), built on first use in the session."""
    pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_phrase_model

    root = factory.getbasetemp() / "integration-corpus"
    out = root / "phrase"
    if not out.exists():
        model = make_tiny_phrase_model(factory)
        Index.build(str(_corpus(root)), kind="phrase", out=out, model=str(model), progress=False)
    return out


def user_meta(doc_id: str) -> dict[str, Any]:
    """The corpus fields of one document other than id, title and text."""
    d = next(d for d in DOCS if d["id"] == doc_id)
    return {k: v for k, v in d.items() if k not in ("id", "title", "text")}


def check_hit(text: str, m: dict[str, Any], node_id: str | None) -> tuple[int, int]:
    """A returned passage ``text`` and its ``metadata`` ``m``: the text is the passage at
    ``start``/``end`` in its document, the span indexes the answer inside it, the id names
    document (the user's id; ``DOC_ID#START-END``, its offsets in the document, where a
    result holds several hits of one document), the corpus metadata is there (flat, and
    whole under ``meta``), the relevance is in [0, 1], and all of it is JSON.  The span (the
    whole text for passage hits)."""
    doc_text = next(d["text"] for d in DOCS if d["id"] == m["doc_id"])
    assert text == doc_text[m["start"] : m["end"]]
    if m["span"] is not None:
        s, e = m["span"]
        assert text[s:e] == m["answer"] and m["answer"].strip()
    else:
        s, e = 0, len(text)
        assert m["answer"] == ""
    assert node_id in (m["doc_id"], f"{m['doc_id']}#{m['char_start']}-{m['char_end']}")
    assert m["char_end"] - m["char_start"] == e - s
    assert 0.0 <= m["relevance"] <= 1.0
    want = user_meta(m["doc_id"])
    assert {k: m[k] for k in want} == want
    assert m["meta"] == {**want, "start": m["start"], "end": m["end"]}
    assert not {"text", "before", "after"} & set(m)
    json.dumps(m)  # JSON all the way (vector stores, tracing, pipeline files)
    return s, e


#: A query every document of :data:`DOCS` shares a term with (BM25 returns all four).
ALL_FOUR = "Python, the Great Wall, Mount Everest or Zürich?"


def brute_force(index_dir: Path, query: str, k: int, keep: Any) -> list[str]:
    """The passage ids of the top ``k`` hits whose metadata ``keep`` accepts, from an
    unfiltered search for every hit: what a filtered search must return."""
    idx = Index.load(index_dir)
    hits = idx.search([query], k=100)[0]
    return [h.passage_id for h in hits if keep(h.meta)][:k]


#: Passages in :func:`deep_index`: more than the deepest search a retriever may ask for.
DEEP = 1200


def deep_index(factory: pytest.TempPathFactory) -> Path:
    """A BM25 index of :data:`DEEP` one-passage documents, ``d0`` ... , each holding the
    term "grain" a different number of times (so a search for it ranks every one)."""
    root = factory.getbasetemp() / "integration-deep"
    out = root / "bm25"
    if not out.exists():
        root.mkdir(parents=True, exist_ok=True)
        src = root / "docs.jsonl"
        rows = [
            {
                "id": f"d{i}",
                "title": f"D{i}",
                "text": " ".join(["grain"] * (1 + i % 40) + [f"w{i}"]),
            }
            for i in range(DEEP)
        ]
        src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        Index.build(str(src), kind="bm25", out=out, progress=False)
    return out
