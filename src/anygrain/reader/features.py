"""Reader inputs: ``[CLS] question [SEP] title [SEP] passage [SEP]`` windows, with offsets.

The question and title form the first segment (the title stays in every window
of a long passage), the passage the second.  A passage longer than
``max_length`` is cut into overlapping windows (``stride`` tokens shared between
neighbours), each read as a passage of its own.  Every token carries its
character offsets into the *passage text* (``-1`` outside the passage), which is
how spans map back to text and how a student with another tokenizer aligns to
the teacher's distributions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anygrain.reader.spans import word_boundaries

__all__ = ["Batch", "Window", "collate", "collate_arrays", "focus_windows", "make_windows"]


@dataclass
class Window:
    """One model input: a window of one (question, passage) pair."""

    pair: int  # index of the (question, passage) pair it comes from
    input_ids: list[int]
    token_type_ids: list[int] | None
    offsets: np.ndarray  # (L, 2) int64 char offsets into the passage; -1 outside it
    passage: np.ndarray  # (L,) bool: token of the passage text
    start_ok: np.ndarray  # (L,) bool: may start an answer span
    end_ok: np.ndarray  # (L,) bool: may end one

    def __len__(self) -> int:
        return len(self.input_ids)

    def token_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
        """Token positions ``(i, j)`` covering passage characters ``[char_start, char_end)``,
        or None when the span is not wholly inside this window."""
        pos = np.nonzero(self.passage)[0]
        if len(pos) == 0 or char_end <= char_start:
            return None
        offs = self.offsets[pos]
        if char_start < offs[0, 0] or char_end > offs[-1, 1]:
            return None
        inside = np.nonzero((offs[:, 1] > char_start) & (offs[:, 0] < char_end))[0]
        if len(inside) == 0:
            return None
        return int(pos[inside[0]]), int(pos[inside[-1]])


def _first_segments(
    tokenizer: Any,
    questions: Sequence[str],
    titles: Sequence[str | None] | None,
    max_question_length: int,
) -> list[str]:
    """``question [SEP] title`` strings, cut to ``max_question_length`` tokens at a token edge."""
    sep = tokenizer.sep_token or ""
    firsts = [
        f"{q} {sep} {titles[i]}" if titles is not None and titles[i] else q
        for i, q in enumerate(questions)
    ]
    enc = tokenizer(firsts, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for f, offs in zip(firsts, enc["offset_mapping"], strict=True):
        out.append(f[: offs[max_question_length][0]] if len(offs) > max_question_length else f)
    return out


def make_windows(
    tokenizer: Any,
    questions: Sequence[str],
    passages: Sequence[str],
    titles: Sequence[str | None] | None = None,
    *,
    max_length: int,
    max_question_length: int,
    stride: int,
) -> list[Window]:
    """All windows of the pairs ``(questions[i], passages[i])``, pair by pair in order."""
    if len(questions) != len(passages):
        raise ValueError("questions and passages differ in length")
    if not questions:
        return []
    firsts = _first_segments(tokenizer, questions, titles, max_question_length)
    enc = tokenizer(
        firsts,
        list(passages),
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    types = enc.get("token_type_ids")
    mapping = enc.get("overflow_to_sample_mapping") or list(range(len(questions)))
    out: list[Window] = []
    for w, pair in enumerate(mapping):
        seq = enc.sequence_ids(w)
        offs = np.asarray(enc["offset_mapping"][w], dtype=np.int64).reshape(-1, 2)
        passage = np.fromiter((s == 1 for s in seq), dtype=bool, count=len(seq))
        offs[~passage] = -1
        start_ok, end_ok = word_boundaries(passages[pair], offs, passage)
        out.append(
            Window(
                pair=int(pair),
                input_ids=list(enc["input_ids"][w]),
                token_type_ids=list(types[w]) if types is not None else None,
                offsets=offs,
                passage=passage,
                start_ok=start_ok,
                end_ok=end_ok,
            )
        )
    return out


def _around(w: Window, span: tuple[int, int], max_length: int) -> Window:
    """``w`` with its passage tokens cut to the ``max_length`` budget, centred on ``span``
    (characters of the passage): the same tokens, offsets and boundaries as ``w``, so a
    span read in the cut window is a span of the full one."""
    pos = np.nonzero(w.passage)[0]
    if not len(pos):
        return w
    first, last = int(pos[0]), int(pos[-1])
    budget = max_length - (len(w) - len(pos))
    if budget >= len(pos) or budget < 1:
        return w
    inside = w.token_span(*span)
    if inside is None:  # the span runs past this window: centre on what overlaps
        offs = w.offsets[pos]
        hit = np.nonzero((offs[:, 1] > span[0]) & (offs[:, 0] < span[1]))[0]
        inside = (int(pos[hit[0]]), int(pos[hit[-1]])) if len(hit) else (first, first)
    centre = (inside[0] + inside[1]) // 2
    a = min(max(centre - budget // 2, first), last + 1 - budget)
    keep = np.r_[0:first, a : a + budget, last + 1 : len(w)]
    ids = np.asarray(w.input_ids)[keep].tolist()
    types = np.asarray(w.token_type_ids)[keep].tolist() if w.token_type_ids is not None else None
    return Window(
        pair=w.pair,
        input_ids=ids,
        token_type_ids=types,
        offsets=w.offsets[keep],
        passage=w.passage[keep],
        start_ok=w.start_ok[keep],
        end_ok=w.end_ok[keep],
    )


def _centrality(w: Window, span: tuple[int, int]) -> int:
    """How far ``span`` lies inside ``w``'s passage tokens (-1: not wholly inside)."""
    t = w.token_span(*span)
    if t is None:
        return -1
    pos = np.nonzero(w.passage)[0]
    return min(t[0] - int(pos[0]), int(pos[-1]) - t[1])


