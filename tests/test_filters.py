"""Metadata filters (``search(..., filter=...)``): the top ``k`` hits that match, checked
against brute force (the unfiltered search at full depth, filtered, cut at ``k``) for every
kind (BM25, dense, hybrid, sharded, phrase) at passage and phrase grains, the syntax and
its errors, and ``anygrain search --filter``."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from anygrain import Index
from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.errors import UsageError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.filters import compile_filter, pairs_filter, parse_filter

WORDS = [
    *("star", "planet", "orbit", "moon", "comet", "galaxy", "light", "year", "python"),
    *("language", "code", "block", "river", "mountain", "city", "wall", "china", "history"),
    *("music", "jazz", "tea", "leaf", "ocean", "salt", "iron", "red"),
]
QUERIES = ["star orbit", "python code block", "jazz music history", "tea leaf ocean salt"]
COLORS = ("red", "green", "blue")
N_DOCS = 48
FULL = 5000  # deeper than any fixture: the unfiltered search returns everything it has

FILTERS: list[dict[str, Any]] = [
    {"color": "red"},
    {"color": ["red", "blue"]},
    {"year": {"$gte": 2005}},
    {"tags": "even"},  # a list-valued field holds the value
    {"color": {"$ne": "green"}, "year": {"$in": [2001, 2003]}},
    {"$or": [{"color": "blue"}, {"rare": True}]},
    {"doc_id": "d7"},  # one document: the depth doubles until it is found
    {"rare": {"$exists": True}},
    {"color": "purple"},  # nothing matches
]


def docs() -> list[SourceDocument]:
    rng = random.Random(0)
    out = []
    for i in range(N_DOCS):
        meta: dict[str, Any] = {
            "color": COLORS[i % 3],
            "year": 2000 + i % 7,
            "tags": ["even" if i % 2 == 0 else "odd", f"t{i % 5}"],
        }
        if i % 16 == 3:
            meta["rare"] = True
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        out.append(SourceDocument(f"d{i}", f"Title {i}", text, meta=meta))
    return out


@pytest.fixture(autouse=True, scope="module")
def _single_threaded() -> Iterator[None]:
    torch = pytest.importorskip("torch")
    import faiss

    nt, nf = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    yield
    torch.set_num_threads(nt)
    faiss.omp_set_num_threads(nf)


def brute_force(idx: Index, spec: dict[str, Any], k: int, **options: Any) -> list[list[Hit]]:
    """The unfiltered hits at full depth, those whose fields match ``spec``, the first k."""
    test = compile_filter(spec)

    def fields(h: Hit) -> dict[str, Any]:
        return {**h.meta, "doc_id": h.doc_id, "title": h.title, "passage_id": h.passage_id}

    return [[h for h in hs if test(fields(h))][:k] for hs in idx.search(QUERIES, FULL, **options)]


def assert_same(got: list[Hit], want: list[Hit], tol: float = 1e-5) -> None:
    """The same hits in the same order; hits whose scores tie may come in either order (and
    the last tie group may be cut at k differently)."""
    assert len(got) == len(want), (len(got), len(want))
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=tol)

    def key(h: Hit) -> tuple[Any, ...]:
        return (h.passage_row, h.span, h.unit)

    i = 0
    while i < len(want):
        j = i + 1
        while j < len(want) and abs(want[j].score - want[i].score) <= tol:
            j += 1
        if j < len(want):
            assert sorted(map(key, got[i:j]), key=repr) == sorted(map(key, want[i:j]), key=repr)
        i = j


def check_exact(idx: Index, ks: tuple[int, ...] = (1, 3, 10), **options: Any) -> None:
    for spec in FILTERS:
        for k in ks:
            got = idx.search(QUERIES, k, filter=spec, **options)
            want = brute_force(idx, spec, k, **options)
            for g, w in zip(got, want, strict=True):
                assert_same(g, w)
            test = compile_filter(spec)
            assert all(test({**h.meta, "doc_id": h.doc_id}) for hs in got for h in hs)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("filters")


@pytest.fixture(scope="module")
def bm25(root: Path) -> Index:
    return Index.build(docs(), kind="bm25", out=root / "bm25", lang="en", progress=False)


@pytest.fixture(scope="module")
def tiny_model() -> Any:
    from dense_helpers import tiny_biencoder, tiny_tokenizer

    return tiny_biencoder(0, tokenizer=tiny_tokenizer())


def test_bm25_filter_is_the_brute_force_top_k(bm25: Index) -> None:
    check_exact(bm25)
    # the filter's rows are matched once per corpus and filter, then reused
    assert len(bm25.__dict__["_filter_masks"]) == len(FILTERS)


def test_dense_filter_is_the_brute_force_top_k(root: Path, tiny_model: Any) -> None:
    idx = Index.build(
        docs(), kind="dense", out=root / "dense", model=tiny_model, lang="en", progress=False
    )
    check_exact(idx)
    # the server's path: encoded queries searched with the filter
    enc = idx.encode(QUERIES)
    for spec in FILTERS[:3]:
        for g, w in zip(
            idx.search_encoded(enc, 3, filter=spec),
            idx.search(QUERIES, 3, filter=spec),
            strict=True,
        ):
            assert [h.passage_row for h in g] == [h.passage_row for h in w]


def test_hybrid_filter_is_the_brute_force_top_k(root: Path, tiny_model: Any) -> None:
    idx = Index.build(
        docs(), kind="hybrid", out=root / "hybrid", model=tiny_model, lang="en", progress=False
    )
    # hybrid fusion ranks within its depth: compare at one fixed depth for both searches
    check_exact(idx, depth=FULL)


def test_sharded_filter_is_the_brute_force_top_k(root: Path, bm25: Index) -> None:
    idx = Index.build(
        docs(), kind="sharded", of="bm25", shards=3, out=root / "sharded", progress=False
    )
    check_exact(idx)
    for spec in FILTERS:
        got, want = idx.search(QUERIES, 5, filter=spec), bm25.search(QUERIES, 5, filter=spec)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)


@pytest.fixture(scope="module")
def phrase(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    from test_phrase_helpers import make_tiny_phrase_model

    model = make_tiny_phrase_model(tmp_path_factory)
    return Index.build(
        docs(),
        kind="phrase",
        out=root / "phrase",
        model=str(model),
        lang="en",
        compress="none",
        keep=1.0,
        progress=False,
    )


@pytest.mark.parametrize("scope", [True, False], ids=["scope", "over-fetch"])
@pytest.mark.parametrize("unit", [Unit.PHRASE, Unit.PASSAGE, Unit.SENTENCE, Unit.DOCUMENT])
def test_phrase_filter_is_the_brute_force_top_k(
    phrase: Index, unit: Unit, scope: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways a phrase index filters: few matching rows searched alone (``scope_rows``),
    and over-fetched hits filtered (every filter here matches few rows: forced)."""
    import anygrain.index.filters as filters

    if not scope:
        monkeypatch.setattr(filters, "SCOPE_ROWS", 0)
    phrase.__dict__.pop("_filter_masks", None)
    check_exact(phrase, ks=(1, 5), unit=unit)


