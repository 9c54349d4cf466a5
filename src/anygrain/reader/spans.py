"""Span decoding: the best answer span of each passage window.

A span ``(i, j)`` of token positions is valid when

* ``i <= j`` and ``j - i + 1 <= max_answer_length`` (DPR's limit, in tokens);
* both ends are *passage* tokens (never question, title, special or padding tokens);
* token ``i`` starts a word and token ``j`` ends one, so an answer is never half a
  word (``##bel`` cannot start a span, ``un`` of ``unbelievably`` cannot end one);
* neither end is punctuation (quote marks and brackets around an answer stay outside
  it: ``'@'`` reads as ``@``), except an abbreviation's final dot.

Its score is ``start_logit[i] + end_logit[j]``: the log of ``P_start(i) P_end(j)``
up to a per-window constant (DPR Eq. 3-4), so the arg max is the same.

Word boundaries come from the fast tokenizer's character offsets and the text,
not from ``word_ids``: a sentencepiece tokenizer (multilingual E5) calls a whole
run of Chinese characters one "word", which would force answers to span whole
clauses.  Here a boundary lies between two characters unless both are letters,
digits or combining marks of a script written with spaces; Han, kana and bopomofo
characters and all punctuation are words of their own (as BERT's basic tokenizer
splits them), and a combining mark always stays with the character before it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import regex as rx
import torch

__all__ = [
    "best_span_bruteforce",
    "best_spans",
    "is_boundary",
    "top_spans",
    "word_boundaries",
]

_CJK = rx.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Bopomofo}]")
NEG_INF = float("-inf")


@lru_cache(maxsize=65536)
def _wordish(ch: str) -> bool:
    """A character that joins its neighbours into one word (letters, digits, marks)."""
    return unicodedata.category(ch)[0] in "LNM" and _CJK.match(ch) is None


@lru_cache(maxsize=65536)
def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def _joined(a: str, b: str) -> bool:
    """True when characters ``a`` then ``b`` belong to one word (no boundary between them)."""
    return _is_mark(b) or (_wordish(a) and _wordish(b))


def is_boundary(text: str, i: int) -> bool:
    """True when a word boundary lies before character ``i`` of ``text`` (ends count)."""
    return i <= 0 or i >= len(text) or not _joined(text[i - 1], text[i])


# Sentence punctuation that never begins or ends an answer; other punctuation (``@``, the
# ``_`` of ``__len__``, ``#``, ``%``, dashes) can be the answer itself.
_STOPS = frozenset(",.;:!?'\"，。；：！？、…")


@lru_cache(maxsize=65536)
def _is_punct(ch: str) -> bool:
    """Quote marks, brackets and sentence punctuation."""
    return ch in _STOPS or unicodedata.category(ch) in ("Ps", "Pe", "Pi", "Pf")


def clean_start(text: str, s: int) -> bool:
    """An answer may start at character ``s``: not on a quote mark, bracket or sentence
    punctuation (they belong to the text around an answer, not to it)."""
    return not _is_punct(text[s])


def clean_end(text: str, e: int) -> bool:
    """An answer may end before character ``e``: not on a quote mark, bracket or sentence
    punctuation, except the final dot of an abbreviation (``U.S.``)."""
    last = text[e - 1]
    if not _is_punct(last):
        return True
    return last == "." and e >= 3 and text[e - 3] == "." and _wordish(text[e - 2])


def word_boundaries(
    text: str, offsets: np.ndarray, passage: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(start_ok, end_ok)``: which tokens may start / end an answer span.

    ``offsets`` is ``(L, 2)`` character offsets into ``text`` and ``passage`` marks
    the tokens of ``text``; a token must cover at least one character.
    """
    n = len(offsets)
    start_ok = np.zeros(n, dtype=bool)
    end_ok = np.zeros(n, dtype=bool)
    size = len(text)
    for t in range(n):
        if not passage[t]:
            continue
        s, e = int(offsets[t, 0]), int(offsets[t, 1])
        if not 0 <= s < e <= size:
            continue
        start_ok[t] = is_boundary(text, s) and clean_start(text, s)
        end_ok[t] = is_boundary(text, e) and clean_end(text, e)
    return start_ok, end_ok


