"""``AnygrainRetriever``, the Haystack component: a pipeline (retriever -> prompt builder)
saved as YAML, loaded and run; then what anygrain promises: each answer's
``document_offset`` indexes it inside its document's content, metadata round-trips (through
``to_dict`` / ``from_dict`` too), and 8 concurrent ``run_async`` calls return what 8
sequential ``run`` calls return."""

from __future__ import annotations

import asyncio
import inspect
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # offline: no usage reports
pytest.importorskip(
    "haystack", reason="the Haystack retriever needs haystack-ai (the haystack extra)"
)

from haystack import Document, Pipeline  # noqa: E402
from haystack.components.builders import PromptBuilder  # noqa: E402
from haystack.dataclasses import ExtractedAnswer  # noqa: E402
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

from anygrain import Index  # noqa: E402
from anygrain.hits.hit import Hit, Unit  # noqa: E402
from anygrain.integrations.haystack import (  # noqa: E402
    RESERVED,
    AnygrainRetriever,
    hit_answer,
    hit_document,
)

MODULE = "haystack_integrations.components.retrievers.anygrain"
TEMPLATE = (
    "Answer from these passages, citing them as [n].\n"
    "{% for d in documents %}[{{ loop.index }}] {{ d.content }} "
    "({{ d.meta.title }}, {{ d.meta.passage_id }} {{ d.meta.start }}-{{ d.meta.end }})\n"
    "{% endfor %}Question: {{ query }}"
)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bm25_index(tmp_path_factory)


def check_document(d: Document, rank: int) -> tuple[int, int]:
    """:func:`integration_corpus.check_hit` on the hit JSON the document holds (its score
    and ``passage_meta`` are the JSON's ``score`` and ``meta``); no key Haystack reserves."""
    assert d.content is not None and d.score is not None and d.meta["rank"] == rank
    assert not RESERVED & set(d.meta)
    m = {k: v for k, v in d.meta.items() if k != "passage_meta"}
    return check_hit(d.content, {**m, "meta": d.meta["passage_meta"], "score": d.score}, d.id)


def check_answer(a: ExtractedAnswer, query: str) -> None:
    d = a.document
    assert d is not None and d.content is not None and a.document_offset is not None
    s, e = a.document_offset.start, a.document_offset.end
    assert d.content[s:e] == a.data == d.meta["answer"] and [s, e] == d.meta["span"]
    assert a.query == query and a.score == d.score
    assert a.meta["passage_id"] == d.meta["passage_id"] and a.meta["title"] == d.meta["title"]


def loads(yaml: str) -> Pipeline:
    """Haystack 3 loads classes only from modules on its allowlist, whose default takes
    ``haystack_integrations``: no ``allowed_modules`` given."""
    return Pipeline.loads(yaml)


def test_a_pipeline_saved_as_yaml_loads_and_runs(index_dir: Path) -> None:
    pipe = Pipeline()
    pipe.add_component("retriever", AnygrainRetriever(str(index_dir), top_k=2))
    pipe.add_component("prompt", PromptBuilder(template=TEMPLATE, required_variables="*"))
    pipe.connect("retriever.documents", "prompt.documents")
    yaml = pipe.dumps()
    assert f"type: {MODULE}.AnygrainRetriever" in yaml and str(index_dir) in yaml

    loaded = loads(yaml)
    got = loaded.get_component("retriever")
    assert (
        isinstance(got, AnygrainRetriever)
        and got.to_dict() == pipe.get_component("retriever").to_dict()
    )
    q = QUESTIONS[0]
    out = loaded.run(
        {"retriever": {"query": q}, "prompt": {"query": q}}, include_outputs_from={"retriever"}
    )
    docs = out["retriever"]["documents"]
    assert 1 <= len(docs) <= 2 and docs[0].meta["doc_id"] == "python"
    for rank, d in enumerate(docs, 1):
        check_document(d, rank)
    assert out["retriever"]["answers"] == []  # passage hits: no span to answer with
    prompt = out["prompt"]["prompt"]
    m = docs[0].meta
    assert f"[1] {DOCS[0]['text']} (Python, {m['passage_id']} {m['start']}-{m['end']})" in prompt
    # the original pipeline answers the same
    first = pipe.run({"retriever": {"query": q}, "prompt": {"query": q}})
    assert first["prompt"]["prompt"] == prompt
    # and the loaded one run asynchronously (Haystack 3's Pipeline.run_async, 2.x's
    # AsyncPipeline), through the component's run_async
    if hasattr(Pipeline, "run_async"):
        pipe_async: Any = loaded
    else:  # pragma: no cover - haystack-ai 2.x
        from haystack import AsyncPipeline

        pipe_async = AsyncPipeline.from_dict(loaded.to_dict())
    again = asyncio.run(pipe_async.run_async({"retriever": {"query": q}, "prompt": {"query": q}}))
    assert again["prompt"]["prompt"] == prompt