def focus_windows(
    windows: Sequence[Window], foci: Sequence[tuple[int, int] | None], max_length: int
) -> list[Window]:
    """One window of at most ``max_length`` tokens per pair that has a focus (a span of
    characters in its passage): the pair's window holding the span most centrally, cut
    around it; a pair without one keeps all its windows."""
    by_pair: dict[int, list[Window]] = {}
    for w in windows:
        by_pair.setdefault(w.pair, []).append(w)
    out: list[Window] = []
    for pair, ws in by_pair.items():
        span = foci[pair]
        if span is None:
            out.extend(ws)
            continue
        best = max(ws, key=lambda w: _centrality(w, span))
        out.append(_around(best, span, max_length))
    return out


@dataclass
class Batch:
    """Padded inputs for a list of windows: NumPy arrays (:func:`collate_arrays`, what
    reading runs on, with or without torch) or torch tensors (:func:`collate`, training)."""

    input_ids: Any  # int64 [N, L]
    attention_mask: Any  # int64 [N, L]
    token_type_ids: Any | None  # int64 [N, L]
    passage: Any  # bool [N, L]
    start_ok: Any  # bool [N, L]
    end_ok: Any  # bool [N, L]

    def model_inputs(self) -> dict[str, Any]:
        d = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            d["token_type_ids"] = self.token_type_ids
        return d


def collate_arrays(windows: Sequence[Window], pad_id: int) -> Batch:
    """Pad windows to the longest one, as NumPy arrays."""
    n = len(windows)
    width = max((len(w) for w in windows), default=0)
    ids = np.full((n, width), pad_id, dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    has_types = bool(windows) and windows[0].token_type_ids is not None
    types = np.zeros((n, width), dtype=np.int64) if has_types else None
    passage = np.zeros((n, width), dtype=bool)
    start_ok = np.zeros((n, width), dtype=bool)
    end_ok = np.zeros((n, width), dtype=bool)
    for r, w in enumerate(windows):
        m = len(w)
        ids[r, :m] = w.input_ids
        mask[r, :m] = 1
        if types is not None and w.token_type_ids is not None:
            types[r, :m] = w.token_type_ids
        passage[r, :m] = w.passage
        start_ok[r, :m] = w.start_ok
        end_ok[r, :m] = w.end_ok
    return Batch(ids, mask, types, passage, start_ok, end_ok)


def collate(windows: Sequence[Window], pad_id: int) -> Batch:
    """Pad windows to the longest one, as torch tensors (long, masks bool)."""
    import torch

    b = collate_arrays(windows, pad_id)
    return Batch(
        *(
            torch.from_numpy(a) if a is not None else None
            for a in (
                b.input_ids,
                b.attention_mask,
                b.token_type_ids,
                b.passage,
                b.start_ok,
                b.end_ok,
            )
        )
    )
