"""Reading: answers from retrieved passages, and span distributions for distillation.

:func:`read_many` follows DPR's inference: every passage (every window of a long
one) gets a selection logit; the answer is the best span of the window with the
highest selection logit.  Windows of all questions in a chunk are sorted by
length and run in batches, so little compute goes to padding.

:func:`start_end_distributions` exposes the reader as a *teacher* (DensePhrases
distils a cross-encoder reader into its phrase encoder with a KL loss on the
start and end distributions).  The distributions are over the teacher's passage
tokens, each with its character offsets into the passage text;
:meth:`SpanDistributions.project` moves them onto any other tokenization given
its offsets (a student token takes the start mass of the teacher tokens that
begin inside it and the end mass of those that end inside it), and
:meth:`SpanDistributions.char_start` / :meth:`~SpanDistributions.char_end`
give character-level arrays.

The reader is any :class:`~anygrain.reader.runtime.ReadingModel`: the torch
:class:`~anygrain.reader.model.Reader` or its graph on ONNX Runtime
(:class:`~anygrain.reader.onnx.OnnxReader`); spans are decoded from NumPy logits either way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit
from anygrain.reader.features import Batch, Window, collate_arrays, make_windows
from anygrain.reader.runtime import ReadingModel, WindowLogits
from anygrain.reader.spans import best_spans_array, span_log_norm, top_spans
from anygrain.utils.progress import progress_bar

__all__ = [
    "Answer",
    "SpanDistributions",
    "read",
    "read_many",
    "start_end_distributions",
    "start_end_distributions_many",
]


@dataclass
class Answer:
    """The reader's answer to one question.

    ``score`` is the span score (start + end logit, DPR); ``span`` the character
    offsets of ``text`` in ``hit.text``; ``selection_score`` the passage's
    selection logit and ``selection_prob`` its softmax over the passages read.
    A question with no readable passage gets an empty answer with ``hit`` None.
    """

    text: str
    score: float
    span: tuple[int, int] | None
    hit: Hit | None
    passage_index: int
    selection_score: float
    selection_prob: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "score": self.score,
            "span": list(self.span) if self.span is not None else None,
            "passage_index": self.passage_index,
            "selection_score": self.selection_score,
            "selection_prob": self.selection_prob,
            "passage_id": self.hit.passage_id if self.hit is not None else None,
            "title": self.hit.title if self.hit is not None else None,
            "passage": self.hit.text if self.hit is not None else None,
            "retrieval_score": self.hit.score if self.hit is not None else None,
        }


def _no_answer() -> Answer:
    return Answer("", float("-inf"), None, None, -1, float("-inf"), 0.0)


@dataclass
class _WindowResult:
    selection: float
    start: int  # char offsets into the passage, -1 when no valid span
    end: int
    score: float


def windows_of(
    reader: ReadingModel,
    questions: Sequence[str],
    passages: Sequence[str],
    titles: Sequence[str | None] | None,
) -> list[Window]:
    cfg = reader.config
    return make_windows(
        reader.tokenizer,
        questions,
        passages,
        titles if cfg.include_title else None,
        max_length=cfg.max_length,
        max_question_length=cfg.max_question_length,
        stride=cfg.stride,
    )


def _forward(
    reader: ReadingModel, windows: Sequence[Window], batch_size: int, bf16: bool
) -> Iterator[tuple[list[int], Batch, WindowLogits]]:
    """Run windows longest first, ``batch_size`` at a time: ``(window indices, batch, logits)``."""
    pad = reader.tokenizer.pad_token_id or 0
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
    for b in range(0, len(order), batch_size):
        rows = order[b : b + batch_size]
        batch = collate_arrays([windows[i] for i in rows], pad)
        yield rows, batch, finite_logits(reader, reader.window_logits(batch, bf16))


def finite_logits(reader: ReadingModel, o: WindowLogits) -> WindowLogits:
    """``o``, or an error naming the reader when any logit is NaN or infinite: damaged
    weights score every span NaN, and reading would find no answer without a word."""
    ok = (
        np.isfinite(o.start).all(axis=1)
        & np.isfinite(o.end).all(axis=1)
        & np.isfinite(o.selection).reshape(len(o.selection), -1).all(axis=1)
    )
    if not ok.all():
        name = (
            getattr(reader, "loaded_from", "")
            or getattr(reader, "name", "")
            or reader.config.base_model
        )
        raise AnygrainError(
            f"reader {name}: {int((~ok).sum())} of {len(ok)} windows have NaN or infinite "
            "logits; its weights are probably damaged (reinstall or retrain it)"
        )
    return o


def _run(
    reader: ReadingModel, windows: Sequence[Window], batch_size: int, bf16: bool
) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """``(start_logits, end_logits, selection_logit)`` per window, in input order."""
    out: list[Any] = [None] * len(windows)
    for rows, _, o in _forward(reader, windows, batch_size, bf16):
        for r, i in enumerate(rows):
            n = len(windows[i])
            out[i] = (o.start[r, :n], o.end[r, :n], float(o.selection[r]))
    return out


def _decode(
    reader: ReadingModel, windows: Sequence[Window], batch_size: int, bf16: bool
) -> list[_WindowResult]:
    """Selection logit and best span (as passage character offsets) of each window."""
    out: list[Any] = [None] * len(windows)
    for rows, batch, o in _forward(reader, windows, batch_size, bf16):
        starts, ends, scores = best_spans_array(
            o.start,
            o.end,
            batch.start_ok,
            batch.end_ok,
            reader.config.max_answer_length,
        )
        sel = o.selection
        for r, i in enumerate(rows):
            w = windows[i]
            s, e = int(starts[r]), int(ends[r])
            if s < 0:
                out[i] = _WindowResult(float(sel[r]), -1, -1, float("-inf"))
            else:
                out[i] = _WindowResult(
                    float(sel[r]), int(w.offsets[s, 0]), int(w.offsets[e, 1]), float(scores[r])
                )
    return out


def window_spans(
    reader: ReadingModel, windows: Sequence[Window], batch_size: int, bf16: bool, n: int
) -> list[list[tuple[int, int, float, float, float]]]:
    """The ``n`` best valid spans of each window, best first, as ``(char_start, char_end,
    score, log_prob, selection)``: the span in the passage text, its start + end logit, its
    log probability among all the window's valid spans (a softmax over their scores) and the
    window's selection logit (fewer spans where the window has fewer valid ones)."""
    out: list[list[tuple[int, int, float, float, float]]] = [[] for _ in windows]
    for rows, batch, o in _forward(reader, windows, batch_size, bf16):
        starts, ends, scores = top_spans(
            o.start,
            o.end,
            batch.start_ok,
            batch.end_ok,
            reader.config.max_answer_length,
            n,
        )
        norm = span_log_norm(
            o.start, o.end, batch.start_ok, batch.end_ok, reader.config.max_answer_length
        )
        sel = o.selection.reshape(len(o.selection), -1)[:, 0]
        for r, i in enumerate(rows):
            w = windows[i]
            out[i] = [
                (
                    int(w.offsets[s, 0]),
                    int(w.offsets[e, 1]),
                    float(sc),
                    float(sc) - float(norm[r]),
                    float(sel[r]),
                )
                for s, e, sc in zip(
                    starts[r].tolist(), ends[r].tolist(), scores[r].tolist(), strict=True
                )
                if s >= 0
            ]
    return out