def test_documents_carry_the_passage_and_the_metadata(index_dir: Path) -> None:
    r = AnygrainRetriever(str(index_dir), top_k=4)
    for q in QUESTIONS:
        out = r.run(q)
        assert 1 <= len(out["documents"]) <= 4 and out["answers"] == []
        for rank, d in enumerate(out["documents"], 1):
            assert check_document(d, rank) == (0, len(d.content or ""))
    top = r.run(QUESTIONS[1], top_k=1)["documents"]
    assert len(top) == 1 and top[0].meta["source"] == DOCS[1]["source"]
    # metadata survives Haystack's own serialisation of a Document
    assert Document.from_dict(top[0].to_dict()).meta == top[0].meta


def test_to_dict_from_dict_and_an_index_object(index_dir: Path) -> None:
    idx = Index.load(index_dir)
    r = AnygrainRetriever(idx, top_k=3, unit="passage")
    data = r.to_dict()
    assert data == {
        "type": f"{MODULE}.AnygrainRetriever",
        "init_parameters": {
            "index": str(idx.path),
            "top_k": 3,
            "unit": "passage",
            "reader": None,
            "read": None,
            "filters": None,
            "score_threshold": None,
        },
    }
    again = AnygrainRetriever.from_dict(data)
    assert again.to_dict() == data
    assert r.service is AnygrainRetriever(idx).service  # one service per index object
    ids = [d.id for d in again.run(QUESTIONS[2])["documents"]]
    assert ids == [d.id for d in r.run(QUESTIONS[2])["documents"]]


def test_bad_arguments_are_refused(index_dir: Path) -> None:
    with pytest.raises(ValueError, match="k must be"):
        AnygrainRetriever(str(index_dir), top_k=0)
    with pytest.raises(ValueError, match="unknown unit"):
        AnygrainRetriever(str(index_dir), unit="paragraph")
    with pytest.raises(TypeError):
        AnygrainRetriever(42)  # type: ignore[arg-type]
    r = AnygrainRetriever(str(index_dir), unit="phrase")  # opened at warm_up
    with pytest.raises(ValueError, match="phrase index"):
        r.warm_up()
    with pytest.raises(ValueError, match="empty"):
        AnygrainRetriever(str(index_dir)).run("   ")


def test_concurrent_async_calls_return_what_sequential_calls_return(index_dir: Path) -> None:
    r = AnygrainRetriever(str(index_dir), top_k=3)
    r.warm_up()

    def key(out: dict[str, Any]) -> list[tuple[str, float]]:
        return [(d.id, round(d.score, 5)) for d in out["documents"]]

    sequential = [key(r.run(q)) for q in EIGHT]

    async def together() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(r.run_async(q) for q in EIGHT)))

    assert [key(o) for o in asyncio.run(together())] == sequential