def best_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_ok: torch.Tensor,
    end_ok: torch.Tensor,
    max_answer_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Best valid span of each row: ``(starts, ends, scores)``, each of shape ``(N,)``.

    Vectorised over a band instead of the full ``L x L`` triangle: entry
    ``[n, i, d]`` scores the span ``(i, i + d)`` for ``d < max_answer_length``, so
    the work is ``N * L * max_answer_length``.  Rows with no valid span get start
    and end ``-1`` and score ``-inf``.  Ties go to the smaller start, then the
    shorter span (``argmax`` takes the first maximum).
    """
    if max_answer_length < 1:
        raise ValueError("max_answer_length must be >= 1")
    n, length = start_logits.shape
    if n == 0 or length == 0:
        empty = torch.full((n,), -1, dtype=torch.long)
        return empty, empty.clone(), torch.full((n,), NEG_INF)
    a = min(max_answer_length, length)
    s = start_logits.float().masked_fill(~start_ok.bool(), NEG_INF)
    e = end_logits.float().masked_fill(~end_ok.bool(), NEG_INF)
    e_pad = torch.nn.functional.pad(e, (0, a - 1), value=NEG_INF)
    band = e_pad.unfold(1, a, 1)  # [n, length, a]: band[n, i, d] = e[n, i + d]
    scores = (s.unsqueeze(-1) + band).reshape(n, -1)
    best_score, best = scores.max(dim=1)
    starts = torch.div(best, a, rounding_mode="floor")
    ends = starts + best % a
    none = torch.isneginf(best_score)
    starts = starts.masked_fill(none, -1)
    ends = ends.masked_fill(none, -1)
    return starts, ends, best_score


def top_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_ok: torch.Tensor,
    end_ok: torch.Tensor,
    max_answer_length: int,
    n: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``n`` best valid spans of each row, best first: ``(starts, ends, scores)``, each
    ``(N, n)``; missing spans have start and end ``-1`` and score ``-inf``.  The same band
    as :func:`best_spans` (``n == 1`` gives its answer)."""
    if max_answer_length < 1 or n < 1:
        raise ValueError("max_answer_length and n must be >= 1")
    rows, length = start_logits.shape
    if rows == 0 or length == 0:
        empty = torch.full((rows, n), -1, dtype=torch.long)
        return empty, empty.clone(), torch.full((rows, n), NEG_INF)
    a = min(max_answer_length, length)
    s = start_logits.float().masked_fill(~start_ok.bool(), NEG_INF)
    e = end_logits.float().masked_fill(~end_ok.bool(), NEG_INF)
    band = torch.nn.functional.pad(e, (0, a - 1), value=NEG_INF).unfold(1, a, 1)
    scores = (s.unsqueeze(-1) + band).reshape(rows, -1)
    m = min(n, scores.shape[1])
    # sorted top-k; ties resolved like argmax (first index) by a stable sort on -score
    order = torch.argsort(-scores, dim=1, stable=True)[:, :m]
    best = scores.gather(1, order)
    starts = torch.div(order, a, rounding_mode="floor")
    ends = starts + order % a
    none = torch.isneginf(best)
    starts, ends = starts.masked_fill(none, -1), ends.masked_fill(none, -1)
    if m < n:
        pad = (0, n - m)
        starts = torch.nn.functional.pad(starts, pad, value=-1)
        ends = torch.nn.functional.pad(ends, pad, value=-1)
        best = torch.nn.functional.pad(best, pad, value=NEG_INF)
    return starts, ends, best


def best_span_bruteforce(
    start_logits: Sequence[float],
    end_logits: Sequence[float],
    start_ok: Sequence[bool],
    end_ok: Sequence[bool],
    max_answer_length: int,
) -> tuple[int, int, float] | None:
    """Reference for :func:`best_spans`: every pair checked by hand (tests only)."""
    best: tuple[int, int, float] | None = None
    n = len(start_logits)
    for i in range(n):
        if not start_ok[i]:
            continue
        for j in range(i, min(n, i + max_answer_length)):
            if not end_ok[j]:
                continue
            score = float(start_logits[i]) + float(end_logits[j])
            if best is None or score > best[2]:
                best = (i, j, score)
    return best
