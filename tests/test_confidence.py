"""Calibrated confidence and abstention of the answer grain: the calibration itself
(a probability, monotone in each score it is built from, bound to its reader), and every
surface (API, CLI, server, MCP, LangChain) carrying ``confidence`` and honouring a minimum
confidence, with a small calibration each test writes (never the bench's output)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from reader_helpers import tiny_reader
from typer.testing import CliRunner

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.reader import ReaderConfig
from anygrain.reader.confidence import (
    CONFIDENCE_FILE,
    FEATURES,
    Calibration,
    fit_calibration,
    reader_fingerprint,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")

PASSAGES = [
    ("Loops", "The break statement exits the nearest enclosing loop. The continue statement "),
    ("Operators", "The '@' (at) operator is used for matrix multiplication in Python."),
    ("Bowl", "The Denver Broncos represented the AFC at Super Bowl 50. They won it."),
]
Q = "Which team represented the AFC at Super Bowl 50?"


def calibration(fingerprint: str, threshold: float = 0.5) -> Calibration:
    n = len(FEATURES)
    return Calibration(
        weights=(0.5,) * n,
        bias=0.0,
        mean=(0.0,) * n,
        scale=(1.0,) * n,
        reader_fingerprint=fingerprint,
        threshold=threshold,
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """``(bm25 index, calibrated reader, uncalibrated reader)``."""
    from anygrain import Index

    root = tmp_path_factory.mktemp("confidence")
    docs = root / "docs.jsonl"
    docs.write_text(
        "\n".join(
            json.dumps({"id": f"d{i}", "title": t, "text": x}) for i, (t, x) in enumerate(PASSAGES)
        ),
        encoding="utf-8",
    )
    Index.build(str(docs), kind="bm25", out=root / "bm25", progress=False)
    rc = ReaderConfig(base_model="tiny", max_length=48, max_question_length=16, stride=8)
    reader = tiny_reader(rc)
    reader.save(root / "calibrated")
    reader.save(root / "plain")
    calibration(reader_fingerprint(root / "calibrated")).save(root / "calibrated")
    return root / "bm25", root / "calibrated", root / "plain"


def test_confidence_is_a_probability_monotone_in_each_score() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES))) * 3
    # the label rises with the first feature and falls with the second: the fit must still
    # keep every weight >= 0, so the confidence never falls as a score rises
    y = (x[:, 0] - x[:, 1] + rng.normal(size=400) > 0).astype(float)
    cal = fit_calibration(x, y, "f")
    assert min(cal.weights) >= 0 and cal.weights[0] > 0
    p = cal.probability(x)
    assert ((p >= 0) & (p <= 1)).all()
    for j in range(len(FEATURES)):
        up = x.copy()
        up[:, j] += 1.0
        assert (cal.probability(up) >= p - 1e-12).all()
    with pytest.raises(AnygrainError, match="monotone"):
        Calibration((-1.0,) * 5, 0.0, (0.0,) * 5, (1.0,) * 5, "f")


def test_a_calibration_fits_probabilities_as_labels() -> None:
    """Soft labels (the chance that an answer missing its one reference matches another
    annotator's) fit as probabilities: the mean confidence follows the labels' mean."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, len(FEATURES)))
    right = x[:, 2] + rng.normal(size=2000) > 0
    hard = fit_calibration(x, right.astype(float), "f")
    soft_labels = np.where(right, 1.0, 0.3)
    soft = fit_calibration(x, soft_labels, "f")
    assert float(hard.probability(x).mean()) == pytest.approx(float(right.mean()), abs=0.01)
    assert float(soft.probability(x).mean()) == pytest.approx(float(soft_labels.mean()), abs=0.01)
    # the answers labelled 0.3 instead of 0 are the ones whose confidence rises
    wrong = ~right
    assert soft.probability(x)[wrong].mean() > hard.probability(x)[wrong].mean() + 0.1


def test_the_calibration_bench_finds_each_question_s_own_documents(
    setup: tuple[Path, Path, Path],
) -> None:
    """bench/calibrate_reader.py makes a question unanswerable by reading only passages of
    other documents than its gold passage's: it must find that document in the index, and
    none for a question whose gold passage is not there."""
    import importlib.util

    from anygrain import Index
    from anygrain.corpus.questions import Question

    script = Path(__file__).resolve().parents[1] / "bench" / "calibrate_reader.py"
    spec = importlib.util.spec_from_file_location("calibrate_reader", script)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    index = Index.load(setup[0])
    store = index.corpus
    first, last = store.passage(0), store.passage(len(store) - 1)
    assert first.doc_id != last.doc_id
    qs = [
        Question(id="a", text="?", answers=["x"], gold=[first.id, "not-there"]),
        Question(id="b", text="?", answers=["x"], gold=[last.id]),
        Question(id="c", text="?", answers=["x"], gold=["not-there"]),
    ]
    assert bench.gold_documents(index, qs) == [{first.doc_id}, {last.doc_id}, set()]


def test_min_confidence_0_answers_all_1_abstains_with_the_evidence(
    setup: tuple[Path, Path, Path],
) -> None:
    from anygrain import Index
    from anygrain.api import search_index

    index_dir, reader_dir, _ = setup
    idx = Index.load(index_dir)
    got = search_index(idx, [Q], 2, unit="answer", reader=str(reader_dir), read=2)[0]
    assert got and all(h.unit is Unit.ANSWER for h in got)
    assert all(h.confidence is not None and 0 <= h.confidence <= 1 for h in got)
    zero = search_index(idx, [Q], 2, reader=str(reader_dir), read=2, min_confidence=0.0)[0]
    assert [(h.span, h.confidence) for h in zero] == [(h.span, h.confidence) for h in got]
    none = search_index(idx, [Q], 2, reader=str(reader_dir), read=2, min_confidence=1.0)[0]
    read = idx.search([Q], 2)[0]
    assert [h.passage_id for h in none] == [h.passage_id for h in read]  # the evidence
    assert all(h.unit is Unit.PASSAGE and h.span is None for h in none)
    assert all(h.confidence == got[0].confidence for h in none)
    with pytest.raises(AnygrainError, match="min confidence"):
        search_index(idx, [Q], 2, reader=str(reader_dir), min_confidence=1.5)


def test_a_calibration_of_another_reader_is_refused(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from anygrain.api import search_index
    from anygrain.reader.confidence import load_calibration

    index_dir, reader_dir, _ = setup
    other = tmp_path / "reader"
    other.mkdir()
    for f in reader_dir.iterdir():
        if f.name != CONFIDENCE_FILE:
            (other / f.name).write_bytes(f.read_bytes())
    calibration("0123456789abcdef").save(other)
    with pytest.raises(AnygrainError, match="fitted for reader 0123456789abcdef"):
        load_calibration(other / CONFIDENCE_FILE, other)
    with pytest.raises(AnygrainError, match="fitted for reader"):
        search_index(index_dir, [Q], 1, unit="answer", reader=str(other))


def test_without_a_calibration_no_confidence_and_min_confidence_is_refused(
    setup: tuple[Path, Path, Path],
) -> None:
    from anygrain.api import search_index
    from anygrain.cli.main import app

    index_dir, _, plain = setup
    got = search_index(index_dir, [Q], 2, unit="answer", reader=str(plain))[0]
    assert got and all(h.confidence is None for h in got)
    with pytest.raises(AnygrainError, match="no confidence calibration"):
        search_index(index_dir, [Q], 2, unit="answer", reader=str(plain), min_confidence=0.5)
    r = CliRunner().invoke(
        app, ["search", str(index_dir), Q, "--reader", str(plain), "--min-confidence", "0.5"]
    )
    assert r.exit_code != 0 and "no confidence calibration" in r.output
    assert "Traceback" not in r.output


def test_the_cli_prints_confidence_and_not_found(setup: tuple[Path, Path, Path]) -> None:
    from anygrain.cli.main import app

    index_dir, reader_dir, _ = setup
    runner = CliRunner()
    args = ["search", str(index_dir), Q, "--unit", "answer", "--reader", str(reader_dir)]
    r = runner.invoke(app, [*args, "--read", "2", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert rows and all(0 <= x["confidence"] <= 1 for x in rows)
    r = runner.invoke(app, [*args, "--read", "2", "--min-confidence", "1"])
    assert r.exit_code == 0, r.output
    assert "not found in these documents" in r.stdout and "Denver Broncos" in r.stdout
    r = runner.invoke(app, [*args, "--read", "2", "--min-confidence", "1", "--json"])
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert rows and all(x["unit"] == "passage" and x["confidence"] is not None for x in rows)


def test_server_mcp_and_langchain_carry_confidence(setup: tuple[Path, Path, Path]) -> None:
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")
    from fastapi.testclient import TestClient

    from anygrain.serve.app import create_app
    from anygrain.serve.service import SearchService

    index_dir, reader_dir, plain = setup
    service = SearchService.load(index_dir, reader=str(reader_dir), read=2)
    client = TestClient(create_app(service, warm_up=False))
    r = client.get("/search", params={"q": Q, "unit": "answer", "k": 1})
    assert r.status_code == 200, r.text
    assert 0 <= r.json()["hits"][0]["confidence"] <= 1
    r = client.get("/search", params={"q": Q, "unit": "answer", "k": 1, "min_confidence": 1})
    hits = r.json()["hits"]
    assert r.status_code == 200 and hits and all(h["unit"] == "passage" for h in hits)
    r = client.post("/search", json={"questions": [Q], "unit": "answer", "min_confidence": 0})
    assert r.json()["results"][0]["hits"][0]["unit"] == "answer"
    r = client.get("/search", params={"q": Q, "unit": "passage", "min_confidence": 0.5})
    assert r.status_code == 422 and "answer grain" in r.text
    bare = TestClient(create_app(SearchService.load(index_dir, reader=str(plain)), warm_up=False))
    r = bare.get("/search", params={"q": Q, "unit": "answer", "min_confidence": 0.5})
    assert r.status_code == 422 and "no confidence calibration" in r.text

    lc = pytest.importorskip("anygrain.integrations.langchain")
    doc = lc.AnygrainRetriever(index=service, unit="answer", k=1).invoke(Q)[0]
    assert 0 <= doc.metadata["confidence"] <= 1

    pytest.importorskip("mcp")
    from test_integrations_mcp import _structured, connect, run

    from anygrain.integrations.mcp import create_server

    server = create_server(service)

    async def go() -> tuple[object, object]:
        async with connect(server) as c:
            args = {"query": Q, "k": 1, "unit": "answer", "format": "full"}
            return (
                await c.call_tool("search", args),
                await c.call_tool("search", {**args, "min_confidence": 1}),
            )

    answered, abstained = run(go())
    assert 0 <= _structured(answered)["hits"][0]["confidence"] <= 1
    hits = _structured(abstained)["hits"]
    assert hits and all(h["unit"] == "passage" for h in hits)