def test_answer_grain_reads_matching_passages_only(bm25: Index, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from test_phrase_helpers import make_tiny_model

    from anygrain.api import search_index
    from anygrain.reader import Reader

    tiny = make_tiny_model(tmp_path / "tiny")
    torch.manual_seed(0)
    Reader.from_pretrained(str(tiny), max_length=48, max_question_length=16, stride=8).save(
        tmp_path / "reader"
    )
    spec = {"color": "blue"}
    got = search_index(
        bm25, QUERIES, 3, unit="answer", reader=str(tmp_path / "reader"), read=3, filter=spec
    )
    allowed = {h.passage_row for hs in bm25.search(QUERIES, 3, filter=spec) for h in hs}
    assert all(hs for hs in got)
    assert all(h.meta["color"] == "blue" and h.passage_row in allowed for hs in got for h in hs)


# --- syntax and errors ----------------------------------------------------------------------


def test_operators_match_as_documented() -> None:
    rec = {"color": "red", "year": 2003, "tags": ["a", "b"], "flag": True, "n": {"lang": "en"}}
    yes = [
        {"color": "red"},
        {"color": ["blue", "red"]},
        {"tags": "a"},
        {"tags": ["z", "b"]},
        {"year": {"$gt": 2002, "$lte": 2003}},
        {"year": {"$nin": [2001, 2002]}},
        {"missing": {"$ne": 1}},
        {"missing": {"$exists": False}},
        {"n.lang": "en"},
        {"flag": True},
        {"$not": {"color": "blue"}},
        {"$and": [{"color": "red"}, {"year": 2003}]},
        {"$or": [{"color": "blue"}, {"year": 2003}]},
    ]
    no = [
        {"color": "blue"},
        {"year": "2003"},  # types are not coerced
        {"flag": 1},  # a flag is no count
        {"year": {"$lt": 2003}},
        {"color": {"$gt": 5}},  # a string is not compared with a number
        {"missing": "x"},
        {"missing": {"$exists": True}},
        {"color": "red", "year": 2004},
    ]
    assert all(compile_filter(parse_filter(f))(rec) for f in yes)
    assert not any(compile_filter(parse_filter(f))(rec) for f in no)
    assert parse_filter('{"color": "red"}') == {"color": "red"}


def test_command_line_pairs() -> None:
    assert pairs_filter(["color=red,blue", "year=2012", "color=green"]) == {
        "color": {"$in": ["red", "blue", "green"]},
        "year": {"$in": ["2012", 2012]},
    }
    f = pairs_filter(["color=red", '{"year": {"$gt": 2000}}'])
    assert f == {"$and": [{"color": {"$in": ["red"]}}, {"year": {"$gt": 2000}}]}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"year": {"$foo": 1}}, "unknown operator '$foo' on field 'year'"),
        ({"$xor": []}, "unknown operator '$xor'"),
        ({"year": {"$in": 5}}, "$in takes a list"),
        ({"year": {}}, "empty operator object"),
        ({"year": {"$gt": [1]}}, "$gt takes a number or a string"),
        ({"a": {"$eq": {"b": 1}}}, "takes a string, number, boolean or null"),
        ({"$and": {"a": 1}}, "$and takes a non-empty list"),
        ({"a": {"$exists": "yes"}}, "$exists takes true or false"),
        ("{not json", "filter: not JSON"),
        (["color"], "'color' is not FIELD=VALUE"),
        (5, "a JSON object of field: value"),
    ],
)
def test_bad_filters_are_one_line_errors(bm25: Index, spec: Any, says: str) -> None:
    with pytest.raises(UsageError) as e:
        bm25.search(QUERIES[:1], 3, filter=spec)
    assert says in str(e.value) and "\n" not in str(e.value)


