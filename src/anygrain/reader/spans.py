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

Decoding runs on NumPy arrays (a reader on ONNX Runtime gives no tensors);
:func:`best_spans` is the same decoding for tensors.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import regex as rx

if TYPE_CHECKING:
    import torch

__all__ = [
    "best_span_bruteforce",
    "best_spans",
    "best_spans_array",
    "is_boundary",
    "span_log_norm",
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


def _band_scores(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    start_ok: np.ndarray,
    end_ok: np.ndarray,
    a: int,
) -> np.ndarray:
    """``[N, L * a]`` float32 span scores: entry ``i * a + d`` scores the span ``(i, i + d)``
    (``-inf`` where it is not valid), so the work is ``N * L * a``, not ``N * L * L``."""
    s = np.where(start_ok.astype(bool), start_logits.astype(np.float32), np.float32(NEG_INF))
    e = np.where(end_ok.astype(bool), end_logits.astype(np.float32), np.float32(NEG_INF))
    e_pad = np.pad(e, ((0, 0), (0, a - 1)), constant_values=NEG_INF)
    band = np.lib.stride_tricks.sliding_window_view(e_pad, a, axis=1)  # band[n, i, d] = e[n, i+d]
    return (s[:, :, None] + band).reshape(len(s), -1)


def _none(rows: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    missing = np.full((rows, n), -1, dtype=np.int64)
    return missing, missing.copy(), np.full((rows, n), NEG_INF, dtype=np.float32)


def best_spans_array(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    start_ok: np.ndarray,
    end_ok: np.ndarray,
    max_answer_length: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best valid span of each row: ``(starts, ends, scores)``, each of shape ``(N,)``
    (int64, int64, float32), from ``(N, L)`` logits and masks.

    Rows with no valid span get start and end ``-1`` and score ``-inf``.  Ties go to the
    smaller start, then the shorter span (``argmax`` takes the first maximum)."""
    if max_answer_length < 1:
        raise ValueError("max_answer_length must be >= 1")
    n, length = start_logits.shape
    if n == 0 or length == 0:
        starts, ends, scores = _none(n, 1)
        return starts[:, 0], ends[:, 0], scores[:, 0]
    a = min(max_answer_length, length)
    scores = _band_scores(start_logits, end_logits, start_ok, end_ok, a)
    best = scores.argmax(axis=1)
    best_score = np.take_along_axis(scores, best[:, None], axis=1)[:, 0]
    starts = best // a
    ends = starts + best % a
    none = np.isneginf(best_score)
    starts[none] = -1
    ends[none] = -1
    return starts.astype(np.int64), ends.astype(np.int64), best_score


def best_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_ok: torch.Tensor,
    end_ok: torch.Tensor,
    max_answer_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`best_spans_array` on tensors (any device and float type): ``(starts, ends,
    scores)`` as CPU tensors (long, long, float32)."""
    import torch

    def array(t: torch.Tensor) -> np.ndarray:
        t = t.detach().cpu()
        return (t.float() if t.is_floating_point() else t).numpy()

    out = best_spans_array(
        array(start_logits), array(end_logits), array(start_ok), array(end_ok), max_answer_length
    )
    starts, ends, scores = (torch.from_numpy(x) for x in out)
    return starts, ends, scores


def top_spans(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    start_ok: np.ndarray,
    end_ok: np.ndarray,
    max_answer_length: int,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``n`` best valid spans of each row, best first: ``(starts, ends, scores)``, each
    ``(N, n)``; missing spans have start and end ``-1`` and score ``-inf``.  The same band
    as :func:`best_spans_array` (``n == 1`` gives its answer)."""
    if max_answer_length < 1 or n < 1:
        raise ValueError("max_answer_length and n must be >= 1")
    rows, length = start_logits.shape
    if rows == 0 or length == 0:
        return _none(rows, n)
    a = min(max_answer_length, length)
    scores = _band_scores(start_logits, end_logits, start_ok, end_ok, a)
    m = min(n, scores.shape[1])
    # sorted top-k; ties resolved like argmax (first index) by a stable sort on -score
    order = np.argsort(-scores, axis=1, kind="stable")[:, :m]
    best = np.take_along_axis(scores, order, axis=1)
    starts, ends, out = _none(rows, n)
    none = np.isneginf(best)
    starts[:, :m] = np.where(none, -1, order // a)
    ends[:, :m] = np.where(none, -1, order // a + order % a)
    out[:, :m] = best
    return starts, ends, out


def span_log_norm(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    start_ok: np.ndarray,
    end_ok: np.ndarray,
    max_answer_length: int,
) -> np.ndarray:
    """``(N,)`` log-sum-exp of each row's valid span scores (the band of
    :func:`top_spans`): a span's score minus it is its log probability among the row's
    valid spans; ``-inf`` for a row with none."""
    rows, length = start_logits.shape
    if rows == 0 or length == 0:
        return np.full(rows, NEG_INF)
    a = min(max_answer_length, length)
    scores = _band_scores(start_logits, end_logits, start_ok, end_ok, a).astype(np.float64)
    top = scores.max(axis=1)
    safe = np.where(np.isneginf(top), 0.0, top)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(scores - safe[:, None]).sum(axis=1))


def best_span_bruteforce(
    start_logits: Sequence[float],
    end_logits: Sequence[float],
    start_ok: Sequence[bool],
    end_ok: Sequence[bool],
    max_answer_length: int,
) -> tuple[int, int, float] | None:
    """Reference for :func:`best_spans_array`: every pair checked by hand (tests only)."""
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
