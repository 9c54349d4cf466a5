"""Words, token flags, windows and answer alignment (English, accented, Chinese)."""

from __future__ import annotations

import numpy as np
import pytest
from test_phrase_helpers import minilm_dir
from transformers import AutoTokenizer

from anygrain.phrase.tokens import (
    AlignStats,
    CharWords,
    align_answer,
    best_windows,
    flag_tokens,
    locate_answer,
    tokenize_windows,
    word_spans,
)


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(str(minilm_dir()))


def _words(text: str) -> list[str]:
    s, e = word_spans(text)
    return [text[a:b] for a, b in zip(s, e, strict=True)]


def test_words_latin_runs_punctuation_and_cjk_characters() -> None:
    assert _words("Café déjà-vu, 4.37 km!") == [
        "Café",
        "déjà",
        "-",
        "vu",
        ",",
        "4",
        ".",
        "37",
        "km",
        "!",
    ]
    assert _words("北京是首都 iPhone6") == ["北", "京", "是", "首", "都", "iPhone6"]
    # A combining accent stays inside its word (NFD text).
    assert _words("Cafe\u0301 ok") == ["Cafe\u0301", "ok"]


def test_wordpiece_flags_first_and_last_subword(tok) -> None:  # type: ignore[no-untyped-def]
    text = "Unbelievably, Zürich"
    (w,) = tokenize_windows(tok, [text], max_length=32, stride=8)
    pos = w.passage_positions()
    pieces = [text[w.cs[i] : w.ce[i]] for i in pos]
    assert "".join(pieces).lower().startswith("unbelievably")
    sub = [i for i in pos if w.wfirst[i] == 0]  # the sub-words of "Unbelievably"
    assert len(sub) > 1
    assert w.start_ok[sub].tolist() == [True] + [False] * (len(sub) - 1)
    assert w.end_ok[sub].tolist() == [False] * (len(sub) - 1) + [True]
    # Special tokens are not passage tokens.
    assert w.cs[0] == -1 and w.cs[-1] == -1 and not w.start_ok[0]


def test_sentencepiece_style_offsets_are_trimmed_and_multichar_tokens_flagged() -> None:
    text = "Hi 北京是 x"
    # "▁Hi" (0,2); "▁" alone (2,3); "北京" (3,5); "是" (5,6); "▁x" with its space (6,8)
    offs = np.array([[0, 2], [2, 3], [3, 5], [5, 6], [6, 8], [0, 0]])
    cs, ce, so, eo, wf, wl = flag_tokens(text, offs, CharWords.of(text))
    assert cs.tolist() == [0, -1, 3, 5, 7, -1]
    assert ce.tolist() == [2, -1, 5, 6, 8, -1]
    assert so.tolist() == [True, False, True, True, True, False]
    assert eo.tolist() == [True, False, True, True, True, False]
    assert (wf[2], wl[2]) == (1, 2)  # one token, two words


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Alpha Centauri is 4.37 light-years away.", "4.37 light-years"),
        ("Le café déjà-vu opened in Zürich in 1887.", "déjà-vu"),
        ("Le café déjà-vu opened in Zürich in 1887.", "Zürich"),
        ("北京是中华人民共和国的首都，位于华北平原。", "华北平原"),
        ("北京是中华人民共和国的首都，位于华北平原。", "首都"),
    ],
)
def test_answers_align_to_their_exact_text(tok, text: str, answer: str) -> None:  # type: ignore[no-untyped-def]
    windows = tokenize_windows(tok, [text], ["A title"], max_length=64, stride=16)
    stats = AlignStats()
    al = align_answer(text, windows, [0], answer, text.index(answer), stats)
    assert al is not None and stats.aligned == 1 and stats.n_failed == 0
    w = windows[al.window]
    assert text[w.cs[al.start] : w.ce[al.end]] == answer
    assert w.start_ok[al.start] and w.end_ok[al.end]


def test_misaligned_answers_are_counted_by_reason(tok) -> None:  # type: ignore[no-untyped-def]
    text = "The nation is international."
    windows = tokenize_windows(tok, [text], max_length=64, stride=16)
    stats = AlignStats()
    # Starts inside a word: cannot be a phrase of whole words.
    assert align_answer(text, windows, [0], "ation", text.index("ation"), stats) is None
    assert align_answer(text, windows, [0], "zebra", 3, stats) is None
    assert stats.failed == {"not_on_token_word_boundary": 1, "answer_not_in_passage": 1}
    assert stats.to_dict()["failed"] == 2 and len(stats.examples) == 2


def test_wrong_answer_offsets_are_fixed_and_counted(tok) -> None:  # type: ignore[no-untyped-def]
    text = "Guido van Rossum created Python in 1991."
    assert locate_answer(text, " Python", 20) == (25, 31)
    windows = tokenize_windows(tok, [text], max_length=64, stride=16)
    stats = AlignStats()
    al = align_answer(text, windows, [0], "Python", 22, stats)
    assert al is not None and stats.offset_fixed == 1


def test_long_passages_split_into_windows_each_token_owned_once(tok) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(f"word{i}" for i in range(60))
    full = tokenize_windows(tok, [text], max_length=512, stride=0)[0]
    wins = tokenize_windows(tok, [text], ["T"], max_length=40, stride=12)
    assert len(wins) > 2 and all(len(w) <= 40 for w in wins)
    owned = best_windows(wins)
    cs = np.concatenate([w.cs[o] for w, o in zip(wins, owned, strict=True)])
    assert sorted(cs.tolist()) == full.cs[full.cs >= 0].tolist()
    # An answer near a window edge is aligned in the window where it has most context.
    answer = "word30 word31"
    al = align_answer(text, wins, list(range(len(wins))), answer, text.index(answer))
    assert al is not None
    w = wins[al.window]
    assert text[w.cs[al.start] : w.ce[al.end]] == answer
