"""Reading less: a window around the phrase that found a passage, and the other passages
read only when the first one's answer is unsure (``ReadSettings.window`` and ``sure``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.models.shipped import SHIPPED
from anygrain.reader.answering import ReadSettings, answer_hits, how_much_to_read, span_candidates
from anygrain.reader.features import focus_windows, make_windows

FILLER = (
    "The league was founded in the early years of the century and grew across the country. "
    "Its teams play sixteen games each season, and the schedule is set every spring. "
)
BOWL = (
    FILLER
    * 3
    + "The American Football Conference (AFC) champion Denver Broncos defeated the National "
    "Football Conference (NFC) champion Carolina Panthers 24–10 to earn their third Super "
    "Bowl title. " + FILLER * 3
)
LOOP = (
    FILLER
    * 2
    + "The break statement, like in C, breaks out of the innermost enclosing for or while "
    "loop. " + FILLER * 2
)


@pytest.fixture(scope="module")
def shipped_reader() -> Any:
    if not SHIPPED["reader-minilm"].path.is_dir():
        pytest.skip("reader-minilm is not in this install")
    from anygrain.reader.onnx import load_reader

    return load_reader(SHIPPED["reader-minilm"].path, "auto")


def _hit(text: str, row: int, focus: tuple[int, int] | None, title: str = "") -> Hit:
    return Hit(Unit.PASSAGE, 1.0 - row, row, f"p{row}", f"d{row}", title, text, focus=focus)


def _span(text: str, phrase: str) -> tuple[int, int]:
    a = text.index(phrase)
    return (a, a + len(phrase))


def test_a_window_is_the_full_windows_tokens_around_its_focus(shipped_reader: Any) -> None:
    tok = shipped_reader.tokenizer
    focus = _span(BOWL, "Denver Broncos")
    full = make_windows(
        tok, ["Who won?"], [BOWL], max_length=256, max_question_length=64, stride=64
    )
    (cut,) = focus_windows(full, [focus], 64)
    assert len(cut) == 64 < len(full[0])
    # the same tokens, offsets and span boundaries as a stretch of the full window
    pos = np.nonzero(cut.passage)[0]
    offs = cut.offsets[pos]
    assert offs[0, 0] <= focus[0] and focus[1] <= offs[-1, 1]
    src = full[0]
    k = int(np.nonzero((src.offsets[:, 0] == offs[0, 0]) & src.passage)[0][0])
    stretch = slice(k, k + len(pos))
    assert cut.input_ids[pos[0] : pos[-1] + 1] == src.input_ids[stretch]
    assert (cut.start_ok[pos] == src.start_ok[stretch]).all()
    assert cut.input_ids[: pos[0]] == src.input_ids[: int(np.nonzero(src.passage)[0][0])]
    # a passage shorter than the window is read whole; a pair without a focus keeps its windows
    short = make_windows(
        tok, ["q"], ["Short text."], max_length=256, max_question_length=64, stride=64
    )
    assert focus_windows(short, [(0, 5)], 64)[0] is short[0]
    assert focus_windows(full, [None], 64) == full


@pytest.mark.parametrize("window", [64, 96, 128])
def test_the_window_reads_the_span_the_whole_passage_reads(
    shipped_reader: Any, window: int
) -> None:
    questions = ["Who defeated the Carolina Panthers?", "Which statement exits a loop?"]
    texts = [(BOWL, "Denver Broncos"), (LOOP, "break statement")]
    whole = ReadSettings(passages=1, window=None, bf16=False)
    cut = ReadSettings(passages=1, window=window, bf16=False)
    for q, (text, answer) in zip(questions, texts, strict=True):
        hits = [_hit(text, 0, _span(text, answer))]
        a = answer_hits(shipped_reader, [q], [hits], 1, whole)[0][0]
        b = answer_hits(shipped_reader, [q], [hits], 1, cut)[0][0]
        assert a.span == b.span and answer in a.answer_text


class CountingReader:
    """The shipped reader, counting the windows it reads and their longest length."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self.windows = 0
        self.longest = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def window_logits(self, batch: Any, bf16: bool = False) -> Any:
        self.windows += len(batch.input_ids)
        self.longest = max(self.longest, int(batch.input_ids.shape[1]))
        return self._reader.window_logits(batch, bf16)