def test_phrase_and_sentence_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a phrase index every document has an answer whose offsets index it exactly."""
    r = AnygrainRetriever(Index.load(phrase_index(tmp_path_factory)), top_k=3)
    q = QUESTIONS[0]
    for unit in ("phrase", "sentence"):
        out = r.run(q, unit=unit)
        docs, answers = out["documents"], out["answers"]
        assert docs and len(answers) == len(docs)
        for rank, (d, a) in enumerate(zip(docs, answers, strict=True), 1):
            assert d.meta["unit"] == unit and d.meta["span"] is not None
            check_document(d, rank)
            assert a.document is d
            check_answer(a, q)


def test_an_answer_hit_has_its_sentence_as_context() -> None:
    text = DOCS[0]["text"]
    hit = Hit(
        Unit.ANSWER,
        9.5,
        0,
        "python_0",
        "python",
        "Python",
        text,
        span=(52, 68),
        sentence=(34, 96),
        reader_score=9.0,
        retrieval_score=1.5,
        meta={"author": "Guido", "start": 0, "end": len(text)},
    )
    d = hit_document(hit, 1)
    a = hit_answer(hit, "Who created Python?", d)
    assert a is not None and a.data == "Guido van Rossum" and d.id == "python"
    check_answer(a, "Who created Python?")
    assert a.context == text[34:96] and a.context_offset is not None
    assert a.context[a.context_offset.start : a.context_offset.end] == a.data
    assert hit_answer(Hit(Unit.PASSAGE, 1.0, 0, "p", "d", "T", text), "q", d) is None


def test_fields_named_as_a_documents_own_are_kept_whole_in_passage_meta() -> None:
    """A corpus field named ``score`` or ``content`` would clash with the Document's own when
    Haystack flattens its meta: it is kept in ``passage_meta`` only, and serialises."""
    meta = {"score": 5, "content": "x", "author": "Guido", "start": 0, "end": 6}
    d = hit_document(Hit(Unit.PASSAGE, 1.0, 0, "python_0", "python", "Python", "Python", meta=meta))
    assert d.score == 1.0 and d.meta["author"] == "Guido" and d.meta["passage_meta"] == meta
    assert not RESERVED & set(d.meta)
    for flatten in (True, False):
        assert Document.from_dict(d.to_dict(flatten=flatten)) == d


def test_filters_return_exactly_the_matching_top_k(index_dir: Path) -> None:
    """Haystack's filter syntax and anygrain's, against brute force; the component's
    filters saved with it, and replaced by a run's."""
    year = {"field": "meta.year", "operator": ">", "value": 1500}
    cases = [
        (year, lambda m: m.get("year", 0) > 1500),
        (
            {
                "operator": "OR",
                "conditions": [
                    year,
                    {"field": "meta.source.lang", "operator": "==", "value": "en"},
                ],
            },
            lambda m: m.get("year", 0) > 1500 or m.get("source", {}).get("lang") == "en",
        ),
        ({"operator": "NOT", "conditions": [year]}, lambda m: not m.get("year", 0) > 1500),
        (
            {"field": "meta.year", "operator": "in", "value": [1218, 1991]},
            lambda m: m.get("year") in (1218, 1991),
        ),
        ({"year": {"$lt": 1500}}, lambda m: "year" in m and m["year"] < 1500),
    ]
    for spec, keep in cases:
        for k in (1, 2):
            want = brute_force(index_dir, ALL_FOUR, k, keep)
            r = AnygrainRetriever(str(index_dir), top_k=k, filters=spec)
            docs = r.run(ALL_FOUR)["documents"]
            assert [d.meta["passage_id"] for d in docs] == want, spec
            for rank, d in enumerate(docs, 1):
                check_document(d, rank)
            again = AnygrainRetriever.from_dict(r.to_dict())
            assert again.filters == spec
            assert [d.id for d in again.run(ALL_FOUR)["documents"]] == [d.id for d in docs]
            # a run's filters replace the component's
            other = AnygrainRetriever(str(index_dir), top_k=k).run(ALL_FOUR, filters=spec)
            assert [d.id for d in other["documents"]] == [d.id for d in docs]
    with pytest.raises(ValueError, match="unknown operator"):
        AnygrainRetriever(
            str(index_dir), filters={"field": "meta.year", "operator": "~", "value": 1}
        )
    with pytest.raises(ValueError, match="Document's own"):
        AnygrainRetriever(
            str(index_dir), filters={"field": "content", "operator": "==", "value": "x"}
        )


