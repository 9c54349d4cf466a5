"""Every option of the answer-grain commands does what it says or is refused in one line
naming it: ``eval --unit answer``, ``-k``/``--at``/``--limit`` out of range, what the
gold-passage setting cannot use, ``--runtime`` on a BM25 index (the reader's), the defaults the
help texts and docs state, and ``eval-reader``'s progress and the record of what it read."""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from anygrain.api import build_index, evaluate_index, evaluate_reader
from anygrain.cli.main import app
from anygrain.errors import AnygrainError, UsageError

pytestmark = pytest.mark.usefixtures("torch_one_thread")

runner = CliRunner()
READER = "reader-minilm"  # shipped: no training, no hub


@pytest.fixture(scope="module")
def bm25(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "bm25"
    build_index(f"squad:{squad}", kind="bm25", out=out, progress=False)
    return out


def _refused(args: list[str], *names: str) -> str:
    """Run ``anygrain ARGS``: exit 2 with one error line naming each of ``names``."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.output
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_eval_unit_answer_is_refused_pointing_to_eval_reader(bm25: Path, squad: Path) -> None:
    line = _refused(["eval", str(bm25), "--questions", f"squad:{squad}", "--unit", "answer"])
    assert "--unit answer" in line and "eval-reader" in line
    with pytest.raises(UsageError, match="evaluate_reader"):
        evaluate_index(bm25, f"squad:{squad}", unit="answer", progress=False)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["-k", "0"], ["-k"]),
        (["-k", "-2"], ["-k"]),
        (["-k", "101"], ["-k"]),
        (["-k", "3", "--at", "0"], ["--at", "0"]),
        (["-k", "3", "--at", "1,5"], ["--at", "5", "3"]),
        (["-k", "3", "--at", "x"], ["--at", "x"]),
        (["--at", "1,-2"], ["--at", "-2"]),
        (["--at", ","], ["--at"]),
        (["--limit", "0"], ["--limit"]),
        (["--corpus", "elsewhere"], ["--corpus", "--gold-passage"]),
        (["--gold-passage", "-k", "3"], ["-k", "--gold-passage"]),
        (["--gold-passage", "--at", "1"], ["--at", "--gold-passage"]),
        (["--gold-passage", "--retriever-weight", "2"], ["--retriever-weight"]),
    ],
)
def test_eval_reader_refuses_counts_by_name(
    bm25: Path, squad: Path, args: list[str], names: list[str]
) -> None:
    _refused(["eval-reader", str(bm25), "--questions", f"squad:{squad}", *args], *names)


def test_k_and_limit_are_refused_by_name_elsewhere(bm25: Path, squad: Path) -> None:
    q = f"squad:{squad}"
    _refused(["eval", str(bm25), "--questions", q, "-k", "0"], "-k")
    _refused(["eval", str(bm25), "--questions", q, "--limit", "0"], "--limit")
    _refused(["search", str(bm25), "Who created Python?", "-k", "0"], "-k")
    _refused(["search", str(bm25), "--questions", q, "-k", "-1"], "-k")
    _refused(["search", str(bm25), "Who created Python?", "--read", "101"], "--read")
    _refused(["ask", str(bm25), "Who created Python?", "--reader", READER, "-k", "0"], "-k")


def test_evaluate_reader_api_refuses_counts(bm25: Path, squad: Path) -> None:
    q = f"squad:{squad}"
    with pytest.raises(AnygrainError, match="-k"):
        evaluate_reader(q, READER, bm25, k=0, progress=False)
    with pytest.raises(AnygrainError, match="--at"):
        evaluate_reader(q, READER, bm25, k=3, at=[4], progress=False)
    with pytest.raises(AnygrainError, match="--at"):
        evaluate_reader(q, READER, bm25, gold_passage=True, at=[1], progress=False)


def _recorded_runtimes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The runtime each reader load is asked for (the loaded-reader cache emptied)."""
    from anygrain.reader import answering, onnx

    seen: list[Any] = []
    real = onnx.load_reader

    def load(path: Any, runtime: Any = None, **kw: Any) -> Any:
        seen.append(getattr(runtime, "value", runtime))
        return real(path, runtime, **kw)

    monkeypatch.setattr(onnx, "load_reader", load)
    monkeypatch.setattr(answering, "_LOADED", {})
    return seen


def test_search_runtime_reaches_the_reader_on_bm25(
    bm25: Path, squad: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _recorded_runtimes(monkeypatch)
    q = "Who created Python?"
    r = runner.invoke(app, ["search", str(bm25), q, "--read", "3", "--runtime", "onnx", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[0])["unit"] == "answer"
    assert seen == ["onnx"]
    r = runner.invoke(
        app,
        ["search", str(bm25), "--questions", f"squad:{squad}", "--unit", "answer",
         "--runtime", "torch", "-k", "1", "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert seen == ["onnx", "torch"]
    # without reading, a BM25 index has nothing for --runtime to run: still refused
    _refused(["search", str(bm25), q, "--runtime", "onnx"], "runtime")


def test_serve_runtime_reaches_the_reader_on_bm25(
    bm25: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anygrain.serve.service import SearchService

    seen = _recorded_runtimes(monkeypatch)
    svc = SearchService.load(bm25, runtime="onnx", reader=READER)
    assert svc.reader().runtime == "onnx" and seen == ["onnx"]
    with pytest.raises(UsageError, match="device"):  # only the runtime is the reader's
        SearchService.load(bm25, device="cpu")


def _option_help(command: Any, name: str) -> str:
    info = typing.get_args(inspect.signature(command, eval_str=True).parameters[name].annotation)[1]
    return str(info.help)


def _stated_default(text: str) -> str:
    m = re.search(r"default:? `?([0-9.]+)`?", text)
    assert m, text
    return m.group(1)


def test_help_and_docs_state_the_real_defaults() -> None:
    from anygrain.cli.eval import READ_K, eval_reader_cmd
    from anygrain.cli.mcp import mcp_cmd
    from anygrain.cli.search import MAX_READ, search_cmd
    from anygrain.cli.serve import serve_cmd
    from anygrain.reader.answering import DEFAULT_PASSAGES, DEFAULT_RETRIEVER_WEIGHT, MAX_PASSAGES

    assert MAX_READ == MAX_PASSAGES
    for command in (serve_cmd, mcp_cmd, search_cmd):
        text = _option_help(command, "read")
        assert _stated_default(text) == str(DEFAULT_PASSAGES), (command.__name__, text)
        assert f"1 to {MAX_PASSAGES}" in text
    for command in (search_cmd, eval_reader_cmd):
        text = _option_help(command, "retriever_weight")
        assert float(_stated_default(text)) == DEFAULT_RETRIEVER_WEIGHT
    assert _stated_default(_option_help(eval_reader_cmd, "k")) == str(READ_K)
    docs = Path(__file__).resolve().parents[1] / "docs"
    serve_md = (docs / "serve.md").read_text(encoding="utf-8")
    row = next(x for x in serve_md.splitlines() if x.startswith("| `--read K` |"))
    assert row.split("|")[2].strip() == f"`{DEFAULT_PASSAGES}`", row
    cli_md = (docs / "cli.md").read_text(encoding="utf-8")
    assert f"`--read K` sets the passages read (default {DEFAULT_PASSAGES})" in cli_md
    assert f"(default {DEFAULT_RETRIEVER_WEIGHT:g})" in cli_md
    assert f"`-k` passages (1 to {MAX_PASSAGES}, default {READ_K})" in cli_md
    r = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert f"per question (1 to {MAX_PASSAGES}, default {DEFAULT_PASSAGES})" in r.stdout


def test_eval_reader_progress_per_batch_and_record(
    bm25: Path, squad: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anygrain.reader import evaluate as reader_eval

    monkeypatch.setattr(reader_eval, "RETRIEVE_BATCH", 3)
    monkeypatch.setattr(reader_eval, "READ_PASSAGES", 4)  # k=2: two questions a chunk
    events: list[tuple[str, int, int]] = []
    rep = evaluate_reader(
        f"squad:{squad}",
        READER,
        bm25,
        k=2,
        progress=False,
        runtime="torch",
        bf16=False,
        on_progress=lambda *e: events.append(e),
    )
    n = rep["n_evaluated"]
    assert n > 4
    retrieving = [d for s, d, t in events if s == "retrieving" and t == n]
    reading = [d for s, d, t in events if s == "reading" and t == n]
    assert retrieving == [min(i, n) for i in range(3, n + 3, 3)]
    assert reading == [min(i, n) for i in range(2, n + 2, 2)]
    assert [s for s, _, _ in events] == ["retrieving"] * len(retrieving) + ["reading"] * len(
        reading
    )
    packed = json.loads((Path(rep["reader"]["path"]) / "anygrain_packed_reader.json").read_text())
    assert (
        rep["reader"]["name"] == READER
        and rep["reader"]["fingerprint"] == packed["full_fingerprint"]
    )
    assert (rep["runtime"], rep["precision"]) == ("torch", "float32")
    assert rep["index"] == {"path": str(bm25), "kind": "bm25"}


def test_eval_reader_cli_records_onnx_and_gold_corpus(squad: Path) -> None:
    q = f"squad:{squad}"
    r = runner.invoke(
        app,
        ["eval-reader", "--questions", q, "--corpus", q, "--gold-passage", "--runtime", "onnx",
         "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["setting"] == "gold_passage" and rep["n_missing_gold"] == 0
    assert (rep["runtime"], rep["precision"]) == ("onnx", "float32")
    assert rep["reader"]["name"] == READER and rep["index"] is None and rep["corpus"] == q
    assert "reading" in r.stderr  # the bar, on stderr
    _refused(["eval-reader", "--questions", q, "--corpus", q, "--gold-passage", "--runtime",
              "onnx", "--bf16"], "--bf16")  # fmt: skip
