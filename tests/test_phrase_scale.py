"""bench/phrase_scale.py on tiny corpora: rows per corpus and system, the cost of the larger
corpus, a BM25 build measured in a child process, and a rerun served from the row cache."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest
from test_phrase_helpers import PARAGRAPHS, write_squad

from anygrain.phrase import PhraseIndex

pytestmark = pytest.mark.usefixtures("torch_one_thread")

BENCH = Path(__file__).resolve().parents[1] / "bench"
OTHER = [
    (
        "Lighthouse",
        "The lighthouse on the cape was lit in 1851 and guided ships past the reef.",
        [("When was the lighthouse lit?", "1851")],
    ),
    (
        "Orchard",
        "The orchard grows apples and pears, harvested every autumn by the village.",
        [("What does the orchard grow?", "apples and pears")],
    ),
]


def _load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its bench/ neighbours
    return importlib.import_module("phrase_scale")


def test_scale_rows_cost_and_resume(
    tmp_path: Path,
    model_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = _load(monkeypatch)
    dev = write_squad(tmp_path / "dev.json", PARAGRAPHS[:3])  # English: 3 passages, 6 questions
    other = write_squad(tmp_path / "other.json", OTHER)
    n_dev = 3
    monkeypatch.setattr(
        mod, "CORPORA", {"scale": ([dev, other], n_dev + len(OTHER)), "dev": ([dev], n_dev)}
    )
    work = tmp_path / "work"
    phrase = {}
    for corpus in ("scale", "dev"):  # the phrase indexes given, over the bench's own corpora
        source, n = mod.corpus_file(work / corpus, corpus, None)
        assert n == mod.CORPORA[corpus][1]
        phrase[corpus] = PhraseIndex.build_from(
            f"squad:{source}", tmp_path / f"phrase-{corpus}", model=model_dir, keep=1.0,
            compress="none", progress=False,
        ).path  # fmt: skip
    argv = ["--work", str(work), "--questions", f"squad:{dev}", "--systems", "phrase,bm25"]
    argv += ["--phrase-index", str(phrase["scale"]), "--dev-phrase-index", str(phrase["dev"])]
    argv += ["--phrase-search-options", "{}", "--phrase-search-options", '{"rescore": 1}']
    argv += ["--shuffle", "0", "--out", str(tmp_path / "out.json")]
    report = mod.main(argv)
    assert json.loads(capsys.readouterr().out) == json.loads((tmp_path / "out.json").read_text())
    rows = report["rows"]
    assert [(r["corpus"], r["system"], r["search_options"]) for r in rows] == [
        ("scale", "phrase", {}),
        ("scale", "phrase", {"rescore": 1}),
        ("scale", "bm25", {}),
        ("dev", "phrase", {}),
        ("dev", "phrase", {"rescore": 1}),
        ("dev", "bm25", {}),
    ]
    for r in rows:
        assert r["passages"] == mod.CORPORA[r["corpus"]][1]
        assert r["n_questions"] == 6 and 0 <= r["top@1"] <= r["top@5"] <= r["top@20"] <= 1
        assert r["kb_per_passage"] > 0 and r["corpus_store_kb_per_passage"] > 0
        if r["system"] == "phrase":
            assert r["build"] is None and 0 <= r["em"] <= r["f1"] <= 100 and r["cpu_qps"] > 0
            assert r["kb_per_passage_bm25"] > 0 and r["kb_per_passage_phrase"] > 0
        else:  # built here, in a child process: its own peak, not this process's
            assert 0 < r["build"]["peak_rss_mb"] < 1000 and r["build"]["wall_seconds"] > 0
    # BM25 finds every dev answer among the dev paragraphs (top@20 holds them all)
    assert rows[5]["top@20"] == 1.0
    cost = {(c["system"], json.dumps(c["search_options"])): c for c in report["cost_of_scale"]}
    assert set(cost) == {("phrase", "{}"), ("phrase", '{"rescore": 1}'), ("bm25", "{}")}
    assert cost[("bm25", "{}")]["passages"] == [n_dev, n_dev + len(OTHER)]
    assert cost[("bm25", "{}")]["top@1"] == round(rows[2]["top@1"] - rows[5]["top@1"], 4)

    # a rerun searches nothing: every row comes from --work
    def searched(*args: object, **kw: object) -> None:
        raise AssertionError("a cached row was evaluated again")

    monkeypatch.setattr(mod, "evaluate_row", searched)
    again = mod.main(argv)
    capsys.readouterr()
    assert again["rows"] == rows


def test_scale_refuses_bad_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load(monkeypatch)
    with pytest.raises(SystemExit, match="give a JSON object"):
        mod.main(["--work", str(tmp_path), "--phrase-search-options", "[1]"])
    with pytest.raises(SystemExit):
        mod.main(["--work", str(tmp_path), "--systems", "colbert"])
