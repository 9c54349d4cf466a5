"""anygrain serve, the answer grain: a reader reads the top passages the index retrieves
(unit ``answer``, any kind of index).  A tiny untrained reader (the ``minilm`` backbone with
new heads) over a small BM25 index built from JSONL (FastAPI's TestClient, no sockets), and
a tiny phrase index for ``sparse_weight``.

The reader reads in float32 throughout this module (``native_bf16`` patched off): batches
of different sizes pad differently, and an untrained reader's near-equal bfloat16 span
scores could then swap places.  With the same precision on both sides, the server's answers
are those of :func:`anygrain.api.search_index` (same spans, scores within 1e-4);
``test_default_precision_matches_search_index`` checks the default precision (bfloat16 on a
CPU with native bf16) on both sides too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("fastapi", reason="anygrain serve needs fastapi (./install.sh installs it)")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")

import torch
from fastapi.testclient import TestClient
from test_phrase_helpers import make_tiny_model
from typer.testing import CliRunner

import anygrain.reader.answering as answering
import anygrain.utils.precision as precision
from anygrain.api import search_index
from anygrain.cli.main import app as cli_app
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseEncoder
from anygrain.reader import Reader
from anygrain.serve import create_app
from anygrain.serve.service import ReaderUnavailable, SearchService

pytestmark = pytest.mark.usefixtures("torch_one_thread", "fp32_reading")

READ = 3  # passages the server reads per question
NATIVE_BF16 = precision.native_bf16  # this CPU's own (the module patches it off)

PASSAGES = [
    (
        "python",
        "Python",
        "Python is a programming language. It was created by Guido van Rossum "
        "and first released in 1991. Python uses indentation to delimit blocks.",
    ),
    (
        "wall",
        "Great Wall",
        "The Great Wall of China was built over many centuries. Its total length is "
        "about 21,196 kilometres according to a 2012 survey.",
    ),
    (
        "zurich",
        "Zürich",
        "Zürich is the largest city in Switzerland. The river Limmat flows through "
        "Zürich — past the old town — into Lake Zürich.",
    ),
    (
        "centauri",
        "Alpha Centauri",
        "Alpha Centauri is the closest star system to the Solar System. "
        "It is 4.37 light-years away from the Sun.",
    ),
    (
        "everest",
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level. Its peak is "
        "8,849 metres high. It lies in the Himalayas.",
    ),
]

QUESTIONS = [
    "Who created Python?",
    "How long is the Great Wall of China?",
    "Which river flows through Zürich?",
    "How high is Mount Everest?",
]


@pytest.fixture(scope="module")
def fp32_reading() -> Iterator[None]:
    """The reader reads in float32 here (see the module docstring); ``native_bf16`` is
    looked up when a read starts, so both the server and search_index see it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(precision, "native_bf16", lambda: False)
        yield


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny untrained reader saved to disk: the minilm backbone with new span heads."""
    torch.manual_seed(0)
    r = Reader.from_pretrained("minilm")
    out = tmp_path_factory.mktemp("reader") / "tiny-reader"
    r.save(out)
    return out


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("answer-idx")
    jsonl = root / "corpus.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps({"id": i, "title": t, "text": x}, ensure_ascii=False) + "\n"
            for i, t, x in PASSAGES
        ),
        encoding="utf-8",
    )
    return Index.build(str(jsonl), kind="bm25", out=root / "bm25", progress=False)


@pytest.fixture(scope="module")
def client(bm25_index: Index, reader_dir: Path) -> TestClient:
    # from the directory, as the CLI does; the reader loads at startup
    return TestClient(create_app(bm25_index.path, reader=str(reader_dir), read=READ))


@pytest.fixture
def no_shipped_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """No reader ships for any language (whatever this install has)."""
    import anygrain.models.shipped as shipped

    monkeypatch.setattr(shipped, "reader_ships", lambda lang: False)


def ask(c: TestClient, q: str, k: int = 3, **params: Any) -> list[dict[str, Any]]:
    r = c.get("/search", params={"q": q, "unit": "answer", "k": k, **params})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["unit"] == "answer" and d["k"] == k and d["question"] == q
    return cast(list[dict[str, Any]], d["hits"])


def check_answer(h: dict[str, Any]) -> None:
    assert h["unit"] == "answer"
    text = h["text"]
    a, b = h["span"]
    s, e = h["sentence"]
    assert 0 <= s <= a < b <= e <= len(text)
    assert h["answer"] == text[a:b] and h["answer"].strip()
    assert h["answer"] in text[s:e]
    assert h["before"] + h["answer"] + h["after"] == text
    assert isinstance(h["reader_score"], float) and isinstance(h["retrieval_score"], float)


def same_answers(got: list[dict[str, Any]], want: list[Hit]) -> None:
    """The server's answer hits are ``want`` (spans exact, scores within 1e-4)."""
    assert [(h["passage_id"], tuple(h["span"]), tuple(h["sentence"])) for h in got] == [
        (h.passage_id, h.span, h.sentence) for h in want
    ]
    for field in ("score", "reader_score", "retrieval_score"):
        assert [h[field] for h in got] == pytest.approx([getattr(h, field) for h in want], abs=1e-4)


