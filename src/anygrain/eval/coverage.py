"""Do a question set's judgements name units of the index at all?

Qrels name unit ids; a unit that is not in the index can never be retrieved, so its
judgement silently lowers every metric.  When *none* of the ids is there (the
questions of one corpus run against another), every metric is 0 and nothing else
says why, so :func:`check_qrels_coverage` refuses that case and reports the count
otherwise.

:func:`judge_by_gold` turns the gold passage of each answerable question into
qrels, so a passage index can be scored by *which* passage it returns (SQuAD's
paragraph) rather than by whether the passage contains an answer string.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError

__all__ = ["QrelsCoverage", "check_qrels_coverage", "judge_by_gold", "qrels_coverage"]

log = logging.getLogger(__name__)

# how many missing ids an error or warning quotes
_EXAMPLES = 3


@dataclass(frozen=True)
class QrelsCoverage:
    """Distinct unit ids named in the qrels, and those the index does not hold."""

    n_ids: int
    n_missing: int
    missing_examples: tuple[str, ...] = ()

    @property
    def n_found(self) -> int:
        return self.n_ids - self.n_missing


def qrels_coverage(questions: Iterable[Question], contains: Callable[[str], bool]) -> QrelsCoverage:
    """Count the distinct qrels ids (any grade) that ``contains`` does not know."""
    ids = dict.fromkeys(uid for q in questions for uid in q.qrels)
    missing = [uid for uid in ids if not contains(uid)]
    return QrelsCoverage(len(ids), len(missing), tuple(missing[:_EXAMPLES]))


def check_qrels_coverage(
    questions: Sequence[Question], contains: Callable[[str], bool], *, where: str
) -> QrelsCoverage:
    """:func:`qrels_coverage`, raising when no id is in the index and logging a warning when
    some are not; ``where`` names the index and question set in the messages."""
    cov = qrels_coverage(questions, contains)
    if cov.n_ids and cov.n_found == 0:
        raise AnygrainError(
            f"{where}: none of the {cov.n_ids} unit ids in the qrels is in the index's corpus "
            f"(e.g. {', '.join(repr(x) for x in cov.missing_examples)}); every metric would be 0. "
            "Are the questions from another corpus, or the index built from another source?"
        )
    if cov.n_missing:
        log.warning(
            "%s: %d of %d qrels ids are not in the index's corpus (e.g. %s); "
            "those units can never be retrieved",
            where,
            cov.n_missing,
            cov.n_ids,
            ", ".join(repr(x) for x in cov.missing_examples),
        )
    return cov


def judge_by_gold(questions: Iterable[Question], *, source: str = "") -> list[Question]:
    """Each answerable question judged by its gold passages (qrels ``{id: 1}``), not answers.

    Questions with qrels are already judged by unit id and stay as they are, and so do
    unanswerable ones (left out of every metric); an answerable
    one without a gold passage is an error, since it could only ever score 0.
    """
    where = f"{source}: " if source else ""
    out = []
    for q in questions:
        if not q.answerable or q.qrels:  # qrels already judge by unit id
            out.append(q)
            continue
        if not q.gold:
            raise AnygrainError(
                f"{where}question {q.id!r} has no gold passage to judge by; "
                "scope gold-passage needs questions that name their passage (SQuAD-style)"
            )
        out.append(
            dataclasses.replace(
                q, answers=[], answers_are_regex=False, qrels=dict.fromkeys(q.gold, 1)
            )
        )
    return out
