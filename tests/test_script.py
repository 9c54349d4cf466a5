"""Traditional <-> Simplified conversion keeps answer offsets (`anygrain convert-script`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.corpus.formats import parse_source
from anygrain.corpus.script import Script, convert_squad_file, converter
from anygrain.errors import AnygrainError, ErrorLog, InputError

pytest.importorskip("opencc")

CONTEXT = "臺灣的資訊科技產業發達，軟體工程師眾多。"


def _squad(path: Path, context: str = CONTEXT) -> Path:
    answer = "資訊科技"
    path.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "title": "臺灣",
                        "paragraphs": [
                            {
                                "context": context,
                                "qas": [
                                    {
                                        "id": "q1",
                                        "question": "臺灣哪個產業發達？",
                                        "answers": [
                                            {"text": answer, "answer_start": context.index(answer)}
                                        ],
                                    }
                                ],
                            }
                        ],
                    }
                ]
            },
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    return path


def test_conversion_keeps_length_and_round_trips_common_text() -> None:
    to_s, to_t = converter(Script.SIMPLIFIED), converter(Script.TRADITIONAL)
    s = to_s(CONTEXT)
    assert s == "台湾的资讯科技产业发达，软体工程师众多。" and len(s) == len(CONTEXT)
    assert to_t(s) == "臺灣的資訊科技產業發達，軟體工程師衆多。"  # 衆: OpenCC's standard form


def test_converted_file_keeps_every_answer_at_its_offset(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    rep = convert_squad_file(_squad(tmp_path / "t.json"), out, Script.SIMPLIFIED)
    assert (rep.paragraphs, rep.questions, rep.answers) == (1, 1, 1)
    assert rep.changed_characters > 0
    qs = list(parse_source(f"squad:{out}").questions(ErrorLog()))
    assert qs[0].text == "台湾哪个产业发达？" and qs[0].answers == ["资讯科技"]
    para = json.loads(out.read_text(encoding="utf-8"))["data"][0]["paragraphs"][0]
    ans = para["qas"][0]["answers"][0]
    assert para["context"][ans["answer_start"] :].startswith(ans["text"])


def test_bad_input_is_named_and_the_source_is_never_replaced(tmp_path: Path) -> None:
    src = _squad(tmp_path / "t.json")
    with pytest.raises(AnygrainError, match="would replace it"):
        convert_squad_file(src, src, Script.SIMPLIFIED)
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1}', encoding="utf-8")
    with pytest.raises(InputError, match="not a SQuAD-format file"):
        convert_squad_file(bad, tmp_path / "o.json", Script.SIMPLIFIED)
    assert not (tmp_path / "o.json").exists()


def test_cli_convert_script(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = CliRunner().invoke(
        app, ["convert-script", str(_squad(tmp_path / "t.json")), str(out), "--to", "simplified"]
    )
    assert res.exit_code == 0, res.output
    assert "1 questions" in res.output and out.exists()
