"""Retrieve, then read: answer hits from a reader over the top passages of any index.

For each question the index ranks passages (a phrase index by its best phrase, with its
fused sparse + dense scores; BM25, dense, hybrid and sharded indexes as they search), the
reader reads the top ``passages`` of them in one batch with every other question's, and
each passage window proposes its best spans.  A span's score combines the two models
(BERTserini's linear combination, with the retriever's scores put on one scale for any
kind of index)::

    score = reader_score + retriever_weight * (r - r_best) / spread

where ``reader_score`` is the span's start + end logit, ``r`` its passage's retrieval
score, ``r_best`` the question's best and ``spread`` the standard deviation of the
question's retrieval scores over the passages read (1 when they are all equal), so the
weight means the same for BM25's, a dense index's and a phrase index's scores.  The
defaults were chosen on held-out SQuAD training articles (``bench/reader.py``), never on
a test set.

The answers come back as :class:`~anygrain.hits.hit.Hit` objects of unit ``answer``: the
span in its passage (``span``), the sentence holding it (``sentence``), its passage and
document, and both scores.  Spans with the same text (after SQuAD normalisation) are
merged, keeping the best, so ``k`` answers are ``k`` different answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.errors import AnygrainError
from anygrain.eval.squad import normalize_answer
from anygrain.hits.hit import Hit, Unit
from anygrain.reader.confidence import (
    CONFIDENCE_FILE,
    MARGIN_CAP,
    Calibration,
    confidence_for,
)
from anygrain.reader.features import focus_windows
from anygrain.reader.read import window_spans, windows_of
from anygrain.reader.runtime import ReadingModel

if TYPE_CHECKING:
    from anygrain.encode.runtime import Runtime
    from anygrain.reader.config import ReaderConfig

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_PASSAGES",
    "DEFAULT_RETRIEVER_WEIGHT",
    "ReadSettings",
    "SpanCandidate",
    "abstain_or_answer",
    "answer_features",
    "answer_hits",
    "check_reader_language",
    "combine",
    "load_reader_for",
    "how_much_to_read",
    "ranked_answers",
    "read_passages",
    "span_candidates",
]

DEFAULT_PASSAGES = 3
DEFAULT_RETRIEVER_WEIGHT = 1.5
MAX_PASSAGES = 100
MIN_WINDOW, MAX_WINDOW = 32, 512
DEFAULT_WINDOW = 128
DEFAULT_SURE = 0.33


@dataclass(frozen=True)
class ReadSettings:
    """How answers are read: ``passages`` read per question, the ``retriever_weight`` of
    the passage's retrieval score, the reader's batch (windows per forward pass), bf16
    (None: where the CPU has it natively), spans kept per window and ``min_confidence``:
    below it the answer is "no answer" (:func:`abstain_or_answer`; None: always answer).

    Over a phrase index each passage hit carries the phrase that found it (``focus``):
    ``window`` tokens around the first one's are read instead of the whole passage, and
    every passage whole only when the best span there is less likely than ``sure``
    (:func:`span_candidates`); hits without a focus are read whole, every one."""

    passages: int = DEFAULT_PASSAGES
    retriever_weight: float = DEFAULT_RETRIEVER_WEIGHT
    batch_size: int = 32
    bf16: bool | None = None
    spans_per_window: int = 4
    min_confidence: float | None = None
    # tokens read around a passage's focus (the span that found it), not the whole
    # passage; None reads whole passages
    window: int | None = DEFAULT_WINDOW
    # the probability of the first passage's best span (in its window) above which no
    # more is read (where the first has a focus); below it every passage is read whole;
    # None reads every passage's window
    sure: float | None = DEFAULT_SURE
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.passages <= MAX_PASSAGES:
            problems.append(f"passages read must be in 1..{MAX_PASSAGES}, not {self.passages}")
        w = self.retriever_weight
        if not (isinstance(w, int | float) and math.isfinite(w) and 0 <= w <= 1e3):
            problems.append(f"retriever weight must be a number in [0, 1000], not {w!r}")
        if self.batch_size < 1:
            problems.append("reader batch size must be >= 1")
        if self.spans_per_window < 1:
            problems.append("spans per window must be >= 1")
        if self.window is not None and not (
            isinstance(self.window, int) and MIN_WINDOW <= self.window <= MAX_WINDOW
        ):
            problems.append(
                f"read window must be a number of tokens in {MIN_WINDOW}..{MAX_WINDOW}, "
                f"not {self.window!r}"
            )
        m = self.min_confidence
        if m is not None and not (isinstance(m, int | float) and 0 <= m <= 1):
            problems.append(f"min confidence must be a number in [0, 1], not {m!r}")
        p = self.sure
        if p is not None and not (isinstance(p, int | float) and 0 <= p <= 1):
            problems.append(f"sure must be a probability in [0, 1], not {p!r}")
        if problems:
            raise AnygrainError("; ".join(problems))

    def use_bf16(self) -> bool:
        """Whether a reader on torch reads in bfloat16
        (:func:`~anygrain.models.runtime.reader_bf16`)."""
        from anygrain.models.runtime import reader_bf16

        return reader_bf16(self.bf16)


def how_much_to_read(window: int | None, sure: float | None) -> dict[str, Any]:
    """``ReadSettings``' ``window`` and ``sure`` from a user's options: None keeps the
    default, a window of 0 reads whole passages and a ``sure`` of 1 every passage."""
    out: dict[str, Any] = {}
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int):
            raise AnygrainError(f"read window must be a number of tokens, not {window!r}")
        out["window"] = None if window == 0 else window
    if sure is not None:
        out["sure"] = None if isinstance(sure, int | float) and sure == 1 else sure
    return out


def _spread(scores: np.ndarray) -> float:
    if len(scores) < 2:
        return 1.0
    sd = float(np.std(scores))
    return sd if sd > 1e-9 and math.isfinite(sd) else 1.0


def _sentence_of(starts: Sequence[int], ends: Sequence[int], a: int, b: int) -> tuple[int, int]:
    """The sentence span holding ``[a, b)``: from the sentence of ``a`` to that of ``b - 1``
    (an answer across a sentence break takes both); the answer itself when none is known."""
    first = last = None
    for s, e in zip(starts, ends, strict=True):
        if first is None and s <= a < e:
            first = s
        if s < b <= e:
            last = e
            break
    if first is None or last is None or last < b:
        return (a, b)
    return (int(first), int(last))


@dataclass(frozen=True, slots=True)
class SpanCandidate:
    """A span one passage window proposes: its passage's place among the hits read, its
    characters in the passage text, its reader score, its log probability among its
    window's spans and the window's selection logit (NaN: not known)."""

    passage: int
    start: int
    end: int
    reader_score: float
    log_prob: float = math.nan
    selection: float = math.nan


def span_candidates(
    reader: ReadingModel,
    questions: Sequence[str],
    passage_hits: Sequence[Sequence[Hit]],
    settings: ReadSettings,
    n: int = 1,
) -> list[list[SpanCandidate]]:
    """The reader's best spans in each question's hits (all of them, in one batch with
    every other question's): the ``max(n, spans_per_window)`` best of every window.

    With a ``window`` and ``sure`` in ``settings``, a question whose first hit has a focus
    is read in two steps: the first hit's window, then, only when the best span there has a
    probability (among that window's spans) below ``sure``, every hit whole (the window's
    spans give way to them).  Reading the unsure questions whole, rather than the other
    hits' windows, loses less for the time it takes (``bench/read_policy.py``)."""
    out: list[list[SpanCandidate]] = [[] for _ in questions]
    pairs = [(qi, pi) for qi, hs in enumerate(passage_hits) for pi in range(len(hs))]
    if settings.window is None or settings.sure is None:
        _read_pairs(reader, questions, passage_hits, pairs, settings, n, out)
        return out
    first = [(qi, 0) for qi, hs in enumerate(passage_hits) if hs and hs[0].focus is not None]
    _read_pairs(reader, questions, passage_hits, first, settings, n, out)
    sure = {
        qi for qi, _ in first if out[qi] and max(c.log_prob for c in out[qi]) >= _log(settings.sure)
    }
    for qi, _ in first:
        if qi not in sure:
            out[qi] = []
    rest = [p for p in pairs if p[0] not in sure]
    whole = replace(settings, window=None)
    _read_pairs(reader, questions, passage_hits, rest, whole, n, out)
    return out


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def _read_pairs(
    reader: ReadingModel,
    questions: Sequence[str],
    passage_hits: Sequence[Sequence[Hit]],
    pairs: Sequence[tuple[int, int]],
    settings: ReadSettings,
    n: int,
    out: list[list[SpanCandidate]],
) -> None:
    """Read the ``(question, hit)`` ``pairs`` in one batch, adding their spans to ``out``."""
    if not pairs:
        return
    with reader.reading():
        windows = windows_of(
            reader,
            [questions[qi] for qi, _ in pairs],
            [passage_hits[qi][pi].text for qi, pi in pairs],
            [passage_hits[qi][pi].title for qi, pi in pairs],
        )
        if settings.window is not None:
            foci = [passage_hits[qi][pi].focus for qi, pi in pairs]
            windows = focus_windows(windows, foci, settings.window)
        spans = window_spans(
            reader,
            windows,
            settings.batch_size,
            settings.use_bf16(),
            max(settings.spans_per_window, n),
        )
    for w, cands in zip(windows, spans, strict=True):
        qi, pi = pairs[w.pair]
        out[qi].extend(SpanCandidate(pi, a, b, sc, lp, sel) for a, b, sc, lp, sel in cands)


def combine(
    candidates: Sequence[SpanCandidate],
    hits: Sequence[Hit],
    k: int,
    *,
    passages: int,
    retriever_weight: float,
    sentences: dict[int, tuple[list[int], list[int]]] | None = None,
    calibration: Calibration | None = None,
) -> list[Hit]:
    """The top ``k`` answers of one question from its span candidates in the first
    ``passages`` of ``hits``: reader and retriever scores combined, one hit per answer text,
    each with its ``confidence`` where a ``calibration`` is given (else None)."""
    read = hits[:passages]
    if not read:
        return []
    ranked = ranked_answers(candidates, read, retriever_weight)
    conf: list[float | None] = [None] * len(ranked)
    if calibration is not None and ranked:
        features = answer_features(ranked, [h.score for h in read])
        conf = [float(p) for p in calibration.probability(features)]
    out = []
    for (total, c), confidence in list(zip(ranked, conf, strict=True))[:k]:
        hit = read[c.passage]
        st, en = (sentences or {}).get(hit.passage_row, ([], []))
        out.append(
            Hit(
                unit=Unit.ANSWER,
                score=total,
                passage_row=hit.passage_row,
                passage_id=hit.passage_id,
                doc_id=hit.doc_id,
                title=hit.title,
                text=hit.text,
                span=(c.start, c.end),
                sentence=_sentence_of(st, en, c.start, c.end),
                reader_score=c.reader_score,
                retrieval_score=hit.score,
                meta=hit.meta,
                confidence=confidence,
            )
        )
    return out


def ranked_answers(
    candidates: Sequence[SpanCandidate], read: Sequence[Hit], retriever_weight: float
) -> list[tuple[float, SpanCandidate]]:
    """One question's different answers in the passages ``read``, best first, as
    ``(combined score, best candidate of that text)``."""
    r = np.asarray([h.score for h in read], dtype=np.float64)
    prior = retriever_weight * (r - r.max()) / _spread(r)
    best: dict[str, tuple[float, SpanCandidate]] = {}
    for c in candidates:
        if c.passage >= len(read):
            continue
        text = read[c.passage].text[c.start : c.end]
        key = normalize_answer(text) or text
        total = c.reader_score + float(prior[c.passage])
        seen = best.get(key)
        if seen is None or total > seen[0]:
            best[key] = (total, c)
    return sorted(best.values(), key=lambda x: -x[0])


def answer_features(
    ranked: Sequence[tuple[float, SpanCandidate]], retrieval_scores: Sequence[float]
) -> np.ndarray:
    """``(N, len(FEATURES))`` confidence features of one question's answers, ranked best
    first as :func:`ranked_answers` gives them, from the retrieval scores of the passages
    read (:mod:`anygrain.reader.confidence`)."""
    r = np.asarray(retrieval_scores, dtype=np.float64)
    norm = (r - r.max()) / _spread(r)
    totals = [t for t, _ in ranked]
    rows = []
    for i, (total, c) in enumerate(ranked):
        margin = min(total - totals[i + 1], MARGIN_CAP) if i + 1 < len(ranked) else MARGIN_CAP
        rows.append([c.reader_score, c.log_prob, c.selection, float(norm[c.passage]), margin])
    return np.asarray(rows, dtype=np.float64)


def abstain_or_answer(
    answers: list[Hit], read: Sequence[Hit], min_confidence: float | None
) -> list[Hit]:
    """``answers``, or, when the best one's confidence is below ``min_confidence``, the
    passages read as evidence ("no answer"): passage hits carrying the best answer's
    confidence (0 when the passages held no span at all)."""
    if min_confidence is None:
        return answers
    best = answers[0].confidence if answers else 0.0
    if best is not None and best >= min_confidence:
        return answers
    return [replace(h, unit=Unit.PASSAGE, span=None, confidence=best) for h in read]


def answer_hits(
    reader: ReadingModel,
    questions: Sequence[str],
    passage_hits: Sequence[Sequence[Hit]],
    k: int = 1,
    settings: ReadSettings | None = None,
    sentences: Any = None,
) -> list[list[Hit]]:
    """The top ``k`` answers of each question, read from its ``passage_hits`` (the first
    ``settings.passages`` of them, best first as the retriever ranked them).

    ``sentences(rows)`` gives each passage row's ``(starts, ends)`` sentence offsets
    (a corpus store's columns); without it an answer's sentence is the answer itself."""
    s = settings or ReadSettings()
    if len(questions) != len(passage_hits):
        raise ValueError("questions and passage hits differ in length")
    calibration = calibration_for(reader, s.min_confidence)
    read = [list(h[: s.passages]) for h in passage_hits]
    cands = span_candidates(reader, questions, read, s, k)
    rows = sorted({h.passage_row for hs in read for h in hs})
    sent: dict[int, tuple[list[int], list[int]]] = {}
    if sentences is not None and rows:
        sent = dict(zip(rows, sentences(rows), strict=True))
    return [
        abstain_or_answer(
            combine(
                c,
                hs,
                k,
                passages=s.passages,
                retriever_weight=s.retriever_weight,
                sentences=sent,
                calibration=calibration,
            ),
            hs,
            s.min_confidence,
        )
        for c, hs in zip(cands, read, strict=True)
    ]


def calibration_for(reader: ReadingModel, min_confidence: float | None) -> Calibration | None:
    """The reader's confidence calibration (None without one); a ``min_confidence`` with
    none is refused in one line."""
    calibration = confidence_for(reader)
    if calibration is None and min_confidence is not None:
        name = getattr(reader, "loaded_from", "") or reader.config.base_model
        raise AnygrainError(
            f"min confidence: reader {name} has no confidence calibration ({CONFIDENCE_FILE}), "
            "so it cannot abstain; leave out the minimum confidence"
        )
    return calibration


def read_passages(
    index: Any,
    reader: ReadingModel,
    queries: Sequence[str],
    k: int = 1,
    settings: ReadSettings | None = None,
    **search_options: Any,
) -> list[list[Hit]]:
    """Retrieve the top passages of ``queries`` from ``index`` (any kind; ``search_options``
    are its own) and read the top ``k`` answers out of them."""
    s = settings or ReadSettings()
    passages = index.search(
        list(queries), s.passages, **index.unit_options(Unit.PASSAGE), **search_options
    )
    store = index.corpus

    def sentences(rows: list[int]) -> list[tuple[list[int], list[int]]]:
        return list(
            zip(store.column("sent_starts", rows), store.column("sent_ends", rows), strict=True)
        )

    return answer_hits(reader, queries, passages, k, s, sentences)


_LOADED: dict[tuple[str, float, str], ReadingModel] = {}
# the (reader, corpus language) pairs already warned about: a batch search loads per chunk
_WARNED: set[tuple[str, str]] = set()


def load_reader_for(
    index: Any,
    reader: str | Path | ReadingModel | None,
    runtime: Runtime | str | None = None,
) -> ReadingModel:
    """The reader given, or named (a directory or a shipped name), else the shipped reader
    for the language of the index's corpus, on ``runtime`` (:func:`anygrain.reader.onnx.
    load_reader`: ``auto``, ``onnx`` or ``torch``; a reader given as an object reads as it
    is).  Loaded readers are kept (by directory, config time and runtime), so a batch
    search or a server loads each once.  A reader trained for other languages than the
    corpus's is refused (:func:`check_reader_language`)."""
    from anygrain.encode.onnx_runtime import parse_runtime
    from anygrain.models.shipped import default_reader, saved_model_dir
    from anygrain.reader.config import saved_config
    from anygrain.reader.onnx import load_reader

    lang = _corpus_lang(index)
    if reader is not None and not isinstance(reader, str | Path):
        check_reader_language(reader.config, lang, getattr(reader, "loaded_from", ""))
        return reader
    if reader is None:
        reader = default_reader(lang)
    path = saved_model_dir(reader).resolve()
    saved = saved_config(path)  # refused before the reader loads (seconds)
    if saved is not None:
        check_reader_language(saved, lang, str(reader))
    try:
        stamp = max(f.stat().st_mtime for f in path.glob("*.json"))
    except ValueError:  # no config at all: Reader.load says what is wrong
        stamp = 0.0
    key = (str(path), stamp, parse_runtime(runtime).value)
    if key not in _LOADED:
        _LOADED.clear()  # one reader at a time: each is large
        _LOADED[key] = load_reader(path, runtime)
    return _LOADED[key]


def _corpus_lang(index: Any) -> str | None:
    """The language of ``index``'s corpus; None without an index or a corpus (a stand-in)."""
    from anygrain.corpus.lang import detect_lang

    if index is None:
        return None
    try:
        store = index.corpus
    except (AttributeError, NotImplementedError):
        return None
    return detect_lang(store).value


def check_reader_language(config: ReaderConfig, lang: str | None, name: str = "") -> None:
    """Refuse, in one line naming both languages, a reader (by its ``config``) trained for
    other languages than ``lang`` (the corpus's; None: not known).  A reader over a
    multilingual base model is only warned about: it still reads other languages (less
    well), while one over an English-only base reads Chinese as noise.  A reader that records
    no languages (saved before they were) reads anything."""
    if lang is None:
        return
    why = config.language_mismatch(lang)
    if why is None:
        return
    label = name or config.base_model
    if not config.multilingual:
        raise AnygrainError(
            f"reader {label}: {why}; give a reader trained for {lang} (--reader), or none to "
            "use the one shipped for the corpus language"
        )
    if (label, lang) not in _WARNED:
        _WARNED.add((label, lang))
        log.warning(
            "reader %s: %s; its base model (%s) is multilingual, so it reads on, less well "
            "than a reader trained for %s",
            label,
            why,
            config.base_model,
            lang,
        )