def _three(focus: bool) -> list[Hit]:
    texts = [BOWL, LOOP, FILLER * 4]
    phrases = ["Denver Broncos", "break statement", "sixteen games"]
    return [
        _hit(t, i, _span(t, p) if focus else None)
        for i, (t, p) in enumerate(zip(texts, phrases, strict=True))
    ]


def test_more_is_read_only_when_the_first_window_is_unsure(shipped_reader: Any) -> None:
    q = ["Which team won Super Bowl 50?"]

    def windows(hits: list[Hit], **settings: Any) -> tuple[int, int]:
        r = CountingReader(shipped_reader)
        span_candidates(r, q, [hits], ReadSettings(passages=3, bf16=False, **settings))
        return r.windows, r.longest

    assert windows(_three(True), window=96, sure=0.0) == (1, 96)  # always sure: one window
    assert windows(_three(True), window=96, sure=None) == (3, 96)  # never stops: all three
    # no span is surer than certain: the first window, then every passage whole
    n, longest = windows(_three(True), window=96, sure=1.0)
    assert n >= 4 and longest > 96
    # without a focus (BM25, dense) passages are read whole, every one
    n, longest = windows(_three(False), window=96, sure=0.0)
    assert n == 3 and longest > 96


def test_an_unsure_question_is_read_as_whole_passages(shipped_reader: Any) -> None:
    q = ["Which team won Super Bowl 50?"]

    def read(**settings: Any) -> list[Any]:
        s = ReadSettings(passages=3, bf16=False, **settings)
        return span_candidates(shipped_reader, q, [_three(True)], s)[0]

    unsure, whole = read(window=96, sure=1.0), read(window=None)
    # the first window's spans give way to the whole passages'
    assert [(c.passage, c.start, c.end) for c in unsure] == [
        (c.passage, c.start, c.end) for c in whole
    ]
    assert [c.reader_score for c in unsure] == pytest.approx([c.reader_score for c in whole])
    sure = read(window=96, sure=0.0)
    assert {c.passage for c in sure} == {0}


def test_windows_are_no_longer_than_asked(shipped_reader: Any) -> None:
    r = CountingReader(shipped_reader)
    span_candidates(r, ["Who won?"], [_three(True)], ReadSettings(passages=3, window=80, sure=None))
    assert r.longest <= 80


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"window": 8}, "read window must be a number of tokens in 32..512"),
        ({"window": 10_000}, "read window must be a number of tokens in 32..512"),
        ({"sure": 1.5}, "sure must be a probability in [0, 1]"),
        ({"sure": -0.1}, "sure must be a probability in [0, 1]"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(AnygrainError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ReadSettings(**settings)


def test_the_users_options_map_to_settings() -> None:
    assert how_much_to_read(None, None) == {}
    assert how_much_to_read(0, 1) == {"window": None, "sure": None}
    assert how_much_to_read(96, 0.5) == {"window": 96, "sure": 0.5}
    with pytest.raises(AnygrainError, match="number of tokens"):
        how_much_to_read("big", None)  # type: ignore[arg-type]


def test_the_cli_refuses_a_bad_window_in_one_line(tmp_path: Path) -> None:
    from anygrain.cli.main import app

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.txt").write_text(BOWL, encoding="utf-8")
    r = CliRunner().invoke(
        app, ["index", str(corpus), "--kind", "bm25", "--out", str(tmp_path / "i"), "-q"]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["search", str(tmp_path / "i"), "Who won?", "--read-window", "8"])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "read window" in lines[0], r.output


def test_a_phrase_indexs_passage_hits_carry_the_phrase_that_found_them(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("torch")
    from test_phrase_helpers import fixture_index, make_tiny_phrase_model, write_squad

    root = tmp_path_factory.mktemp("focus")
    idx = fixture_index(
        write_squad(root / "sq.json"), make_tiny_phrase_model(tmp_path_factory), root / "i"
    )
    questions = ["Which team won the game?", "Where is the capital?"]
    passages = idx.search(questions, 3, **idx.unit_options(Unit.PASSAGE))
    phrases = idx.search(questions, 50, **idx.unit_options(Unit.PHRASE))
    for ps, hs in zip(passages, phrases, strict=True):
        assert ps
        for p in ps:
            best = next(h for h in hs if h.passage_row == p.passage_row)
            assert p.focus == best.span and p.score == pytest.approx(best.score)
