"""Metadata on hits: each passage's metadata (its document's extra JSONL fields, its own,
and ``start`` / ``end``, its offsets in its document) on every :class:`Hit`, in
:meth:`Hit.to_json` and the server's ``HitOut``, at every grain and kind.

BM25 (plain and sharded), a tiny phrase index at its four grains, and the answer grain (a
tiny untrained reader) over BM25; documents split into several passages so the offsets
differ from ``(0, len(text))``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anygrain import Index
from anygrain.hits.hit import Hit, Unit

pytestmark = pytest.mark.usefixtures("torch_one_thread")

DOCS: list[dict[str, Any]] = [
    {
        "id": "python",
        "title": "Python",
        "text": "Python is a programming language. It was created by Guido van Rossum and "
        "first released in 1991. Python uses indentation to delimit blocks of code, and "
        "its standard library is large.",
        "author": "Guido",
        "year": 1991,
        "tags": ["language", "software"],
        "nested": {"lang": "en", "score": 0.5},
    },
    {
        "id": "wall",
        "title": "Great Wall",
        "text": "The Great Wall of China was built over many centuries. Its total length "
        "is about 21,196 kilometres according to a 2012 survey of the wall.",
        "author": "Survey",
        "year": 2012,
        "tags": ["history"],
    },
    {
        # no extra fields: meta holds the offsets only
        "id": "everest",
        "title": "Mount Everest",
        "text": "Mount Everest is Earth's highest mountain above sea level. Its peak is "
        "8,849 metres high. It lies in the Himalayas.",
    },
]
SPLIT = "w12"  # several passages per document
QUESTIONS = ["Who created Python?", "How long is the Great Wall?", "How high is Everest?"]


def user_meta(doc_id: str) -> dict[str, Any]:
    d = next(d for d in DOCS if d["id"] == doc_id)
    return {k: v for k, v in d.items() if k not in ("id", "title", "text")}


def check_hit(h: Hit, index: Index) -> None:
    """meta is the document's fields plus the passage's offsets in its document's text, on
    the Hit and in its JSON (HitOut validates it)."""
    doc = next(d for d in DOCS if d["id"] == h.doc_id)
    start, end = h.meta["start"], h.meta["end"]
    assert doc["text"][start:end] == h.text
    assert index.corpus.document_text(h.doc_id)[start:end] == h.text
    assert {k: v for k, v in h.meta.items() if k not in ("start", "end")} == user_meta(h.doc_id)
    js = h.to_json(1)
    assert js["meta"] == h.meta
    # JSON all the way (what the CLI prints and the server returns)
    assert json.loads(json.dumps(js))["meta"] == h.meta
    pytest.importorskip("pydantic")
    from anygrain.serve.schemas import HitOut

    assert HitOut(**js).meta == h.meta


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("meta") / "docs.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def bm25(corpus: Path) -> Index:
    return Index.build(
        str(corpus), kind="bm25", out=corpus.parent / "bm25", split=SPLIT, progress=False
    )


def test_bm25_hits_carry_metadata_and_offsets(bm25: Index) -> None:
    assert len(bm25.corpus) > len(DOCS)  # split: offsets are not all 0
    hits = bm25.search(QUESTIONS, k=20)
    seen = {h.passage_id for hs in hits for h in hs}
    assert len(seen) == len(bm25.corpus)
    assert any(h.meta["start"] > 0 for hs in hits for h in hs)
    for hs in hits:
        for h in hs:
            check_hit(h, bm25)
    # hits do not share one dict: changing one leaves the others alone
    a, b = hits[0][0], hits[1][0]
    a.meta["x"] = 1
    assert "x" not in b.meta and "x" not in bm25.search(QUESTIONS[:1], k=1)[0][0].meta


def test_passage_meta_is_merged_over_document_meta(tmp_path: Path) -> None:
    from anygrain.corpus.records import SourceDocument, Span
    from anygrain.corpus.store import CorpusStore

    text = "First part here. Second part there."
    doc = SourceDocument(
        "d",
        "T",
        text,
        passages=[
            Span(0, 16, id="d_0", meta={"section": "a", "author": "passage"}),
            Span(17, len(text), id="d_1"),
        ],
        meta={"author": "doc", "start": "shadowed"},
    )
    store = CorpusStore.build([doc], tmp_path / "c", progress=False)
    assert store.hit_meta([0, 1]) == [
        {"author": "passage", "section": "a", "start": 0, "end": 16},
        {"author": "doc", "start": 17, "end": len(text)},
    ]
    assert store.hit_meta([]) == []


def test_sharded_bm25_hits_carry_metadata(corpus: Path, bm25: Index) -> None:
    sharded = Index.build(
        str(corpus),
        kind="sharded",
        of="bm25",
        shards=2,
        out=corpus.parent / "sharded",
        split=SPLIT,
        progress=False,
    )
    got = sharded.search(QUESTIONS, k=5)
    want = bm25.search(QUESTIONS, k=5)
    for g, w in zip(got, want, strict=True):
        assert [(h.passage_id, h.meta) for h in g] == [(h.passage_id, h.meta) for h in w]
        for h in g:
            check_hit(h, sharded)


def test_phrase_hits_carry_metadata_at_every_grain(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_phrase_model

    model = make_tiny_phrase_model(tmp_path_factory)
    idx = Index.build(
        str(corpus),
        kind="phrase",
        out=corpus.parent / "phrase",
        model=str(model),
        split=SPLIT,
        progress=False,
    )
    for unit in (Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT):
        hits = idx.search(QUESTIONS, k=3, unit=unit)
        assert all(hs for hs in hits)
        for hs in hits:
            for h in hs:
                assert h.unit is unit
                check_hit(h, idx)


def test_answer_hits_carry_their_passage_metadata(bm25: Index, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_model

    from anygrain.api import search_index
    from anygrain.reader import Reader

    tiny = make_tiny_model(tmp_path / "tiny")
    torch.manual_seed(0)
    Reader.from_pretrained(str(tiny), max_length=48, max_question_length=16, stride=8).save(
        tmp_path / "reader"
    )
    got = search_index(bm25, QUESTIONS, 3, unit="answer", reader=str(tmp_path / "reader"), read=3)
    passages = {h.passage_row: h.meta for hs in bm25.search(QUESTIONS, k=3) for h in hs}
    assert all(hs for hs in got)
    for hs in got:
        for h in hs:
            assert h.unit is Unit.ANSWER and h.span is not None
            assert h.meta == passages[h.passage_row]
            check_hit(h, bm25)