def read_many(
    reader: ReadingModel,
    questions: Sequence[str],
    hits: Sequence[Sequence[Hit]],
    *,
    top_passages: int | None = None,
    batch_size: int = 32,
    questions_per_chunk: int | None = None,
    bf16: bool = False,
    progress: bool = False,
) -> list[Answer]:
    """One :class:`Answer` per question, reading its first ``top_passages`` hits
    (all when None).

    Questions go in chunks of ``questions_per_chunk`` (default: about 128 passages
    per chunk); a chunk's windows are sorted by length and run ``batch_size`` at a time.
    """
    if len(questions) != len(hits):
        raise ValueError("questions and hits differ in length")
    answers: list[Answer] = []
    if questions_per_chunk is None:
        widest = max((len(h) for h in hits), default=1)
        if top_passages is not None:
            widest = min(widest, top_passages)
        questions_per_chunk = max(1, 128 // max(1, widest))
    per = questions_per_chunk
    chunks = range(0, len(questions), per)
    with reader.reading():
        for c in progress_bar(chunks, desc="reading", unit="chunk", disable=not progress):
            qs = questions[c : c + per]
            hs = [list(h if top_passages is None else h[:top_passages]) for h in hits[c : c + per]]
            pairs = [(qi, pi) for qi, h in enumerate(hs) for pi in range(len(h))]
            windows = windows_of(
                reader,
                [qs[qi] for qi, _ in pairs],
                [hs[qi][pi].text for qi, pi in pairs],
                [hs[qi][pi].title for qi, pi in pairs],
            )
            results = _decode(reader, windows, batch_size, bf16)
            # Per question: each passage's selection logit (max over its windows) and
            # the window with the highest selection logit among those with a span.
            sel: list[dict[int, float]] = [{} for _ in qs]
            best: dict[int, int] = {}
            for wi, (w, res) in enumerate(zip(windows, results, strict=True)):
                qi, pi = pairs[w.pair]
                sel[qi][pi] = max(sel[qi].get(pi, float("-inf")), res.selection)
                if res.start >= 0 and (
                    qi not in best or res.selection > results[best[qi]].selection
                ):
                    best[qi] = wi
            for qi in range(len(qs)):
                if qi not in best:
                    answers.append(_no_answer())
                    continue
                res = results[best[qi]]
                _, pi = pairs[windows[best[qi]].pair]
                hit = hs[qi][pi]
                logits = np.array(list(sel[qi].values()))
                z = np.exp(logits - logits.max())
                answers.append(
                    Answer(
                        text=hit.text[res.start : res.end],
                        score=res.score,
                        span=(res.start, res.end),
                        hit=hit,
                        passage_index=pi,
                        selection_score=sel[qi][pi],
                        selection_prob=float(np.exp(sel[qi][pi] - logits.max()) / z.sum()),
                    )
                )
    return answers


def read(
    reader: ReadingModel,
    question: str,
    hits: Sequence[Hit],
    top_passages: int | None = None,
    **options: Any,
) -> Answer:
    """The answer to one question from its retrieved ``hits`` (see :func:`read_many`)."""
    return read_many(reader, [question], [hits], top_passages=top_passages, **options)[0]


# --- teacher distributions ---------------------------------------------------------------
@dataclass
class SpanDistributions:
    """The reader's start/end distributions over one passage's tokens.

    ``offsets[t]`` are the character offsets of teacher token ``t`` in the passage
    text; ``start`` and ``end`` are probabilities over those tokens (each sums to
    1: a softmax over the passage tokens only).  For a passage cut into windows,
    each token's logits come from the window where it has the most context on
    both sides (BERT's SQuAD rule) before the softmax.
    """

    offsets: np.ndarray  # (T, 2) int64
    start_logits: np.ndarray  # (T,) float32
    end_logits: np.ndarray  # (T,) float32
    selection_logit: float  # of the first window

    @property
    def start(self) -> np.ndarray:
        return _softmax(self.start_logits)

    @property
    def end(self) -> np.ndarray:
        return _softmax(self.end_logits)

    def char_start(self, n_chars: int) -> np.ndarray:
        """Start probability at each character: a token's mass sits on its first character."""
        out = np.zeros(n_chars, dtype=np.float32)
        np.add.at(out, self.offsets[:, 0], self.start)
        return out

    def char_end(self, n_chars: int) -> np.ndarray:
        """End probability at each character: a token's mass sits on its last character."""
        out = np.zeros(n_chars, dtype=np.float32)
        np.add.at(out, self.offsets[:, 1] - 1, self.end)
        return out

    def project(
        self, offsets: np.ndarray | Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Start/end distributions over another tokenization of the same passage.

        ``offsets`` are that tokenization's ``(start, end)`` characters per token
        (tokens outside the passage may be ``(-1, -1)`` or empty: they get 0).
        Teacher start mass goes to the student token containing the teacher
        token's first character, end mass to the one containing its last; mass
        no student token covers is dropped and the rest renormalised.
        """
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        n_chars = int(max(self.offsets[:, 1].max(initial=0), offs[:, 1].max(initial=0)))
        owner = np.full(n_chars + 1, -1, dtype=np.int64)
        for t, (s, e) in enumerate(offs):
            if 0 <= s < e:
                owner[s:e] = t
        start = np.zeros(len(offs), dtype=np.float64)
        end = np.zeros(len(offs), dtype=np.float64)
        s_own = owner[self.offsets[:, 0]]
        e_own = owner[self.offsets[:, 1] - 1]
        ok = s_own >= 0
        np.add.at(start, s_own[ok], self.start[ok])
        ok = e_own >= 0
        np.add.at(end, e_own[ok], self.end[ok])
        return (start / max(start.sum(), 1e-12)).astype(np.float32), (
            end / max(end.sum(), 1e-12)
        ).astype(np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    if len(x) == 0:
        return x.astype(np.float32)
    z = np.exp(x.astype(np.float64) - x.max())
    return (z / z.sum()).astype(np.float32)


def start_end_distributions_many(
    reader: ReadingModel,
    questions: Sequence[str],
    passages: Sequence[str],
    titles: Sequence[str | None] | None = None,
    *,
    batch_size: int = 32,
    bf16: bool = False,
) -> list[SpanDistributions]:
    """Teacher distributions for each ``(questions[i], passages[i])`` pair."""
    with reader.reading():
        windows = windows_of(reader, questions, passages, titles)
        outputs = _run(reader, windows, batch_size, bf16)
    # token key (start, end) -> (context, start logit, end logit), per pair
    merged: list[dict[tuple[int, int], tuple[int, float, float]]] = [{} for _ in questions]
    first_sel: dict[int, float] = {}
    for w, (sl, el, sel) in zip(windows, outputs, strict=True):
        first_sel.setdefault(w.pair, sel)
        pos = np.nonzero(w.passage)[0]
        table = merged[w.pair]
        for rank, t in enumerate(pos):
            s, e = int(w.offsets[t, 0]), int(w.offsets[t, 1])
            if e <= s:
                continue
            context = min(rank, len(pos) - 1 - rank)
            key = (s, e)
            if key not in table or context > table[key][0]:
                table[key] = (context, float(sl[t]), float(el[t]))
    out = []
    for i, table in enumerate(merged):
        keys = sorted(table)
        out.append(
            SpanDistributions(
                offsets=np.asarray(keys, dtype=np.int64).reshape(-1, 2),
                start_logits=np.asarray([table[k][1] for k in keys], dtype=np.float32),
                end_logits=np.asarray([table[k][2] for k in keys], dtype=np.float32),
                selection_logit=first_sel.get(i, float("-inf")),
            )
        )
    return out


def start_end_distributions(
    reader: ReadingModel, question: str, passage_text: str, title: str | None = None, **options: Any
) -> SpanDistributions:
    """Teacher start/end distributions of one passage (see :class:`SpanDistributions`)."""
    return start_end_distributions_many(
        reader, [question], [passage_text], [title] if title is not None else None, **options
    )[0]
