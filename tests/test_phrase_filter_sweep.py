"""bench/phrase_filter_sweep.py on a tiny fixture index: JSON per threshold and a PNG plot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
from test_phrase_helpers import make_tiny_model, write_squad

from anygrain.phrase import PhraseEncoder, PhraseIndex

pytestmark = pytest.mark.usefixtures("torch_one_thread")

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "phrase_filter_sweep.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("phrase_filter_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_writes_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    squad = write_squad(tmp_path / "tiny.json")
    tiny = make_tiny_model(tmp_path / "tiny-bert")
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    with torch.no_grad():  # a filter that separates tokens, so thresholds bite
        m.filter.weight.normal_(0.0, 0.5)
    model_dir = m.save(tmp_path / "m")
    src = PhraseIndex.build_from(
        f"squad:{squad}", tmp_path / "idx", model=model_dir, compress="none", keep=1.0
    )
    png, js = tmp_path / "out" / "sweep.png", tmp_path / "sweep.json"
    argv = [str(src.path), "--questions", f"squad:{squad}", "--work", str(tmp_path / "w")]
    argv += ["--keep", "1,0.4", "--compress", "none,sq8", "--plot", str(png), "--out", str(js)]
    # a "tuned" question encoder for the sq8 points: here the model itself, so the same scores
    argv += ["--qat-model", str(model_dir), "--qat-compress", "sq8"]
    result = _load().main(argv)
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(js.read_text()) == json.loads(json.dumps(result))
    pts = result["points"]
    assert [(p["setting"], p["compress"]) for p in pts] == [
        ("keep=1", "none"),
        ("keep=0.4", "none"),
        ("keep=1", "sq8"),
        ("keep=1", "sq8+qat"),
        ("keep=0.4", "sq8"),
        ("keep=0.4", "sq8+qat"),
    ]
    for base, tuned in ((pts[2], pts[3]), (pts[4], pts[5])):
        assert tuned["question_encoder"] == str(model_dir) and "question_encoder" not in base
        assert tuned["phrase"] == base["phrase"] and tuned["passage"] == base["passage"]
    for p in pts:
        assert 0 <= p["passage"]["top@5"] <= 1 and 0 <= p["phrase"]["em"] <= 1
        assert set(p["phrase"]) == {"em", "f1"} and p["unit_search"]["queries"] > 0
    assert pts[1]["vectors_per_passage"] < pts[0]["vectors_per_passage"]
    assert pts[1]["bytes_per_passage"] < pts[0]["bytes_per_passage"]
    assert pts[2]["bytes_per_passage"] < pts[0]["bytes_per_passage"]  # sq8, no dump
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
