"""Relevance of retrieved units to one question: the judgement every metric reads.

A unit is judged, in this order of precedence:

1. **qrels** -- when the question has qrels, its gain is ``qrels[hit.unit_id]``
   (missing = 0, negative grades count as 0 as in trec_eval) and it is relevant
   when the gain is positive.  Hits are de-duplicated by unit id first (keeping the
   best ranked), because trec_eval sees each document once;
2. **phrase hits** -- otherwise a phrase is relevant when it *is* an answer
   (:func:`~anygrain.eval.answers.phrase_match`);
3. **answer strings** -- otherwise the unit (its sentence for sentence hits, its
   text for passages and documents) is relevant when it contains an answer
   (:func:`~anygrain.eval.answers.has_answer`, regex when
   ``question.answers_are_regex``).

Answer matching is the costly part, so gains are computed lazily and cached: a
top@k that finds a relevant unit at rank 2 never looks at the other 998.
"""

from __future__ import annotations

from collections.abc import Sequence

from anygrain.corpus.questions import Question
from anygrain.eval.answers import AnswerMatcher
from anygrain.eval.runs import dedupe_hits
from anygrain.hits.hit import Hit, Unit

__all__ = ["Judged", "gold_sets"]


def gold_sets(question: Question) -> list[list[str]]:
    """The question's gold provenance sets (KILT): ``meta['gold_sets']`` or ``[gold]``.

    KILT gives one provenance set per acceptable output; readers that keep them put
    a list of id lists in ``question.meta['gold_sets']``.  Without it, ``gold`` is
    taken as one set.
    """
    raw = question.meta.get("gold_sets") if question.meta else None
    if isinstance(raw, (list, tuple)) and raw:
        sets = []
        for s in raw:
            if isinstance(s, (list, tuple, set, frozenset)):
                sets.append(list(dict.fromkeys(str(x).strip() for x in s)))
        if sets:
            return sets
    return [list(dict.fromkeys(str(x).strip() for x in question.gold))] if question.gold else []


class Judged:
    """One question's ranked hits with relevance worked out on demand."""

    def __init__(self, question: Question, hits: Sequence[Hit]) -> None:
        self.question = question
        self.uses_qrels = bool(question.qrels)
        self.hits: list[Hit] = dedupe_hits(hits) if self.uses_qrels else list(hits)
        self._gains: list[float] = []
        self._matcher: AnswerMatcher | None = None
        if not self.uses_qrels and question.answers:
            self._matcher = AnswerMatcher(question.answers, regex=question.answers_are_regex)

    def __len__(self) -> int:
        return len(self.hits)

    def _judge(self, hit: Hit) -> float:
        if self.uses_qrels:
            return float(max(self.question.qrels.get(hit.unit_id, 0), 0))
        if self._matcher is None:
            return 0.0
        if hit.unit is Unit.PHRASE:
            return float(self._matcher.matches_phrase(hit.answer_text))
        return float(self._matcher.in_text(hit.answer_text))

    def gain(self, i: int) -> float:
        """Gain of the hit at 0-based rank ``i`` (graded with qrels, else 0/1)."""
        while len(self._gains) <= i:
            self._gains.append(self._judge(self.hits[len(self._gains)]))
        return self._gains[i]

    def relevant(self, i: int) -> bool:
        return self.gain(i) > 0

    def first_relevant(self, k: int) -> int | None:
        """0-based rank of the first relevant hit within the top ``k``, if any."""
        for i in range(min(k, len(self.hits))):
            if self.relevant(i):
                return i
        return None

    def n_relevant_in(self, k: int) -> int:
        return sum(1 for i in range(min(k, len(self.hits))) if self.relevant(i))

    @property
    def n_relevant(self) -> int:
        """Judged relevant units in the qrels (rel > 0); 0 without qrels."""
        return sum(1 for r in self.question.qrels.values() if r > 0)

    @property
    def ideal_gains(self) -> list[float]:
        """Qrels gains, best first: the ideal ranking nDCG normalises by."""
        return sorted((float(r) for r in self.question.qrels.values() if r > 0), reverse=True)
