"""A server over a phrase index that re-scores passages (issue 37): two search threads.

Re-encoding passages makes search the costly stage, so the server searches such an index
from two threads (``Index.search_threads``); every other index keeps one.  Concurrent
requests must get the hits a sequential search gives, and the phrase model's tokenizer,
shared by the question encoder and re-scoring, must never run in two threads at once (a
Hugging Face fast tokenizer raises "Already borrowed" when re-configured mid-call).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serve_helpers import concurrent_hits
from test_phrase_helpers import PARAGRAPHS, compressed_copy, float32_index

from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.serve.app import create_app
from anygrain.serve.service import SearchService

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = [q for _, _, qas in PARAGRAPHS for q, _ in qas]


@pytest.fixture(scope="module")
def indexes(
    model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PhraseIndex]:
    root = tmp_path_factory.mktemp("serve-rescore")
    none = float32_index(squad, model_dir, root / "none")
    return {"none": none, "pq": compressed_copy(none, root / "pq", "pq")}


def test_a_re_scoring_index_is_searched_from_two_threads(
    indexes: dict[str, PhraseIndex], squad: Path, tmp_path: Path
) -> None:
    bm25 = Index.build(f"squad:{squad}", kind="bm25", out=tmp_path / "bm25", progress=False)
    pq, none = indexes["pq"], indexes["none"]
    assert pq.rescore > 0 and pq.search_threads() == 2
    assert none.rescore == 0 and none.search_threads() == 1
    assert bm25.search_threads() == 1
    service = SearchService(pq, question_bf16=False)
    names = {t.name for t in service._workers}
    assert {"anygrain-search-0", "anygrain-search-1"} <= names or (
        service.search_threads == 1  # a one-core machine
    )
    assert SearchService(none, question_bf16=False).search_threads == 1


def test_concurrent_requests_get_the_sequential_hits(indexes: dict[str, PhraseIndex]) -> None:
    pq = indexes["pq"]
    client = TestClient(create_app(pq, question_bf16=False))
    expected = 2 if (os.cpu_count() or 1) > 1 else 1
    assert client.get("/info").json()["search_threads"] == expected
    want = {q: pq.search([q], 3)[0] for q in QUESTIONS}
    got = concurrent_hits(client, QUESTIONS, rounds=3)
    assert set(got) == set(want)
    for q, hits in got.items():
        assert [(h["passage_id"], tuple(h["span"])) for h in hits] == [
            (h.passage_id, h.span) for h in want[q]
        ]
        assert [h["score"] for h in hits] == pytest.approx([h.score for h in want[q]], abs=1e-4)


def test_the_tokenizer_never_runs_in_two_threads(
    indexes: dict[str, PhraseIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = indexes["pq"].model
    real = model.tokenizer
    inside = [0]
    overlaps = [0]

    class Watched:
        """The tokenizer, counting calls that start while another runs."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def __call__(self, *args: Any, **kw: Any) -> Any:
            inside[0] += 1
            overlaps[0] += inside[0] > 1
            time.sleep(0.002)  # a window for the other thread to enter
            try:
                return real(*args, **kw)
            finally:
                inside[0] -= 1

    monkeypatch.setattr(model, "tokenizer", Watched())
    texts = indexes["pq"].store.texts([0, 1])
    stop = time.monotonic() + 0.5

    def questions() -> None:
        while time.monotonic() < stop:
            model.tokenize_questions(["Who created Python?"])

    def passages() -> None:
        while time.monotonic() < stop:
            model.windows(texts)

    threads = [threading.Thread(target=questions), threading.Thread(target=passages)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps[0] == 0
