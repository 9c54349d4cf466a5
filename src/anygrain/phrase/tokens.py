"""Words, token windows and answer alignment for phrase encoding.

A phrase starts on the first sub-word of a word and ends on the last one, so every
token carries two flags: ``start_ok`` (its first character begins a word) and
``end_ok`` (its last character ends one).  Words are defined on the characters,
not by the tokenizer, so the same rule holds for WordPiece and SentencePiece:

* a run of letters, digits, marks and ``_`` (Latin, Cyrillic, Hangul, ...) is a word;
* every CJK character (Han, kana, bopomofo) is a word of its own, since Chinese
  and Japanese are written without spaces;
* any other non-space character (punctuation, symbols) is a word of its own.

A SentencePiece token that covers two Chinese characters (``北京``) both starts
and ends a word; a phrase cannot begin on its second character, which the data
rarely asks for and alignment reports when it does.

Long passages are cut into windows of ``max_length`` tokens overlapping by
``stride``; each token's vector is taken from the window where it has the most
context on both sides (as BERT's SQuAD code does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import regex

_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Bopomofo}"
WORD_RE = regex.compile(rf"[{_CJK}]\p{{M}}*|(?:(?![{_CJK}])[\p{{L}}\p{{N}}\p{{M}}_])+|\S\p{{M}}*")
# Titles longer than this are cut (characters): a window must keep room for the passage.
MAX_TITLE_CHARS = 100


def word_spans(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` character offsets of the words of ``text`` (see module docstring)."""
    spans = [m.span() for m in WORD_RE.finditer(text)]
    if not spans:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    a = np.asarray(spans, dtype=np.int32)
    return a[:, 0], a[:, 1]


@dataclass
class CharWords:
    """Per-character word facts of one text, for flagging tokens in O(1) each."""

    word_at: np.ndarray  # (len+1,) word index of each character, -1 for spaces
    is_start: np.ndarray  # (len+1,) a word starts at this offset
    is_end: np.ndarray  # (len+1,) a word ends at this offset
    n_words: int

    @classmethod
    def of(cls, text: str) -> CharWords:
        n = len(text)
        starts, ends = word_spans(text)
        word_at = np.full(n + 1, -1, dtype=np.int32)
        lens = ends - starts
        if len(starts):
            idx = np.repeat(starts, lens) + (
                np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
            )
            word_at[idx] = np.repeat(np.arange(len(starts), dtype=np.int32), lens)
        is_start = np.zeros(n + 1, dtype=bool)
        is_start[starts] = True
        is_end = np.zeros(n + 1, dtype=bool)
        is_end[ends] = True
        return cls(word_at, is_start, is_end, len(starts))


@dataclass
class TokenMarks:
    """What tokens carry besides their ids, one array entry a token: ``cs``/``ce``, the
    character offsets in the passage text (-1 for special, title and prefix tokens), with
    surrounding spaces trimmed; ``start_ok``/``end_ok``, whether a phrase may start or end
    there; ``wfirst``/``wlast``, the indices of the words holding a token's first and last
    characters (phrase length is counted in words)."""

    cs: np.ndarray
    ce: np.ndarray
    start_ok: np.ndarray
    end_ok: np.ndarray
    wfirst: np.ndarray
    wlast: np.ndarray


#: the names of :class:`TokenMarks`' arrays
TOKEN_MARKS = tuple(f.name for f in fields(TokenMarks))


@dataclass(kw_only=True)
class Window(TokenMarks):
    """One tokenized window of a passage, its :class:`TokenMarks` aligned with
    ``input_ids``."""

    passage: int
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    def passage_positions(self) -> np.ndarray:
        """Token positions that belong to the passage text, in order."""
        return np.nonzero(self.cs >= 0)[0]


