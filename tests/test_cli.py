"""The CLI end to end on fixtures the tests write: index, search, eval, formats, demo, errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from anygrain.cli.main import app

runner = CliRunner()


def test_index_search_eval(squad_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    r = runner.invoke(app, ["index", str(squad_file), "--kind", "bm25", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert (out / "index.json").exists()

    r = runner.invoke(app, ["search", str(out), "Who created Python?", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    first = json.loads(r.stdout.splitlines()[0])
    assert first["passage_id"] == "Python_(language)_0" and first["unit"] == "passage"
    # one hit shape for the CLI and the server (Hit.to_json)
    from anygrain.serve.schemas import HitOut

    assert set(first) == set(HitOut.model_fields) and first["rank"] == 1
    assert first["before"] == first["text"] and first["answer"] == "" and first["span"] is None

    run = tmp_path / "run.trec"
    r = runner.invoke(
        app,
        [
            "eval",
            str(out),
            "--questions",
            f"squad:{squad_file}",
            "--metrics",
            "top@1,top@5,mrr@5",
            "--json",
            "--run-out",
            str(run),
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["n_questions"] == 8
    assert set(d["metrics"]) == {"top@1", "top@5", "mrr@5"}
    assert d["metrics"]["top@5"] >= d["metrics"]["top@1"] > 0.5
    assert run.read_text().count("\n") >= 8

    # Options that only phrase (or dense) indexes take are refused with the reason.
    r = runner.invoke(app, ["search", str(out), "Who created Python?", "--unit", "phrase"])
    assert r.exit_code == 2 and "needs a phrase index" in r.output
    r = runner.invoke(app, ["search", str(out), "Who created Python?", "--model", "minilm"])
    assert r.exit_code == 2 and "option 'model' needs a dense, hybrid or phrase index" in r.output


def test_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"title": "T", "paragraphs": [{"context": "", "qas": []}]}]}')
    r = runner.invoke(app, ["index", f"squad:{bad}", "--out", str(tmp_path / "x"), "-q"])
    assert r.exit_code == 2
    assert "bad.json" in r.output and "data[0].paragraphs[0].context" in r.output
    assert "Traceback" not in r.output

    r = runner.invoke(app, ["search", str(tmp_path / "nope"), "q"])
    assert r.exit_code == 2 and "not an anygrain index" in r.output

    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"title": "T",\n   "paragraphs": [ }\n]}')
    r = runner.invoke(app, ["index", f"squad:{broken}", "--out", str(tmp_path / "y"), "-q"])
    assert r.exit_code == 2 and "broken.json, line 3" in r.output and "invalid JSON" in r.output


def test_skip_policy_counts(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "title": "T",
                        "paragraphs": [
                            {"context": "", "qas": []},
                            {"context": "Good text here.", "qas": []},
                        ],
                    }
                ]
            }
        )
    )
    r = runner.invoke(
        app, ["index", f"squad:{f}", "--out", str(tmp_path / "x"), "-q", "--on-error", "skip"]
    )
    assert r.exit_code == 0, r.output
    assert "skipped 1 malformed record" in r.output and "indexed 1 passages" in r.output


def test_unknown_format_and_metric(squad_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    runner.invoke(app, ["index", str(squad_file), "--out", str(out), "-q"])
    r = runner.invoke(app, ["eval", str(out), "--questions", str(squad_file), "--metrics", "top@x"])
    assert r.exit_code == 2 and "top@x" in r.output
    r = runner.invoke(app, ["formats"])
    assert r.exit_code == 0 and "squad" in r.output


def test_demo_offline(tmp_path: Path) -> None:
    r = runner.invoke(app, ["demo", "--kind", "bm25", "--out", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert last["n_questions"] == 10 and last["kind"] == "bm25"
    assert last["metrics"]["top@5"] >= 0.5  # BM25 on the Python reference finds most answers


def test_phrase_demo_answers_at_three_grains_and_reuses_its_index(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--max-documents", "4", "-q"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert last["kind"] == "phrase" and not last["reused_index"]
    assert {"em", "f1", "top@1"} <= set(last["metrics"])
    for unit in ("phrase", "sentence", "passage"):
        assert f"   {unit}" in r.stdout
    again = runner.invoke(app, args)
    assert (
        again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["reused_index"]
    )
    # a directory the demo did not write is refused and left as it was
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    r = runner.invoke(app, ["demo", "--out", str(other), "--max-documents", "2", "-q"])
    assert r.exit_code != 0 and "not this demo" in r.output
    assert (other / "notes.txt").read_text() == "keep me"