def same_hits(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [(h["passage_id"], h["span"], h["sentence"]) for h in got] == [
        (h["passage_id"], h["span"], h["sentence"]) for h in want
    ]
    assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], abs=1e-4)


# --- answers -----------------------------------------------------------------------------
def test_get_search_answers_spans_inside_their_sentences(client: TestClient) -> None:
    for q in QUESTIONS:
        hits = ask(client, q, k=3)
        assert 1 <= len(hits) <= 3
        assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        for h in hits:
            check_answer(h)
        # one hit per answer text
        assert len({h["answer"] for h in hits}) == len(hits)


def test_answers_match_search_index(
    client: TestClient, bm25_index: Index, reader_dir: Path
) -> None:
    for q in QUESTIONS:
        for k in (1, 3):
            want = search_index(
                bm25_index, [q], k, unit="answer", reader=str(reader_dir), read=READ
            )
            same_answers(ask(client, q, k=k), want[0])


def test_answers_read_the_top_passages_retrieved(client: TestClient, bm25_index: Index) -> None:
    q = QUESTIONS[2]
    read = {h.passage_row for h in bm25_index.search([q], READ)[0]}
    hits = ask(client, q, k=10)
    assert hits and {h["passage_row"] for h in hits} <= read
    for h in hits:
        assert h["retrieval_score"] == pytest.approx(
            next(
                p.score
                for p in bm25_index.search([q], READ)[0]
                if p.passage_row == h["passage_row"]
            )
        )