def flag_tokens(
    text: str, offsets: np.ndarray, words: CharWords | None = None
) -> tuple[np.ndarray, ...]:
    """``(cs, ce, start_ok, end_ok, wfirst, wlast)`` for tokens with ``offsets`` into ``text``.

    Rows with a negative or empty offset are not passage tokens (cs = ce = -1).
    Offsets are trimmed of spaces first: SentencePiece counts the space before a
    word (``▁word``) as part of its token.
    """
    words = words or CharWords.of(text)
    word_at = words.word_at
    s = np.asarray(offsets[:, 0], dtype=np.int64).copy()
    e = np.asarray(offsets[:, 1], dtype=np.int64).copy()
    valid = (s >= 0) & (e > s)
    s[~valid], e[~valid] = 0, 0
    # Trim spaces: vectorised check, Python loop only for the few tokens that need it.
    for i in np.nonzero(valid & ((word_at[s] < 0) | (word_at[np.maximum(e - 1, 0)] < 0)))[0]:
        a, b = int(s[i]), int(e[i])
        while a < b and word_at[a] < 0:
            a += 1
        while b > a and word_at[b - 1] < 0:
            b -= 1
        s[i], e[i] = a, b
    valid &= e > s
    cs = np.where(valid, s, -1).astype(np.int32)
    ce = np.where(valid, e, -1).astype(np.int32)
    wfirst = np.where(valid, word_at[s], -1).astype(np.int32)
    wlast = np.where(valid, word_at[np.maximum(e - 1, 0)], -1).astype(np.int32)
    start_ok = valid & words.is_start[s]
    end_ok = valid & words.is_end[e]
    return cs, ce, start_ok, end_ok, wfirst, wlast


def tokenize_windows(
    tokenizer: Any,
    texts: Sequence[str],
    titles: Sequence[str] | None = None,
    *,
    max_length: int = 384,
    stride: int = 128,
    prefix: str = "",
) -> list[Window]:
    """Tokenize passages (optionally as ``title [SEP] prefix+text``) into overlapping windows.

    Every passage gets at least one window; windows come in passage order.
    """
    if not texts:
        return []
    shifted = [prefix + t for t in texts]
    common: dict[str, Any] = {
        "max_length": max_length,
        "stride": stride,
        "return_overflowing_tokens": True,
        "return_offsets_mapping": True,
        "padding": False,
    }
    if titles is not None:
        firsts = [(t or "")[:MAX_TITLE_CHARS] for t in titles]
        enc = tokenizer(firsts, shifted, truncation="only_second", **common)
        passage_seq = 1
    else:
        enc = tokenizer(shifted, truncation=True, **common)
        passage_seq = 0
    mapping = enc["overflow_to_sample_mapping"]
    words = [CharWords.of(t) for t in texts]
    has_types = "token_type_ids" in enc
    out: list[Window] = []
    for w, p in enumerate(mapping):
        seq = enc.sequence_ids(w)
        offs = np.asarray(enc["offset_mapping"][w], dtype=np.int64).reshape(-1, 2)
        keep = np.asarray([s == passage_seq for s in seq], dtype=bool)
        offs = offs - len(prefix)
        offs[~keep] = -1
        offs[(offs[:, 0] < 0)] = -1
        cs, ce, so, eo, wf, wl = flag_tokens(texts[p], offs, words[p])
        out.append(
            Window(
                passage=int(p),
                input_ids=np.asarray(enc["input_ids"][w], dtype=np.int64),
                token_type_ids=np.asarray(enc["token_type_ids"][w], dtype=np.int64)
                if has_types
                else None,
                cs=cs,
                ce=ce,
                start_ok=so,
                end_ok=eo,
                wfirst=wf,
                wlast=wl,
            )
        )
    return out


def context_scores(window: Window) -> np.ndarray:
    """How much context each token has in its window: min(left, right) among passage tokens,
    plus a small bonus for long windows (BERT's ``_check_is_max_context``); -inf elsewhere."""
    out = np.full(len(window), -np.inf)
    pos = window.passage_positions()
    m = len(pos)
    j = np.arange(m)
    out[pos] = np.minimum(j, m - 1 - j) + 0.01 * m
    return out


def best_windows(windows: Sequence[Window]) -> list[np.ndarray]:
    """For each window, the token positions it owns: each passage token (by character
    offset) goes to the window giving it most context.  Owned positions are in order."""
    if len(windows) == 1:
        return [windows[0].passage_positions()]
    keys, scores, wins, poss = [], [], [], []
    for wi, w in enumerate(windows):
        pos = w.passage_positions()
        keys.append(w.cs[pos])
        scores.append(context_scores(w)[pos])
        wins.append(np.full(len(pos), wi))
        poss.append(pos)
    k = np.concatenate(keys)
    s = np.concatenate(scores)
    wv = np.concatenate(wins)
    pv = np.concatenate(poss)
    order = np.lexsort((wv, -s, k))  # by key, best score first, then earlier window
    _, first = np.unique(k[order], return_index=True)
    chosen = order[first]
    return [np.sort(pv[chosen][wv[chosen] == wi]) for wi in range(len(windows))]