# --- the command line -----------------------------------------------------------------------


def test_cli_filter(bm25: Index) -> None:
    runner = CliRunner()
    args = ["search", str(bm25.path), "star orbit", "-k", "4", "--json"]
    r = runner.invoke(app, [*args, "--filter", "color=red,blue", "--filter", "year=2001,2003"])
    assert r.exit_code == 0, r.output
    got = [json.loads(line) for line in r.stdout.splitlines()]
    want = bm25.search(["star orbit"], 4, filter={"color": ["red", "blue"], "year": [2001, 2003]})
    assert [h["passage_id"] for h in got] == [h.passage_id for h in want[0]]
    assert all(h["meta"]["color"] in ("red", "blue") for h in got)
    r = runner.invoke(app, [*args, "--filter", '{"rare": true}'])
    assert r.exit_code == 0 and all(json.loads(x)["meta"]["rare"] for x in r.stdout.splitlines())
    for bad in ("color", '{"year": {"$near": 1}}'):
        r = runner.invoke(app, [*args, "--filter", bad])
        assert r.exit_code != 0
        assert "filter:" in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1


def test_cli_batch_filter(bm25: Index, tmp_path: Path) -> None:
    qf = tmp_path / "q.txt"
    qf.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    r = CliRunner().invoke(
        app,
        ["search", str(bm25.path), "--questions", str(qf), "-k", "3", "--filter", "tags=odd"],
    )
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == len(QUERIES)
    assert all("odd" in h["meta"]["tags"] for x in lines for h in x["hits"])