def test_default_precision_matches_search_index(
    bm25_index: Index, reader_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default precision (bfloat16 on a CPU with native bf16) on both sides: one question
    alone is read in the same batch by the server and by search_index."""
    monkeypatch.setattr(precision, "native_bf16", NATIVE_BF16)
    c = TestClient(create_app(bm25_index, reader=str(reader_dir), read=READ, warm_up=False))
    q = QUESTIONS[0]
    want = search_index(bm25_index, [q], 2, unit="answer", reader=str(reader_dir), read=READ)
    same_answers(ask(c, q, k=2), want[0])


def test_batch_returns_what_single_requests_return(client: TestClient) -> None:
    r = client.post("/search", json={"questions": QUESTIONS, "unit": "answer", "k": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["unit"] == "answer" and d["k"] == 2
    assert [x["question"] for x in d["results"]] == QUESTIONS
    for q, res in zip(QUESTIONS, d["results"], strict=True):
        for h in res["hits"]:
            check_answer(h)
        same_hits(res["hits"], ask(client, q, k=2))


def test_answer_and_other_units_side_by_side(client: TestClient, bm25_index: Index) -> None:
    q = QUESTIONS[1]
    r = client.get("/search", params={"q": q, "k": 2})
    assert r.status_code == 200 and r.json()["unit"] == "passage"
    want = bm25_index.search([q], 2)[0]
    assert [h["passage_id"] for h in r.json()["hits"]] == [h.passage_id for h in want]
    assert all(h["sentence"] is None for h in r.json()["hits"])
    # a passage index still refuses the phrase grains
    r = client.get("/search", params={"q": q, "unit": "phrase"})
    assert r.status_code == 422


class HeldIndex:
    """The real index, whose query encoder waits while ``hold`` is clear (so requests queue
    behind it)."""

    def __init__(self, index: Index) -> None:
        self._index = index
        self.hold = threading.Event()
        self.hold.set()
        self.encodes: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def encode(self, queries: list[str], **options: Any) -> Any:
        self.encodes.append(list(queries))
        self.hold.wait(timeout=30)
        return self._index.encode(queries, **options)


def wait_until(ready: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def answer_in_background(svc: SearchService, out: dict[str, Any]) -> threading.Thread:
    """An answer search for "Who created Python?" started in a thread of its own; its result
    lands in ``out["a"]``."""
    t = threading.Thread(
        target=lambda: out.setdefault("a", svc.search(["Who created Python?"], unit="answer"))
    )
    t.start()
    return t


def test_concurrent_answer_requests_are_read_in_one_batch(
    bm25_index: Index, reader_dir: Path, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[list[str]] = []
    real = answering.answer_hits

    def counted(reader: Any, questions: Any, *args: Any, **kw: Any) -> Any:
        reads.append(list(questions))
        return real(reader, questions, *args, **kw)

    monkeypatch.setattr(answering, "answer_hits", counted)
    idx = HeldIndex(bm25_index)
    # one reading thread: with two, the idle one takes each request as it queues, so how the
    # queued requests split into batches depends on the machine's timing
    svc = SearchService(cast(Index, idx), reader=str(reader_dir), read=READ, read_threads=1)
    out: dict[str, Any] = {}
    encode = idx.encode

    def encode_after_first_read(queries: list[str], **kw: Any) -> Any:
        # the queued requests are encoded once the reader reads the first: else, on a busy
        # machine, the reader thread may wake only after both batches were handed over
        if "Who created Python?" not in queries:
            wait_until(lambda: reads, "the first question is being read")
        return encode(queries, **kw)

    idx.encode = encode_after_first_read  # type: ignore[method-assign]

    def run(q: str, unit: str = "answer") -> None:
        try:
            out[q] = svc.search([q], unit=unit, k=2)
        except Exception as e:
            out[q] = e

    idx.hold.clear()
    first = threading.Thread(target=run, args=("Who created Python?",))
    first.start()
    wait_until(lambda: idx.encodes, "the first request is being encoded (and waits there)")
    rest = [threading.Thread(target=run, args=(q,)) for q in QUESTIONS[1:]]
    rest.append(threading.Thread(target=run, args=("Great Wall", "passage")))
    for t in rest:
        t.start()
    wait_until(lambda: svc._queue.qsize() >= len(rest), "the other requests queue")
    idx.hold.set()
    for t in [first, *rest]:
        t.join(timeout=60)
    # the queued answer questions were read in one reader call; the passage request apart
    assert reads[0] == ["Who created Python?"]
    assert sorted(reads[1]) == sorted(QUESTIONS[1:]) and len(reads) == 2
    for q in QUESTIONS:
        r = out[q]
        assert r.unit is Unit.ANSWER and r.k == 2
        got = [h.to_json(i) for i, h in enumerate(r.hits[0], 1)]
        same_hits(got, ask(client, q, k=2))
    assert out["Great Wall"].unit is Unit.PASSAGE


def test_reading_does_not_hold_back_other_searches(
    bm25_index: Index, reader_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading has its own thread: a passage search completes while an answer is read."""
    reading, release = threading.Event(), threading.Event()
    real = answering.answer_hits

    def slow(*args: Any, **kw: Any) -> Any:
        reading.set()
        assert release.wait(60), "the test never released the reader"
        return real(*args, **kw)

    monkeypatch.setattr(answering, "answer_hits", slow)
    svc = SearchService(bm25_index, reader=str(reader_dir), read=READ)
    out: dict[str, Any] = {}
    t = answer_in_background(svc, out)
    wait_until(reading.is_set, "the answer is being read")
    passage = svc.search(["Great Wall"], unit="passage", k=1)
    assert passage.hits[0][0].doc_id == "wall" and "a" not in out
    release.set()
    t.join(timeout=60)
    assert out["a"].unit is Unit.ANSWER and out["a"].hits[0]


def test_a_failing_read_fails_only_its_own_request(
    bm25_index: Index, reader_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = answering.answer_hits

    def picky(reader: Any, questions: Any, *args: Any, **kw: Any) -> Any:
        if "Everest" in " ".join(questions):
            raise AnygrainError("cannot read this one")
        return real(reader, questions, *args, **kw)

    monkeypatch.setattr(answering, "answer_hits", picky)
    idx = HeldIndex(bm25_index)
    svc = SearchService(cast(Index, idx), reader=str(reader_dir), read=READ)
    out: dict[str, Any] = {}

    def run(q: str) -> None:
        try:
            out[q] = svc.search([q], unit="answer", k=1)
        except Exception as e:
            out[q] = e

    idx.hold.clear()
    qs = ["Who created Python?", "How high is Mount Everest?", "How long is the Great Wall?"]
    threads = [threading.Thread(target=run, args=(q,)) for q in qs]
    threads[0].start()
    wait_until(lambda: idx.encodes, "the first request is being encoded (and waits there)")
    for t in threads[1:]:
        t.start()
    wait_until(lambda: svc._queue.qsize() >= 2, "the other requests queue")
    idx.hold.set()
    for t in threads:
        t.join(timeout=60)
    assert "cannot read this one" in str(out[qs[1]])
    assert out[qs[0]].hits[0] and out[qs[2]].hits[0]


def test_two_reading_threads_read_at_once_with_their_own_tokenizers(
    bm25_index: Index, reader_dir: Path, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two reading threads, an answer is read while another is still being read, by a
    view of the reader that shares its weights but has a tokenizer of its own; the answers
    are those of one thread."""
    held, release = threading.Event(), threading.Event()
    readers: dict[str, Any] = {}
    real = answering.answer_hits

    def slow(reader: Any, questions: Any, *args: Any, **kw: Any) -> Any:
        readers[questions[0]] = reader
        if questions[0] == "Who created Python?":
            held.set()
            assert release.wait(60), "the test never released the reader"
        return real(reader, questions, *args, **kw)

    monkeypatch.setattr(answering, "answer_hits", slow)
    svc = SearchService(bm25_index, reader=str(reader_dir), read=READ, read_threads=2)
    assert svc.info()["read_threads"] == 2
    out: dict[str, Any] = {}
    t = answer_in_background(svc, out)
    wait_until(held.is_set, "the first answer is being read")
    other = svc.search(["How high is Mount Everest?"], unit="answer", k=2)
    assert "a" not in out  # read while the first is still held
    release.set()
    t.join(timeout=60)
    first, second = readers["Who created Python?"], readers["How high is Mount Everest?"]
    assert first is not second and first.tokenizer is not second.tokenizer
    weights = "graph" if hasattr(first, "graph") else "encoder"  # ONNX Runtime's or torch's
    assert getattr(first, weights) is getattr(second, weights)
    got = [h.to_json(i) for i, h in enumerate(other.hits[0], 1)]
    same_hits(got, ask(client, "How high is Mount Everest?", k=2))
    assert out["a"].hits[0]


def test_read_threads_is_checked(bm25_index: Index) -> None:
    for bad in (0, 17, 1.5, True):
        with pytest.raises(AnygrainError, match="threads reading answers must be an integer"):
            create_app(bm25_index.path, read_threads=bad)  # type: ignore[arg-type]
    r = CliRunner().invoke(
        cli_app, ["serve", str(bm25_index.path), "--read-threads", "0", "--port", "1"]
    )
    assert r.exit_code != 0 and "threads reading answers must be an integer" in r.output
    assert len(r.output.strip().splitlines()) == 1


# --- no reader ----------------------------------------------------------------------------
@pytest.mark.usefixtures("no_shipped_reader")
def test_answer_without_a_reader_is_a_400_naming_reader(bm25_index: Index) -> None:
    c = TestClient(create_app(bm25_index))
    for r in (
        c.get("/search", params={"q": "Who created Python?", "unit": "answer"}),
        c.post("/search", json={"questions": ["Who created Python?"], "unit": "answer"}),
    ):
        assert r.status_code == 400, r.text
        msg = r.json()["error"]
        assert set(r.json()) == {"error"}
        assert "unit answer needs a reader" in msg and "--reader" in msg
    info = c.get("/info").json()
    assert info["units"] == ["passage"] and info["reader"] is None and info["read"] is None
    page = c.get("/").text
    assert "const READER = false;" in page
    # the server goes on answering the other units
    assert c.get("/search", params={"q": "Python"}).status_code == 200
    assert c.get("/health").json()["status"] == "ok"


def test_default_reader_loads_on_the_first_answer_request(
    bm25_index: Index, reader_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a reader ships for the corpus language, the server has the answer grain without
    --reader, and loads the reader when it is first asked for."""
    import anygrain.models.shipped as shipped

    monkeypatch.setattr(shipped, "reader_ships", lambda lang: lang == "en")
    monkeypatch.setattr(shipped, "default_reader", lambda lang: str(reader_dir))
    svc = SearchService(bm25_index)
    c = TestClient(create_app(svc))
    info = c.get("/info").json()
    assert info["units"] == ["passage", "answer"] and info["read"] == answering.DEFAULT_PASSAGES
    assert svc._reader is None  # not loaded yet
    hits = ask(c, QUESTIONS[0], k=1)
    assert svc._reader is not None and len(hits) == 1
    want = search_index(bm25_index, [QUESTIONS[0]], 1, unit="answer", reader=str(reader_dir))
    same_answers(hits, want[0])


def test_a_default_reader_that_does_not_load_is_a_400(
    bm25_index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anygrain.models.shipped as shipped

    monkeypatch.setattr(shipped, "reader_ships", lambda lang: True)
    monkeypatch.setattr(shipped, "default_reader", lambda lang: str(tmp_path))
    c = TestClient(create_app(bm25_index))
    for _ in range(2):  # the failure is remembered, and said again
        r = c.get("/search", params={"q": "Who?", "unit": "answer"})
        assert r.status_code == 400
        assert "not an anygrain reader" in r.json()["error"] and "--reader" in r.json()["error"]
    with pytest.raises(ReaderUnavailable):
        c.app.state.service.check_unit("answer")  # type: ignore[attr-defined]


def test_a_bad_reader_or_read_fails_the_startup(bm25_index: Index, tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="not an anygrain reader"):
        create_app(bm25_index, reader=str(tmp_path))
    for bad in (0, 101):
        with pytest.raises(AnygrainError, match="passages read must be in 1..100"):
            create_app(bm25_index.path, read=bad)


# --- /info, the page, the command -----------------------------------------------------------
def test_info_shows_the_reader(client: TestClient, reader_dir: Path) -> None:
    d = client.get("/info").json()
    assert d["units"] == ["passage", "answer"] and d["default_unit"] == "passage"
    # the directory's name, not its path on the server's disk
    assert d["reader"] == reader_dir.name and str(reader_dir.parent) not in json.dumps(d)
    assert d["read"] == READ


def test_page_has_the_answer_section(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    page = r.text
    assert '<section id="answer"' in page and "const READER = true;" in page
    assert 'unit: "answer", k: "1"' in page  # the second request the page makes
    # the answer shows above whichever unit is chosen; the answer grain is the last switch
    assert page.index('name="unit" value="passage"') < page.index('name="unit" value="answer"')
    assert 'name="unit" value="passage"' in page
    assert "innerHTML" not in page and "<script src" not in page
    # the answer section comes before the hits
    assert page.index('id="answer"') < page.index('id="results"')


def test_serve_command_has_reader_options(bm25_index: Index) -> None:
    runner = CliRunner()
    r = runner.invoke(cli_app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--reader" in r.output and "--read" in r.output
    r = runner.invoke(cli_app, ["serve", str(bm25_index.path), "--read", "0", "--port", "1"])
    assert r.exit_code != 0 and "passages read must be in 1..100" in r.output


# --- a phrase index: sparse_weight weighs the passages read ---------------------------------
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


def test_phrase_index_answers_with_sparse_weight(phrase_index: Index, reader_dir: Path) -> None:
    # float32 questions: compared with search_index, which encodes in float32
    c = TestClient(create_app(phrase_index, question_bf16=False, reader=str(reader_dir), read=2))
    info = c.get("/info").json()
    assert info["units"] == ["phrase", "sentence", "passage", "document", "answer"]
    q = "When was Python first released?"
    for w in (None, 0.0, 2.5):
        params = {} if w is None else {"sparse_weight": w}
        got = ask(c, q, k=2, **params)
        for h in got:
            check_answer(h)
        want = search_index(
            phrase_index, [q], 2, unit="answer", reader=str(reader_dir), read=2, sparse_weight=w
        )
        same_answers(got, want[0])
        # the passages read are those the phrase index ranks at this weight
        ranked = phrase_index.search([q], 2, unit="passage", sparse_weight=w)[0]
        scores = {h.passage_row: h.score for h in ranked}
        for h in got:
            assert h["retrieval_score"] == pytest.approx(scores[h["passage_row"]], abs=1e-4)
    r = c.get("/search", params={"q": q, "unit": "answer", "sparse_weight": -1})
    assert r.status_code == 422 and "sparse_weight" in r.json()["error"]
