"""The CLI's options around the core commands: --version, --json summaries on stdout,
--threads, --question-file, hybrid --from and fusion options, the model and files reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder
from typer.testing import CliRunner

from anygrain import __version__
from anygrain.cli.main import app
from anygrain.corpus.splitters import SPLIT_FORMS, SplitKind
from anygrain.dense import build as dense_build
from anygrain.dense import opening as dense_opening
from anygrain.errors import AnygrainError
from anygrain.models.biencoder import BiEncoder

runner = CliRunner()


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    """--threads changes process-wide pools; other tests keep their own setting."""
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model") / "tiny"
    with single_threaded():
        tiny_biencoder(seed=3).save(d)
    return d


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"anygrain {__version__}"


def test_index_help_lists_every_split_form() -> None:
    assert set(SPLIT_FORMS) == set(SplitKind)  # a new kind must say how it is written
    r = runner.invoke(app, ["index", "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    for form, _ in SPLIT_FORMS.values():
        assert form in r.stdout, form
    assert "wN" in r.stdout and "w100" in r.stdout


def test_index_summary_on_stdout_and_as_json(squad_file: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["index", str(squad_file), "--out", str(tmp_path / "a"), "-q"])
    assert r.exit_code == 0, r.output
    assert "indexed 6 passages from 3 documents (squad) as bm25" in r.stdout
    assert "indexed" not in r.stderr
    r = runner.invoke(app, ["index", str(squad_file), "--out", str(tmp_path / "b"), "-q", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kind"] == "bm25" and d["n_passages"] == 6 and d["n_documents"] == 3
    assert d["source_format"] == "squad" and d["out"] == str(tmp_path / "b")


def test_index_reports_files_of_a_mixed_directory(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "a.txt").write_text("Cats sit on mats.\n", encoding="utf-8")
    (root / "b.jsonl").write_text('{"id": "x", "text": "A JSONL document."}\n', encoding="utf-8")
    r = runner.invoke(app, ["index", str(root), "--out", str(tmp_path / "i")])
    assert r.exit_code == 0, r.output
    assert f"read {root / 'a.txt'}" in r.stderr
    assert f"skipped {root / 'b.jsonl'}: not a .txt file" in r.stderr
    r = runner.invoke(app, ["index", str(root), "--out", str(tmp_path / "j"), "-q", "--json"])
    files = json.loads(r.stdout)["files"]
    assert files["read"] == [str(root / "a.txt")]
    assert files["skipped"][0]["path"] == str(root / "b.jsonl")


def test_search_question_from_file_or_stdin(squad_file: Path, tmp_path: Path) -> None:
    idx = tmp_path / "i"
    assert runner.invoke(app, ["index", str(squad_file), "--out", str(idx), "-q"]).exit_code == 0
    long_q = "Who created Python? " + "filler " * 200_000  # ~1.4 MB: too long for an argument
    qf = tmp_path / "q.txt"
    qf.write_text(long_q, encoding="utf-8")
    r = runner.invoke(app, ["search", str(idx), "--question-file", str(qf), "-k", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["passage_id"] == "Python_(language)_0"
    r = runner.invoke(
        app,
        ["search", str(idx), "--question-file", "-", "-k", "1", "--json"],
        input="How long is the Great Wall?\n",
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["passage_id"].startswith("Great_Wall")
    r = runner.invoke(app, ["search", str(idx), "x", "--question-file", str(qf)])
    assert r.exit_code == 2 and "not both" in r.output
    r = runner.invoke(app, ["search", str(idx)])
    assert r.exit_code == 2 and "--question-file PATH (- for stdin)" in r.output
    r = runner.invoke(app, ["search", str(idx), "--question-file", "-"], input="  \n")
    assert r.exit_code == 2 and "the question is empty" in r.output
    # many lines are not one concatenated question: the error points to batch search
    many = tmp_path / "many.txt"
    many.write_text("Who created Python?\n\nHow long is the Great Wall?\n", encoding="utf-8")
    r = runner.invoke(app, ["search", str(idx), "--question-file", str(many)])
    assert r.exit_code == 2 and f"use --questions {many}" in " ".join(r.output.split())


def test_a_question_file_and_a_file_of_questions_are_read_alike(
    squad_file: Path, tmp_path: Path
) -> None:
    from anygrain.api import read_question_lines, read_text_file

    latin1 = tmp_path / "q.txt"
    latin1.write_bytes("Qui a créé Python ?\n".encode("latin-1"))
    for holding in ("a file holding the question", "a file of questions"):
        with pytest.raises(AnygrainError, match=f"is a directory; give {holding}$"):
            read_text_file(tmp_path, holding)
        with pytest.raises(AnygrainError, match=r"q.txt: not UTF-8 text \(byte 8\)"):
            read_text_file(latin1, holding)
    with pytest.raises(AnygrainError, match="is a directory; give a file of questions"):
        read_question_lines(tmp_path)
    good = tmp_path / "good.txt"
    good.write_text("Who?\n", encoding="utf-8")
    assert read_text_file(good, "x") == ("Who?\n", str(good))
    idx = tmp_path / "i"
    assert runner.invoke(app, ["index", str(squad_file), "--out", str(idx), "-q"]).exit_code == 0
    r = runner.invoke(app, ["search", str(idx), "--question-file", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory; give a file holding the question" in r.output
    r = runner.invoke(app, ["search", str(idx), "--question-file", str(latin1)])
    assert r.exit_code == 2 and "not UTF-8 text (byte 8)" in r.output


def test_batch_search_one_json_line_per_question(squad_file: Path, tmp_path: Path) -> None:
    from anygrain.api import search_questions

    idx = tmp_path / "i"
    assert runner.invoke(app, ["index", str(squad_file), "--out", str(idx), "-q"]).exit_code == 0
    lines = tmp_path / "qs.txt"
    lines.write_text("Who created Python?\n\nHow long is the Great Wall?\n", encoding="utf-8")
    r = runner.invoke(app, ["search", str(idx), "--questions", str(lines), "-k", "2"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(d["id"], d["question"]) for d in rows] == [
        ("1", "Who created Python?"),
        ("3", "How long is the Great Wall?"),  # ids are line numbers; blank lines skipped
    ]
    assert len(rows[0]["hits"]) == 2 and rows[0]["hits"][0]["passage_id"] == "Python_(language)_0"
    assert rows[1]["hits"][0]["passage_id"].startswith("Great_Wall")
    assert "searching" in r.stderr  # the progress bar, on stderr
    # a question file in any format: FORMAT:PATH, ids from the file
    r = runner.invoke(app, ["search", str(idx), "--questions", f"squad:{squad_file}", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == 8 and all(len(d["hits"]) == 10 or d["hits"] for d in rows)
    assert "searching" not in r.stderr
    r = runner.invoke(app, ["search", str(idx), "--questions", "-", "-q"], input="Who?\nWhy?\n")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 2, r.output
    r = runner.invoke(app, ["search", str(idx), "x", "--questions", str(lines)])
    assert r.exit_code == 2 and "not both" in r.output
    r = runner.invoke(app, ["search", str(idx), "--questions", "-"], input="\n  \n")
    assert r.exit_code == 2 and "holds no question" in r.output
    # the library call behind it streams one result per question, in order
    got = list(search_questions(idx, ["Who created Python?", "Why?"], 1))
    assert [g.id for g in got] == ["1", "2"] and len(got[0].hits) == 1


def test_threads_option_sets_torch_and_faiss(squad_file: Path, tmp_path: Path) -> None:
    idx = tmp_path / "i"
    torch.set_num_threads(2)
    faiss.omp_set_num_threads(2)
    r = runner.invoke(app, ["index", str(squad_file), "--out", str(idx), "-q", "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert torch.get_num_threads() == 1 and faiss.omp_get_max_threads() == 1
    torch.set_num_threads(2)
    r = runner.invoke(app, ["search", str(idx), "Who created Python?", "--threads", "1"])
    assert r.exit_code == 0 and torch.get_num_threads() == 1
    torch.set_num_threads(2)
    r = runner.invoke(
        app, ["eval", str(idx), "--questions", f"squad:{squad_file}", "--threads", "1", "-q"]
    )
    assert r.exit_code == 0 and torch.get_num_threads() == 1
    r = runner.invoke(app, ["search", str(idx), "Who?", "--threads", "0"])
    assert r.exit_code == 2 and "threads must be at least 1" in r.output


def test_eval_json_keeps_its_progress_bar_on_stderr(squad_file: Path, tmp_path: Path) -> None:
    idx = tmp_path / "i"
    assert runner.invoke(app, ["index", str(squad_file), "--out", str(idx), "-q"]).exit_code == 0
    r = runner.invoke(app, ["eval", str(idx), "--questions", f"squad:{squad_file}", "--json"])
    assert r.exit_code == 0, r.output
    assert "evaluating" in r.stderr and "8/8" in r.stderr
    assert json.loads(r.stdout)["n_questions"] == 8  # stdout stays one JSON object
    r = runner.invoke(app, ["eval", str(idx), "--questions", f"squad:{squad_file}", "--json", "-q"])
    assert "evaluating" not in r.stderr


def test_hybrid_from_existing_indexes(
    squad_file: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    bm25, dense, hyb = tmp_path / "bm25", tmp_path / "dense", tmp_path / "hyb"
    r = runner.invoke(app, ["index", str(squad_file), "--out", str(bm25), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["index", str(squad_file), "--kind", "dense", "--model", str(tiny_model_dir),
         "--out", str(dense), "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"as dense with model {tiny_model_dir} →" in r.stdout
    r = runner.invoke(
        app,
        ["index", "--kind", "hybrid", "--from", str(dense), "--from", str(bm25),
         "--out", str(hyb), "--fusion", "rrf", "--fusion-depth", "20", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["fusion"] == {"method": "rrf", "weight": None, "depth": 20}
    assert d["components"]["sparse"]["path"] == "../bm25"
    assert d["components"]["dense"]["path"] == "../dense"
    assert d["model"] == str(tiny_model_dir)
    r = runner.invoke(
        app,
        ["index", "--kind", "hybrid", "--from", str(bm25), "--from", str(dense),
         "--out", str(tmp_path / "hyb2")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"combined {bm25} and {dense} (6 passages) as hybrid with model {tiny_model_dir}" in (
        r.stdout
    )
    r = runner.invoke(
        app, ["search", str(hyb), "Who created Python?", "--fusion", "zscore", "--json"]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["eval", str(hyb), "--questions", f"squad:{squad_file}", "--fusion-weight", "0.5",
         "--metrics", "top@5", "--json", "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    # built in one go, the fusion options are recorded the same way
    r = runner.invoke(
        app,
        ["index", str(squad_file), "--kind", "hybrid", "--model", str(tiny_model_dir),
         "--out", str(tmp_path / "built"), "--fusion", "minmax", "--fusion-weight", "0.3",
         "--json", "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fusion"] == {"method": "minmax", "weight": 0.3, "depth": 100}
    # refused: fusion options on another kind, --from without hybrid or with one index
    r = runner.invoke(app, ["search", str(bm25), "Who?", "--fusion", "rrf"])
    assert r.exit_code == 2 and "option 'fusion' needs a hybrid index, not bm25" in r.output
    r = runner.invoke(
        app, ["index", str(squad_file), "--out", str(tmp_path / "x"), "--fusion", "rrf"]
    )
    assert r.exit_code == 2 and "index kind 'bm25' does not take the option 'fusion'" in r.output
    r = runner.invoke(app, ["index", "--from", str(bm25), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--from needs --kind hybrid" in r.output
    r = runner.invoke(
        app, ["index", "--kind", "hybrid", "--from", str(bm25), "--out", str(tmp_path / "x")]
    )
    assert r.exit_code == 2 and "exactly two index directories" in r.output
    r = runner.invoke(
        app,
        ["index", "--kind", "hybrid", "--from", str(bm25), "--from", str(bm25),
         "--out", str(tmp_path / "x")],
    )  # fmt: skip
    assert r.exit_code == 2 and "one bm25 and one dense index" in r.output


def test_hybrid_from_indexes_over_other_corpora_is_refused(
    squad_file: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    other = tmp_path / "other.txt"
    other.write_text("Another corpus entirely.\n", encoding="utf-8")
    assert (
        runner.invoke(app, ["index", str(other), "--out", str(tmp_path / "b"), "-q"]).exit_code == 0
    )
    r = runner.invoke(
        app,
        ["index", str(squad_file), "--kind", "dense", "--model", str(tiny_model_dir),
         "--out", str(tmp_path / "d"), "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["index", "--kind", "hybrid", "--from", str(tmp_path / "b"), "--from",
         str(tmp_path / "d"), "--out", str(tmp_path / "h")],
    )  # fmt: skip
    assert r.exit_code == 2 and "built over different corpora" in r.output
    assert not (tmp_path / "h").exists()


def test_dense_index_on_chinese_says_which_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen: list[str] = []

    def fake(name):  # type: ignore[no-untyped-def]
        if isinstance(name, BiEncoder):
            return name
        chosen.append(str(name))
        return tiny_biencoder(seed=1)  # only the choice is under test, not me5's vectors

    monkeypatch.setattr(dense_build, "as_biencoder", fake)
    monkeypatch.setattr(dense_opening, "as_biencoder", fake)
    src = tmp_path / "zh.txt"
    src.write_text("北京是中国的首都。\n\n上海是中国最大的城市。\n", encoding="utf-8")
    r = runner.invoke(app, ["index", str(src), "--kind", "dense", "--out", str(tmp_path / "i")])
    assert r.exit_code == 0, r.output
    assert chosen == ["me5-small"] * 2  # to encode, then to open: the index refers to it
    assert "as dense with model me5-small →" in r.stdout
    assert "encoding passages with me5-small" in r.stderr


def test_library_threads_parameter(squad_file: Path, tmp_path: Path) -> None:
    """The library takes ``threads=`` (it reads no environment variable itself)."""
    from anygrain.api import build_index, evaluate_index, search_index
    from anygrain.errors import AnygrainError
    from anygrain.utils.threads import set_threads

    torch.set_num_threads(2)
    faiss.omp_set_num_threads(2)
    set_threads(None)  # leaves the defaults alone
    assert torch.get_num_threads() == 2 and faiss.omp_get_max_threads() == 2
    idx = build_index(
        f"squad:{squad_file}", kind="bm25", out=tmp_path / "i", progress=False, threads=1
    )
    assert torch.get_num_threads() == 1 and faiss.omp_get_max_threads() == 1
    torch.set_num_threads(2)
    search_index(idx, ["Who created Python?"], threads=1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    evaluate_index(idx, f"squad:{squad_file}", progress=False, threads=1)
    assert torch.get_num_threads() == 1
    with pytest.raises(AnygrainError, match="threads must be at least 1"):
        set_threads(0)


def test_question_batch_size_default_and_option(
    squad_file: Path, tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dense question batch defaults to the measured best (32, not 256) and
    --batch-size sets it for search (one question or a batch) and eval."""
    import inspect

    from anygrain.dense.index import QUESTION_BATCH, DenseIndex

    assert QUESTION_BATCH == 32
    for f in (DenseIndex.search, DenseIndex.search_rows, DenseIndex.encode_queries):
        assert inspect.signature(f).parameters["batch_size"].default == QUESTION_BATCH
    dense, bm25 = tmp_path / "dense", tmp_path / "bm25"
    r = runner.invoke(
        app,
        ["index", str(squad_file), "--kind", "dense", "--model", str(tiny_model_dir)]
        + ["--out", str(dense), "-q"],
    )
    assert r.exit_code == 0, r.output
    seen: list[int] = []
    encode = DenseIndex.encode_queries

    def spy(self: DenseIndex, queries: Any, *, batch_size: int = QUESTION_BATCH) -> Any:
        seen.append(batch_size)
        return encode(self, queries, batch_size=batch_size)

    monkeypatch.setattr(DenseIndex, "encode_queries", spy)
    assert runner.invoke(app, ["search", str(dense), "Who?"]).exit_code == 0
    assert seen == [QUESTION_BATCH]
    seen.clear()
    r = runner.invoke(app, ["search", str(dense), "Who?", "--batch-size", "3", "--json"])
    assert r.exit_code == 0 and seen == [3], r.output
    seen.clear()
    r = runner.invoke(
        app, ["eval", str(dense), "--questions", f"squad:{squad_file}", "--batch-size", "3", "-q"]
    )
    assert r.exit_code == 0 and seen == [3, 3, 3], r.output  # 8 questions, 3 at a time
    seen.clear()
    r = runner.invoke(
        app,
        ["search", str(dense), "--questions", "-", "--batch-size", "2", "-q"],
        input="A\nB\nC\n",
    )
    assert r.exit_code == 0 and seen == [2, 2], r.output
    r = runner.invoke(app, ["search", str(dense), "Who?", "--batch-size", "0"])
    assert r.exit_code == 2 and "--batch-size must be at least 1" in r.output
    assert runner.invoke(app, ["index", str(squad_file), "--out", str(bm25), "-q"]).exit_code == 0
    r = runner.invoke(app, ["search", str(bm25), "Who?", "--batch-size", "8"])
    msg = " ".join(r.output.split())
    assert (
        r.exit_code == 2 and "'batch_size' needs a dense, hybrid or phrase index, not bm25" in msg
    )