# --- Haystack's integrations namespace, fusion, thresholds, depth ---------------------------
def test_the_integrations_namespace_path_and_the_default_allowlist(index_dir: Path) -> None:
    """``haystack_integrations.components.retrievers.anygrain`` is the component, and a
    pipeline naming it loads with Haystack's default allowlist (no ``allowed_modules``)."""
    from haystack_integrations.components.retrievers.anygrain import (
        AnygrainRetriever as Namespaced,
    )

    assert Namespaced is AnygrainRetriever
    yaml = (
        "components:\n"
        "  retriever:\n"
        "    init_parameters:\n"
        f"      index: {index_dir}\n"
        "      top_k: 2\n"
        f"    type: {MODULE}.AnygrainRetriever\n"
        "connections: []\n"
    )
    pipe = Pipeline.loads(yaml)
    docs = pipe.run({"retriever": {"query": QUESTIONS[0]}})["retriever"]["documents"]
    assert docs[0].id == "python" and len(docs) <= 2
    # a pipeline saved under the module that defines it loads too, where it is allowed
    old = yaml.replace(MODULE, "anygrain.integrations.haystack")
    if "allowed_modules" in inspect.signature(Pipeline.loads).parameters:
        again = Pipeline.loads(old, allowed_modules=["anygrain.integrations.haystack"])
    else:  # pragma: no cover - haystack-ai 2.x
        again = Pipeline.loads(old)
    assert isinstance(again.get_component("retriever"), AnygrainRetriever)


def test_fused_with_haystacks_bm25_no_document_comes_twice(index_dir: Path) -> None:
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents(
        [Document(id=d["id"], content=d["text"], meta=user_meta(d["id"])) for d in DOCS]
    )
    for mode in ("concatenate", "reciprocal_rank_fusion", "distribution_based_rank_fusion"):
        pipe = Pipeline()
        pipe.add_component("ours", AnygrainRetriever(str(index_dir), top_k=4))
        pipe.add_component("theirs", InMemoryBM25Retriever(store, top_k=4))
        pipe.add_component("joiner", DocumentJoiner(join_mode=mode))
        pipe.connect("ours.documents", "joiner.documents")
        pipe.connect("theirs.documents", "joiner.documents")
        for q in [*QUESTIONS, ALL_FOUR]:
            out = pipe.run({"ours": {"query": q}, "theirs": {"query": q}})
            docs = out["joiner"]["documents"]
            assert docs
            duplicates = len(docs) - len({d.content for d in docs})
            assert duplicates == 0, (mode, q, [d.id for d in docs])
            assert {d.id for d in docs} <= {d["id"] for d in DOCS}


def test_relevance_and_score_threshold(index_dir: Path) -> None:
    from anygrain.hits.hit import score_relevance

    docs = AnygrainRetriever(str(index_dir), top_k=4).run(ALL_FOUR)["documents"]
    rel = [d.meta["relevance"] for d in docs]
    assert len(rel) == 4 and rel == sorted(rel, reverse=True)
    assert rel == [score_relevance(d.score) for d in docs]
    cut = (rel[2] + rel[3]) / 2
    r = AnygrainRetriever(str(index_dir), top_k=4, score_threshold=cut)
    assert [d.id for d in r.run(ALL_FOUR)["documents"]] == [d.id for d in docs[:3]]
    assert AnygrainRetriever.from_dict(r.to_dict()).score_threshold == cut
    run_cut = (rel[0] + rel[1]) / 2
    assert (
        len(
            AnygrainRetriever(str(index_dir), top_k=4).run(ALL_FOUR, score_threshold=run_cut)[
                "documents"
            ]
        )
        == 1
    )
    with pytest.raises(ValueError, match="score_threshold"):
        AnygrainRetriever(str(index_dir), score_threshold=7)


def test_top_k_1000_returns_1000_ranked_documents(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    docs = AnygrainRetriever(str(deep_index(tmp_path_factory)), top_k=1000).run("grain")
    got = docs["documents"]
    assert len(got) == 1000 and len({d.id for d in got}) == 1000
    assert [d.meta["rank"] for d in got] == list(range(1, 1001))
    assert [d.score for d in got] == sorted((d.score for d in got), reverse=True)
    with pytest.raises(ValueError, match="k must be"):
        AnygrainRetriever(str(deep_index(tmp_path_factory)), top_k=1001)