# --- answer alignment -----------------------------------------------------------------


@dataclass
class Alignment:
    """Where an answer sits in a window: token positions of its first and last sub-words."""

    window: int
    start: int
    end: int


@dataclass
class AlignStats:
    """Counts of answers that could and could not be aligned, by reason (never dropped silently)."""

    aligned: int = 0
    offset_fixed: int = 0  # answer_start did not point at the text; found nearby
    failed: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    last_failure: str | None = None  # the reason of the latest failure, for per-question reports

    def fail(self, reason: str, example: str) -> None:
        self.failed[reason] = self.failed.get(reason, 0) + 1
        self.last_failure = reason
        if len(self.examples) < 10:
            self.examples.append(f"{reason}: {example}")

    @property
    def n_failed(self) -> int:
        return sum(self.failed.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "aligned": self.aligned,
            "offset_fixed": self.offset_fixed,
            "failed": self.n_failed,
            "failed_by_reason": dict(self.failed),
            "examples": list(self.examples),
        }


def locate_answer(text: str, answer: str, start: int) -> tuple[int, int] | None:
    """``(start, end)`` character span of ``answer`` in ``text``, trimmed of spaces.

    When ``start`` does not point at the answer (off-by-a-few offsets happen in
    crowd-sourced data) the occurrence nearest to it is used; None if there is none.
    """
    a = answer.strip()
    if not a:
        return None
    lead = len(answer) - len(answer.lstrip())
    s = start + lead if start >= 0 else -1
    if s >= 0 and text[s : s + len(a)] == a:
        return s, s + len(a)
    hits = [m.start() for m in regex.finditer(regex.escape(a), text, overlapped=True)]
    if not hits:
        return None
    best = min(hits, key=lambda h: abs(h - s))
    return best, best + len(a)


def align_in_window(window: Window, cstart: int, cend: int) -> tuple[int, int] | None:
    """Token positions ``(i, j)`` whose span is exactly the characters ``[cstart, cend)``,
    with ``i`` a word start and ``j`` a word end; None when the boundaries fall inside a
    token or a word, or outside the window."""
    si = np.nonzero((window.cs == cstart) & window.start_ok)[0]
    ei = np.nonzero((window.ce == cend) & window.end_ok)[0]
    if not len(si) or not len(ei) or ei[-1] < si[0]:
        return None
    return int(si[0]), int(ei[-1])


def align_answer(
    text: str,
    windows: Sequence[Window],
    window_ids: Sequence[int],
    answer: str,
    answer_start: int,
    stats: AlignStats | None = None,
) -> Alignment | None:
    """Align one answer to the window (of ``window_ids``) where it has most context.

    Counts the outcome in ``stats``; returns None when the answer cannot be
    represented as a phrase of whole tokens starting and ending on word boundaries.
    """
    span = locate_answer(text, answer, answer_start)
    if span is None:
        if stats is not None:
            stats.fail("answer_not_in_passage", repr(answer[:60]))
        return None
    fixed = span[0] != answer_start + (len(answer) - len(answer.lstrip()))
    best: Alignment | None = None
    best_ctx = -np.inf
    for wi in window_ids:
        w = windows[wi]
        ij = align_in_window(w, *span)
        if ij is None:
            continue
        ctx = context_scores(w)
        c = min(ctx[ij[0]], ctx[ij[1]])
        if c > best_ctx:
            best, best_ctx = Alignment(wi, ij[0], ij[1]), c
    if stats is not None:
        if best is None:
            inside = any(
                (windows[wi].cs <= span[0]).any() and (windows[wi].ce >= span[1]).any()
                for wi in window_ids
            )
            reason = "not_on_token_word_boundary" if inside else "outside_windows"
            ctx_text = text[max(0, span[0] - 10) : span[1] + 10]
            stats.fail(reason, f"{answer[:60]!r} in ...{ctx_text!r}...")
        else:
            stats.aligned += 1
            stats.offset_fixed += int(fixed)
    return best
