"""anygrain serve: every endpoint and every refused request, on a tiny BM25 and phrase index
(FastAPI's TestClient, no sockets), plus dense and hybrid passage indexes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from anygrain.models.shipped import reader_ships

pytest.importorskip("fastapi", reason="anygrain serve needs fastapi (./install.sh installs it)")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")

import torch
from dense_helpers import single_threaded, tiny_biencoder
from fastapi.testclient import TestClient
from serve_helpers import concurrent_hits
from test_phrase_helpers import PARAGRAPHS, make_tiny_model
from typer.testing import CliRunner

from anygrain.cli.main import app as cli_app
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.encoded import EncodedQueries
from anygrain.index.registry import IndexKind
from anygrain.phrase import PhraseEncoder
from anygrain.serve import create_app
from anygrain.serve.page import render
from anygrain.serve.service import (
    MAX_BATCH,
    MAX_K,
    MAX_QUESTION_CHARS,
    RequestError,
    SearchService,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# with a shipped English reader, every index also answers (the answer grain)
READ = ["answer"] if reader_ships("en") else []
UNITS = ["phrase", "sentence", "passage", "document"]
HIT_FIELDS = {
    "rank",
    "unit",
    "score",
    "passage_row",
    "text",
    "title",
    "passage_id",
    "doc_id",
    "span",
    "before",
    "answer",
    "after",
    # answer hits only (tests/test_serve_answer.py); null on every other unit
    "sentence",
    "reader_score",
    "retrieval_score",
    "confidence",
    # the passage's metadata and offsets in its document (every unit)
    "meta",
    # the hit's offsets in its document's text, and where it is in words (every unit)
    "char_start",
    "char_end",
    "citation",
}


@pytest.fixture(scope="module")
def bm25_index(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    out = tmp_path_factory.mktemp("idx") / "bm25"
    return Index.build(f"squad:{squad}", kind="bm25", out=out, progress=False)


@pytest.fixture(scope="module")
def phrase_index(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    model_dir = m.save(tmp_path_factory.mktemp("phrase-model") / "m")
    out = tmp_path_factory.mktemp("idx") / "phrase"
    return Index.build(
        f"squad:{squad}", kind="phrase", out=out, model=str(model_dir), progress=False
    )


@pytest.fixture(scope="module")
def bm25(bm25_index: Index) -> TestClient:
    return TestClient(create_app(bm25_index.path))  # from the directory, as the CLI does


@pytest.fixture(scope="module")
def phrase(phrase_index: Index) -> TestClient:
    # float32 questions: the hits are compared with index.search's
    return TestClient(create_app(phrase_index, question_bf16=False))


def check_hit(h: dict[str, Any], unit: str) -> None:
    assert set(h) == HIT_FIELDS
    assert h["unit"] == unit
    assert h["before"] + h["answer"] + h["after"] == h["text"]
    assert h["sentence"] is None and h["reader_score"] is None and h["retrieval_score"] is None
    if unit in ("phrase", "sentence"):
        s, e = h["span"]
        assert h["answer"] == h["text"][s:e] and h["answer"]
    else:
        assert h["span"] is None and h["answer"] == ""


# --- health, info, page, schema ---------------------------------------------------------
def test_health(bm25: TestClient, phrase: TestClient) -> None:
    for c, kind in ((bm25, "bm25"), (phrase, "phrase")):
        r = c.get("/health")
        assert r.status_code == 200
        d = r.json()
        assert d["status"] == "ok" and d["kind"] == kind and d["searches"] >= 0


def test_info_bm25(bm25: TestClient) -> None:
    d = bm25.get("/info").json()
    assert d["kind"] == "bm25" and d["index"] == "bm25"
    assert d["format"] == "anygrain.index" and d["format_version"] == 1
    assert d["units"] == ["passage", *READ] and d["default_unit"] == "passage"
    assert d["model"] is None
    n = len(PARAGRAPHS)
    assert d["corpus"]["n_passages"] == n and d["corpus"]["n_documents"] == n
    assert d["corpus"]["source_format"] == "squad" and "path" not in d["corpus"]
    assert d["limits"] == {
        "max_k": MAX_K,
        "max_question_chars": MAX_QUESTION_CHARS,
        "max_batch": MAX_BATCH,
    }


def test_info_phrase(phrase: TestClient, phrase_index: Index) -> None:
    d = phrase.get("/info").json()
    assert d["kind"] == "phrase" and d["units"] == [*UNITS, *READ] and d["default_unit"] == "phrase"
    assert d["model"]["fingerprint"] == phrase_index.manifest["model"]["fingerprint"]
    assert d["counts"]["passages"] == len(PARAGRAPHS)


def test_openapi_lists_every_endpoint(bm25: TestClient) -> None:
    spec = bm25.get("/openapi.json").json()
    # the paths before /v1 still answer, left out of the schema (tests/test_serve_v1.py)
    assert set(spec["paths"]) == {
        "/v1/search", "/v1/ask", "/v1/passages/{passage_id}", "/v1/health", "/v1/info"
    }  # fmt: skip
    assert set(spec["paths"]["/v1/search"]) == {"get", "post"}
    params = {p["name"] for p in spec["paths"]["/v1/search"]["get"]["parameters"]}
    # the search options are documented whatever the kind (sparse_weight: phrase indexes;
    # fusion, weight, depth: hybrid indexes); the index takes those it lets a client set
    assert params == {
        "q", "unit", "k", "filter", "min_confidence", "sparse_weight", "fusion", "weight", "depth"
    }  # fmt: skip
    # FastAPI's /redoc would load scripts from a CDN: off (/docs is bundled: test_serve_v1)
    assert bm25.get("/redoc").status_code == 404


def test_page_is_self_contained_and_lists_only_allowed_units(
    bm25: TestClient, phrase: TestClient
) -> None:
    for c, units in ((bm25, ["passage"]), (phrase, UNITS)):
        r = c.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["content-security-policy"]
        page = r.text
        assert "<script src" not in page and "<link" not in page
        assert "http://" not in page and "https://" not in page
        assert "innerHTML" not in page
        for u in UNITS:
            assert (f'name="unit" value="{u}"' in page) == (u in units)


def test_page_escapes_server_values() -> None:
    evil = "<img src=x onerror=alert(1)>"
    info = {
        "index": evil,
        "kind": "bm25",
        "corpus": {"n_passages": 3},
        "units": ["passage"],
        "default_unit": "passage",
        "limits": {"max_question_chars": 1000},
    }
    page = render(info)
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


# --- search -----------------------------------------------------------------------------
def test_get_search_bm25(bm25: TestClient, bm25_index: Index) -> None:
    r = bm25.get("/search", params={"q": "Who created Python?", "k": 2})
    assert r.status_code == 200
    d = r.json()
    assert d["question"] == "Who created Python?" and d["unit"] == "passage" and d["k"] == 2
    assert d["latency_ms"] >= 0
    assert [h["rank"] for h in d["hits"]] == [1, 2][: len(d["hits"])]
    assert d["hits"][0]["title"] == "Python"
    for h in d["hits"]:
        check_hit(h, "passage")
    want = bm25_index.search(["Who created Python?"], 2)[0]
    assert [h["passage_id"] for h in d["hits"]] == [h.passage_id for h in want]
    assert [h["score"] for h in d["hits"]] == pytest.approx([h.score for h in want])
    # unit=passage is accepted (and is the default) for a passage index
    assert bm25.get("/search", params={"q": "Python", "unit": "passage"}).status_code == 200


@pytest.mark.parametrize("unit", UNITS)
def test_get_search_phrase_every_unit(phrase: TestClient, phrase_index: Index, unit: str) -> None:
    q = "Who created Python?"
    r = phrase.get("/search", params={"q": q, "unit": unit, "k": 3})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["unit"] == unit and 1 <= len(d["hits"]) <= 3
    for h in d["hits"]:
        check_hit(h, unit)
    want = phrase_index.search([q], 3, unit=unit)[0]
    assert [(h["passage_id"], h["span"] and tuple(h["span"])) for h in d["hits"]] == [
        (h.passage_id, h.span) for h in want
    ]


def test_bf16_questions_are_searched_as_the_index_searches_them(phrase_index: Index) -> None:
    """question_bf16: the server encodes as ``index.search(..., bf16=True)`` does, and says so."""
    client = TestClient(create_app(phrase_index, question_bf16=True))
    assert client.get("/info").json()["question_precision"] == "bfloat16"
    q = "When was Python first released?"
    got = client.get("/search", params={"q": q, "k": 3}).json()["hits"]
    want = phrase_index.search([q], 3, bf16=True)[0]
    assert [round(h["score"], 4) for h in got] == [round(h.score, 4) for h in want]
    fp32 = phrase_index.search([q], 3)[0]
    assert [(h["passage_id"], tuple(h["span"])) for h in got] == [
        (h.passage_id, h.span) for h in fp32
    ]
    assert [h["score"] for h in got] == pytest.approx([h.score for h in fp32], rel=1e-2)
    off = TestClient(create_app(phrase_index, question_bf16=False)).get("/info").json()
    assert off["question_precision"] == "float32"


def test_sparse_weight_overrides_the_fusion_per_request(
    bm25: TestClient, phrase: TestClient, phrase_index: Index
) -> None:
    q = "When was Python first released?"
    for w in (0.0, 2.5):
        got = phrase.get("/search", params={"q": q, "k": 3, "sparse_weight": w}).json()
        want = phrase_index.search([q], 3, sparse_weight=w)[0]
        assert [round(h["score"], 4) for h in got["hits"]] == [round(h.score, 4) for h in want]
    batch = phrase.post("/search", json={"questions": [q], "k": 3, "sparse_weight": 0}).json()
    assert (
        batch["results"][0]["hits"]
        == phrase.get("/search", params={"q": q, "k": 3, "sparse_weight": 0}).json()["hits"]
    )
    for bad in (-1, "x"):
        r = phrase.get("/search", params={"q": q, "sparse_weight": bad})
        assert r.status_code == 422 and "sparse_weight" in r.text
    r = bm25.get("/search", params={"q": q, "sparse_weight": 1})
    assert r.status_code == 422 and "'sparse_weight' needs a phrase index" in r.json()["error"]


def test_phrase_index_defaults_to_phrases(phrase: TestClient) -> None:
    d = phrase.get("/search", params={"q": "When was Python first released?"}).json()
    assert d["unit"] == "phrase" and d["k"] == 10


def test_post_search_batch(bm25: TestClient, phrase: TestClient) -> None:
    qs = ["Who created Python?", "How long is the Great Wall?"]
    r = bm25.post("/search", json={"questions": qs, "k": 1})
    assert r.status_code == 200
    d = r.json()
    assert d["unit"] == "passage" and d["k"] == 1 and d["latency_ms"] >= 0
    assert [x["question"] for x in d["results"]] == qs
    assert [x["hits"][0]["title"] for x in d["results"]] == ["Python", "Great Wall"]
    r = phrase.post("/search", json={"questions": qs, "unit": "sentence", "k": 2})
    assert r.status_code == 200
    for x in r.json()["results"]:
        assert 1 <= len(x["hits"]) <= 2
        for h in x["hits"]:
            check_hit(h, "sentence")
    # a batch answers as the same questions asked one by one
    one = phrase.get("/search", params={"q": qs[1], "unit": "sentence", "k": 2}).json()
    assert [h["passage_id"] for h in r.json()["results"][1]["hits"]] == [
        h["passage_id"] for h in one["hits"]
    ]


def test_unicode_questions_and_answers(phrase: TestClient) -> None:
    r = phrase.get("/search", params={"q": "中国的首都是哪里？", "k": 5})
    assert r.status_code == 200
    for h in r.json()["hits"]:
        check_hit(h, "phrase")


def test_concurrent_requests_match_sequential(phrase: TestClient) -> None:
    qs = [q for _, _, qas in PARAGRAPHS for q, _ in qas]
    want = {q: phrase.get("/search", params={"q": q, "k": 3}).json()["hits"] for q in qs}
    got = concurrent_hits(phrase, qs)
    assert set(got) == set(want)
    for q, hits in got.items():  # batched with other requests' questions: same hits
        assert [(h["passage_id"], h["span"]) for h in hits] == [
            (h["passage_id"], h["span"]) for h in want[q]
        ]
        assert [h["score"] for h in hits] == pytest.approx([h["score"] for h in want[q]], abs=1e-4)


class SlowIndex:
    """Stands in for an index: the first search waits until released, so that requests
    queue behind it; "boom" makes a search fail."""

    kind = IndexKind.BM25
    # what the service asks an index for: its units, and the options that ask for one
    units = (Unit.PASSAGE,)
    default_unit = Unit.PASSAGE

    def unit_options(self, unit: Unit) -> dict[str, Any]:
        return {}

    def search_threads(self) -> int:
        return 1  # searched one batch at a time (what the batching checks rely on)

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.encodes: list[list[str]] = []
        self.release = threading.Event()
        self.release_encode = threading.Event()
        self.release_encode.set()

    @classmethod
    def encode_options(cls) -> frozenset[str]:
        return frozenset()

    def encode(self, queries: list[str]) -> EncodedQueries:
        self.encodes.append(list(queries))
        self.release_encode.wait(timeout=30)
        return EncodedQueries(list(queries))

    def search_encoded(self, encoded: EncodedQueries, k: int, **options: Any) -> list[list[Hit]]:
        return self.search(encoded.texts, k, **options)

    def search(self, queries: list[str], k: int, **options: Any) -> list[list[Hit]]:
        self.calls.append(list(queries))
        if len(self.calls) == 1:
            self.release.wait(timeout=30)
        if "boom" in queries:
            raise AnygrainError("cannot search boom")
        return [[Hit(Unit.PASSAGE, float(len(q)), 0, q, q, q, q)] * k for q in queries]


def wait_until(ready: Any, what: str, seconds: float = 30.0) -> None:
    """Poll ``ready()``; fail (rather than hang the suite) if it is not true in time."""
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def test_queued_requests_are_searched_as_one_batch() -> None:
    idx = SlowIndex()
    svc = SearchService(cast(Index, idx))
    out: dict[str, Any] = {}

    def ask(q: str, k: int = 2) -> None:
        try:
            out[q] = svc.search([q], k=k)
        except Exception as e:
            out[q] = e

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    wait_until(lambda: idx.calls, '"first" is being searched (and waits there)')
    # meanwhile the encoder takes the next request; hold it there so the rest queue
    idx.release_encode.clear()
    second = threading.Thread(target=ask, args=("a",))
    second.start()
    wait_until(lambda: len(idx.encodes) >= 2, '"a" is being encoded')
    later = [threading.Thread(target=ask, args=(q,)) for q in ("bb", "boom", "ccc")]
    later.append(threading.Thread(target=ask, args=("k3", 3)))
    for t in later:
        t.start()
    wait_until(lambda: svc._queue.qsize() >= len(later), "the later requests queue")
    idx.release_encode.set()
    idx.release.set()
    for t in [first, second, *later]:
        t.join(timeout=30)
    # "a" was encoded while "first" was searched: the two stages overlap
    assert idx.encodes[:2] == [["first"], ["a"]]
    # the requests queued behind it were encoded in one call, and the k=2 ones searched in
    # one call; it failed on "boom", so each was retried alone and only "boom" failed; the
    # k=3 request was searched apart
    assert sorted(idx.encodes[2]) == ["bb", "boom", "ccc", "k3"]
    batched = [c for c in idx.calls if len(c) > 1]
    assert len(batched) == 1 and sorted(batched[0]) == ["bb", "boom", "ccc"]
    assert ["k3"] in idx.calls and ["a"] in idx.calls
    assert isinstance(out["boom"], RequestError) and "cannot search boom" in str(out["boom"])
    for q in ("first", "a", "bb", "ccc", "k3"):
        r = out[q]
        assert r.hits[0][0].passage_id == q and r.hits[0][0].score == len(q)
        assert len(r.hits[0]) == r.k == (3 if q == "k3" else 2) and r.latency_ms > 0
    assert svc.n_questions == 5


def test_without_batching_each_request_is_its_own_search() -> None:
    idx = SlowIndex()
    idx.release.set()
    svc = SearchService(cast(Index, idx), batching=False)
    threads = [threading.Thread(target=svc.search, args=([q],)) for q in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(idx.calls) == [["a"], ["b"], ["c"], ["d"]]


# --- refused requests -----------------------------------------------------------------
def error_of(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    d = r.json()
    assert set(d) == {"error"} and isinstance(d["error"], str) and d["error"]
    return str(d["error"])


@pytest.mark.parametrize(
    "params, status, message",
    [
        ({}, 422, "q: Field required"),
        ({"q": ""}, 422, "the question is empty"),
        ({"q": "   "}, 422, "the question is empty"),
        ({"q": "x" * (MAX_QUESTION_CHARS + 1)}, 422, "too long"),
        ({"q": "Python", "k": 0}, 422, f"k must be between 1 and {MAX_K}, got 0"),
        (
            {"q": "Python", "k": MAX_K + 1},
            422,
            f"k must be between 1 and {MAX_K} (the server's --max-k), got {MAX_K + 1}",
        ),
        ({"q": "Python", "k": "ten"}, 422, "k: Input should be a valid integer"),
        ({"q": "Python", "unit": "word"}, 422, "unknown unit 'word'; choose one of: phrase"),
    ],
)
def test_get_search_refusals(
    bm25: TestClient, phrase: TestClient, params: dict[str, Any], status: int, message: str
) -> None:
    for c in (bm25, phrase):
        assert message in error_of(c.get("/search", params=params), status)


@pytest.mark.parametrize("unit", ["phrase", "sentence", "document"])
def test_passage_index_refuses_finer_or_coarser_units(bm25: TestClient, unit: str) -> None:
    msg = error_of(bm25.get("/search", params={"q": "Python", "unit": unit}), 422)
    assert f"unit {unit} needs a phrase index" in msg and "allowed units: passage" in msg
    msg = error_of(bm25.post("/search", json={"questions": ["Python"], "unit": unit}), 422)
    assert "needs a phrase index" in msg


@pytest.mark.parametrize(
    "body, status, message",
    [
        ('{"questions": ["a"', 400, "malformed JSON body"),
        ("not json", 400, "malformed JSON body"),
        ("[1, 2]", 422, "the body must be a JSON object"),
        ("{}", 422, "questions: Field required"),
        ('{"questions": []}', 422, "questions: List should have at least 1 item"),
        ('{"questions": "Who?"}', 422, "questions: Input should be a valid list"),
        ('{"questions": [1]}', 422, "questions.0: Input should be a valid string"),
        ('{"questions": ["ok", ""]}', 422, "question 2 is empty"),
        ('{"questions": ["a"], "k": 0}', 422, "k: Input should be greater than or equal to 1"),
        ('{"questions": ["a"], "k": 1001}', 422, "k must be between 1 and 1000 (the server's"),
        ('{"questions": ["a"], "unit": "word"}', 422, "unit: Input should be"),
        ('{"question": ["a"]}', 422, "question: Extra inputs are not permitted"),
        (
            json.dumps({"questions": ["a"] * (MAX_BATCH + 1)}),
            422,
            f"questions: List should have at most {MAX_BATCH} items",
        ),
        (
            json.dumps({"questions": ["a", "x" * (MAX_QUESTION_CHARS + 1)]}),
            422,
            "question 2 is too long",
        ),
    ],
)
def test_post_search_refusals(
    bm25: TestClient, phrase: TestClient, body: str, status: int, message: str
) -> None:
    for c in (bm25, phrase):
        r = c.post("/search", content=body, headers={"content-type": "application/json"})
        assert message in error_of(r, status)


def test_unknown_paths_and_methods(bm25: TestClient) -> None:
    assert error_of(bm25.get("/nowhere"), 404) == "Not Found"
    assert error_of(bm25.delete("/search"), 405) == "Method Not Allowed"


def test_server_keeps_answering_after_refusals(phrase: TestClient) -> None:
    before = phrase.get("/health").json()["searches"]
    for body in ("{", "[]", '{"questions": [null]}'):
        phrase.post("/search", content=body, headers={"content-type": "application/json"})
    assert phrase.get("/search", params={"q": "Who created Python?"}).status_code == 200
    assert phrase.get("/health").json()["searches"] == before + 1


# --- other index kinds ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_dense_and_hybrid_indexes(squad: Path, tmp_path: Path, kind: str) -> None:
    with single_threaded():
        idx = Index.build(
            f"squad:{squad}",
            kind=kind,
            out=tmp_path / kind,
            model=tiny_biencoder(seed=1),
            progress=False,
        )
        c = TestClient(create_app(SearchService(idx)))
        info = c.get("/info").json()
        assert info["kind"] == kind and info["units"] == ["passage", *READ]
        assert info["model"]["base_model"] == "tiny-bert-1" and info["model"]["fingerprint"]
        # Index.summary: the hybrid kind adds its fusion; no path on the server's disk
        assert (info["fusion"] is not None) == (kind == "hybrid") and "path" not in info
        assert info["shards"] is None and "components" not in info
        d = c.get("/search", params={"q": "Who created Python?", "k": 3}).json()
        assert len(d["hits"]) == 3
        for h in d["hits"]:
            check_hit(h, "passage")
        msg = error_of(c.get("/search", params={"q": "x", "unit": "phrase"}), 422)
        assert f"this {kind} index returns passages" in msg


# --- the command ------------------------------------------------------------------------
def test_serve_command_is_registered_and_refuses_a_non_index(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli_app, ["serve", "--help"])
    assert r.exit_code == 0 and "--port" in r.output and "127.0.0.1" in r.output
    r = runner.invoke(cli_app, ["serve", str(tmp_path)])
    assert r.exit_code == 2 and "not an anygrain index" in r.output
