"""Hit: what every search returns, whatever the kind of index."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class Unit(str, enum.Enum):
    """The grain of a hit."""

    PHRASE = "phrase"
    SENTENCE = "sentence"
    PASSAGE = "passage"
    DOCUMENT = "document"
    ANSWER = "answer"  # a span a reader read out of the top retrieved passages


@dataclass(frozen=True, slots=True)
class UnitSearchStats:
    """How one query's unit search went (phrase indexes, sentence/passage/document grain).

    ``rounds`` of MIPS at doubling depth, the last at ``depth`` per side; ``units`` found;
    ``exhausted``: it stopped at the depth bound before its stopping rule held; ``exact``:
    its top units are provably those of an exhaustive search.
    """

    rounds: int
    depth: int
    units: int
    exhausted: bool
    exact: bool

    @staticmethod
    def summary(stats: list[UnitSearchStats]) -> dict[str, Any]:
        """Counts over queries, JSON-ready (eval reports)."""
        rounds: dict[str, int] = {}
        for s in stats:
            rounds[str(s.rounds)] = rounds.get(str(s.rounds), 0) + 1
        n = len(stats)
        return {
            "queries": n,
            "mean_rounds": round(sum(s.rounds for s in stats) / n, 4) if n else 0.0,
            "max_rounds": max((s.rounds for s in stats), default=0),
            "rounds": dict(sorted(rounds.items(), key=lambda kv: int(kv[0]))),
            "exhausted": sum(s.exhausted for s in stats),
            "exact": sum(s.exact for s in stats),
            "max_depth": max((s.depth for s in stats), default=0),
        }


@dataclass(slots=True)
class Hit:
    """One retrieved unit.

    ``span`` is the character span of a phrase, sentence or read answer inside ``text``
    (the passage text); for passages and documents it is ``None``.  Answer hits also
    carry the span of the ``sentence`` holding the answer, the ``reader_score`` of the
    span (start + end logit) and the ``retrieval_score`` of its passage; ``score``
    combines the two (:mod:`anygrain.reader.answering`).  ``confidence`` is the calibrated
    probability that an answer is correct (:mod:`anygrain.reader.confidence`; None where
    the reader has no calibration, and on other hits); passage hits that carry one are the
    evidence of a question left unanswered (below the minimum confidence), and it is the
    best answer's.

    ``meta`` is the passage's metadata (:meth:`CorpusStore.hit_meta
    <anygrain.corpus.store.CorpusStore.hit_meta>`): its document's extra fields, the
    passage's own, and ``start`` / ``end``, the passage's offsets in its document's text.
    A passage from a file adds where it came from: ``source`` (the file, relative to the
    folder indexed), ``page`` (PDF, from 1), ``headings`` (the heading path), ``line`` (a
    CSV/JSONL record's), ``format`` and ``sha256`` (:mod:`anygrain.corpus.files`).
    :attr:`char_start` / :attr:`char_end` are the hit's own offsets in its document's
    text, and :attr:`citation` says where it is in words.
    """

    unit: Unit
    score: float
    passage_row: int
    passage_id: str
    doc_id: str
    title: str
    text: str
    span: tuple[int, int] | None = None
    sentence: tuple[int, int] | None = None
    reader_score: float | None = None
    retrieval_score: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    confidence: float | None = None
    # a passage hit found through a span (a phrase index's best phrase): where a reader
    # may read a window instead of the whole passage
    focus: tuple[int, int] | None = None

    @property
    def relevance(self) -> float:
        """How relevant the hit is, in [0, 1], for thresholds: an answer's calibrated
        :attr:`confidence` where it has one, else :func:`score_relevance` of the score (a
        fixed monotone map: a higher score is never less relevant)."""
        if self.unit is Unit.ANSWER and self.confidence is not None:
            return float(self.confidence)
        return score_relevance(self.score)

    @property
    def unit_id(self) -> str:
        """The id evaluation compares with qrels for this unit."""
        if self.unit is Unit.DOCUMENT:
            return self.doc_id
        return self.passage_id

    @property
    def char_start(self) -> int | None:
        """Where the hit (its span, or its passage) starts in its document's text: the
        extracted text of its file, ``store.document_text(doc_id)[char_start:char_end] ==
        answer_text``; None when the passage's offsets are unknown."""
        start = self.meta.get("start")
        if not isinstance(start, int):
            return None
        return start + (self.span[0] if self.span is not None else 0)

    @property
    def char_end(self) -> int | None:
        """Where the hit ends in its document's text (see :attr:`char_start`)."""
        start = self.char_start
        if start is None:
            return None
        return start + len(self.answer_text)

    @property
    def citation(self) -> str:
        """Where the hit is, to cite: ``file › heading › heading · page N`` (``· line N``
        for a record) for a passage read from a file, else the passage's title."""
        source = self.meta.get("source")
        # a file's documents record its hash too: a record's own "source" field is not one
        if not isinstance(source, str) or not source or "sha256" not in self.meta:
            return self.title
        heads = self.meta.get("headings")
        parts = [source, *(str(h) for h in heads)] if isinstance(heads, list) else [source]
        where = " › ".join(parts)
        for key in ("page", "line"):
            if isinstance(self.meta.get(key), int):
                return f"{where} · {key} {self.meta[key]}"
        return where

    @property
    def answer_text(self) -> str:
        """The phrase for phrase hits; the passage text otherwise."""
        if self.span is not None:
            return self.text[self.span[0] : self.span[1]]
        return self.text

    def context(self, width: int = 80) -> tuple[str, str, str]:
        """``(before, phrase, after)``: the phrase with up to ``width`` characters either side
        (:func:`anygrain.hits.highlight.phrase_context`)."""
        from anygrain.hits.highlight import phrase_context

        return phrase_context(self, width)

    def to_json(self, rank: int) -> dict[str, Any]:
        """The one JSON shape of a hit, ``rank`` 1 for the best: ``anygrain search --json``
        prints it and the HTTP server returns it (:mod:`anygrain.serve.schemas` matches it).

        ``before + answer + after`` is the passage ``text``; ``answer`` is the phrase,
        sentence or read answer at ``span`` (empty, and ``span`` null, for passage and
        document hits); ``sentence``, ``reader_score`` and ``retrieval_score`` are null
        except on answer hits; ``meta`` is :attr:`meta`; ``char_start`` / ``char_end``
        the hit's offsets in its document's text and ``citation`` where it is (the
        properties of those names)."""
        from anygrain.hits.highlight import highlight

        h = highlight(self)
        return {
            "rank": rank,
            "unit": self.unit.value,
            "score": float(self.score),
            "passage_row": int(self.passage_row),
            "passage_id": self.passage_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "text": self.text,
            "span": list(self.span) if self.span is not None else None,
            "before": h.before,
            "answer": h.answer,
            "after": h.after,
            "sentence": list(self.sentence) if self.sentence is not None else None,
            "reader_score": _finite(self.reader_score),
            "retrieval_score": _finite(self.retrieval_score),
            "confidence": _finite(self.confidence),
            "meta": dict(self.meta),
            "char_start": self.char_start,
            "char_end": self.char_end,
            "citation": self.citation,
        }


def score_relevance(score: float) -> float:
    """A score as a relevance in [0, 1]: ``0.5 + score / (2 * (1 + |score|))``, strictly
    increasing, 0.5 at 0, so one threshold reads the same on every kind's scale (BM25's
    unbounded positive scores, phrase and dense inner products, which may be negative);
    not a probability.  NaN is 0."""
    x = float(score)
    if math.isnan(x):
        return 0.0
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    return 0.5 + x / (2.0 * (1.0 + abs(x)))


def check_threshold(threshold: float | None) -> float | None:
    """``threshold`` as a relevance threshold (None for none); a ``ValueError`` names one
    outside [0, 1]."""
    if threshold is None:
        return None
    t = float(threshold)
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"score_threshold must be between 0 and 1 (a relevance), got {threshold}")
    return t


def above_threshold(hits: Sequence[Hit], threshold: float | None) -> list[Hit]:
    """The hits whose :attr:`Hit.relevance` is at least ``threshold``, in order (all of
    them for None)."""
    t = check_threshold(threshold)
    return list(hits) if t is None else [h for h in hits if h.relevance >= t]


def _finite(x: float | None) -> float | None:
    """A score for JSON: None where it is missing or not finite (JSON has no Infinity)."""
    return None if x is None or not math.isfinite(x) else float(x)


def hits_json(hits: Sequence[Hit]) -> list[dict[str, Any]]:
    """Each hit's :meth:`Hit.to_json`, ranked from 1 in order."""
    return [h.to_json(i) for i, h in enumerate(hits, 1)]
