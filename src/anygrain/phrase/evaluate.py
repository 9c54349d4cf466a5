"""Evaluating a phrase index: EM/F1 of the top phrase and top@k, open corpus or D = {p}
(how :meth:`PhraseIndex.evaluate_questions` scores; the entry is
:func:`anygrain.api.evaluate_index`).

``scope="gold-passage"`` is the reading-comprehension setting (D = {p}): each
question is searched only in its own gold passage, so the score measures the
phrase representations alone, with no retrieval errors mixed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError
from anygrain.eval import EvalReport, evaluate, parse_metrics
from anygrain.eval.coverage import check_qrels_coverage
from anygrain.hits.hit import Hit, Unit, UnitSearchStats
from anygrain.index.base import Index
from anygrain.index.registry import IndexKind
from anygrain.index.scope import Scope, gold_rows


class _Scoped:
    """Feeds each question's gold passage as its scope, in the order ``evaluate`` searches."""

    kind = IndexKind.PHRASE

    def __init__(
        self, index: Any, questions: Sequence[Question], rows: Sequence[list[int]]
    ) -> None:
        self.index = index
        self.questions = list(questions)
        self.rows = list(rows)
        self.pos = 0

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        n = len(queries)
        qs = self.questions[self.pos : self.pos + n]
        if [q.text for q in qs] != list(queries):
            raise AnygrainError("internal error: scoped search got questions out of order")
        rows = self.rows[self.pos : self.pos + n]
        self.pos += n
        return self.index.search(list(queries), k, scope_rows=rows, **options)  # type: ignore[no-any-return]


# the grains at which a question searched in its one gold passage has a single candidate
ONE_CANDIDATE_UNITS = (Unit.PASSAGE, Unit.DOCUMENT)


def refuse_one_candidate_metrics(
    where: str | Path, unit: Unit, scope: Scope, metrics: Sequence[str]
) -> None:
    """Refuse unit metrics (top@k, mrr, recall, ...) at a passage or document searched in
    its one gold passage: each question has a single candidate there, so they read 1 or 0
    at every cutoff (top@1 = top@20), a figure that measures nothing.  EM/F1 of the top
    hit's phrase still mean what they do at any grain."""
    if scope is not Scope.GOLD_PASSAGE or unit not in ONE_CANDIDATE_UNITS:
        return
    bad = [m.name for m in parse_metrics(list(metrics)) if m.family not in ("em", "f1")]
    if bad:
        raise AnygrainError(
            f"{where}: with scope gold-passage each question is searched in its one gold "
            f"passage, so at unit {unit.value} it has a single candidate and "
            f"{', '.join(bad)} would be 1 or 0 at every cutoff; ask for em,f1 only "
            f"(--metrics em,f1), --unit phrase or sentence, or --scope corpus"
        )


def evaluate_phrase(
    index: Index,
    questions: Questions,
    *,
    k: int | None,
    unit: Unit,
    scope: Scope,
    metrics: Sequence[str],
    batch_size: int = 64,
    run_out: str | Path | None = None,
    drop_empty: bool = False,
    progress: bool = True,
    search_options: dict[str, Any] | None = None,
    where: str = "",
) -> EvalReport:
    """EM, F1 (of the top-1 phrase) and top@k of a phrase index, at ``unit`` (checked by the
    caller, :meth:`PhraseIndex.evaluate_questions`; everyone else calls
    :func:`anygrain.api.evaluate_index`), with how many of the questions' qrels ids the
    index holds (``where``: the question set, for the warning).  ``k`` (hits per question) defaults to the
    largest cutoff the metrics ask for, as in :func:`anygrain.eval.evaluate`.

    ``scope`` is the corpus (open retrieval over the whole index) or the gold passage
    (D = {p}: each question searched in its gold passage only).  Over the corpus at a
    coarser ``unit`` the report's ``unit_search`` summarises the search rounds
    (:class:`~anygrain.hits.hit.UnitSearchStats`).
    """
    if k is not None and k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    refuse_one_candidate_metrics(index.path, unit, scope, metrics)
    coverage = check_qrels_coverage(questions, index.unit_ids(unit), where=where)
    qs = list(questions)
    ms = list(metrics)
    collected: list[UnitSearchStats] = []
    opts = {"unit": unit, "stats": collected, **(search_options or {})}
    common: dict[str, Any] = dict(
        batch_size=batch_size, run_out=run_out, drop_empty=drop_empty, progress=progress
    )
    if scope is Scope.CORPUS:
        report = evaluate(index, qs, ms, k=k, search_options=opts, **common)
        if unit is not Unit.PHRASE:
            report.extra["unit_search"] = UnitSearchStats.summary(collected)
    else:
        parsed = parse_metrics(ms)
        # the same questions, in the same order, as ``evaluate`` will search
        searched = [q for q in qs if run_out is not None or any(m.applies(q) for m in parsed)]
        rows = [gold_rows(index.corpus, q, source=questions.source)[:1] for q in searched]
        report = evaluate(
            _Scoped(index, searched, rows), qs, ms, k=k, search_options=opts, **common
        )
    report.n_qrels_ids = coverage.n_ids
    report.n_qrels_ids_missing = coverage.n_missing
    return report
