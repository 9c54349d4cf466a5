"""The scoring engine under every evaluation: an index (or any searcher, or a ready-made run)
on a question set.  Users evaluate an index with ``anygrain.evaluate_index``, which takes
paths and lets the index kind choose units, scopes and default metrics.

``evaluate`` searches in batches, scores each batch at once and lets its hits go
(so 1000 hits x many thousand queries never sit in memory), optionally streams a
TREC run file, and returns an :class:`EvalReport`.

Conventions, chosen so nothing is dropped silently:

* ``n_questions`` counts every question given.  Each metric is averaged over the
  questions it applies to (see :mod:`anygrain.eval.metrics`); how many is in
  ``n_evaluated``.  Questions with neither answers nor qrels (SQuAD v2
  unanswerable ones) are left out of every metric and counted in
  ``n_unanswerable_skipped``; they are not searched unless a run file is written.
* A question with no hits scores 0 (trec_eval ``-c``).  ``drop_empty=True``
  instead leaves such questions out of every mean, which is what the Multi-CPR
  evaluation script does (it averages over the queries present in the result
  file); their number is in ``n_empty`` either way.  Multi-CPR's MRR@10 and
  Recall@1000 both come from one ranked list of 1000: ``k`` defaults to the
  largest cutoff requested.
* ``seconds`` and ``queries_per_second`` time the ``index.search`` calls only.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError, UsageError, parse_enum
from anygrain.eval.metrics import Metric, parse_metrics
from anygrain.eval.relevance import Judged
from anygrain.eval.runs import RunWriter
from anygrain.hits.hit import Hit, Unit

__all__ = ["DEFAULT_METRICS", "EvalReport", "check_eval_unit", "evaluate", "evaluate_run"]

log = logging.getLogger(__name__)

# for a run or a searcher that is no index; an index's own are its kind's ``default_metrics``
DEFAULT_METRICS = ("top@1", "top@5", "top@20", "mrr@20")


def check_eval_unit(unit: Unit | str | None) -> None:
    """Refuse the answer grain: these metrics score what an index retrieves, and would be
    reported under the answer's name; read answers are scored by the reader's evaluation."""
    if unit is not None and parse_enum(Unit, unit) is Unit.ANSWER:
        raise UsageError(
            "unit answer: eval scores what an index retrieves; for the EM/F1 of read answers "
            "use evaluate_reader (anygrain eval-reader INDEX --questions ...)"
        )


class Searcher(Protocol):
    """What ``evaluate`` needs of an index."""

    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]: ...


@dataclass
class EvalReport:
    """Mean metric values and how they were obtained."""

    n_questions: int
    metrics: dict[str, float]
    n_evaluated: dict[str, int] = field(default_factory=dict)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    n_unanswerable_skipped: int = 0
    n_skipped_records: int = 0  # malformed question records dropped under --on-error skip
    n_empty: int = 0
    empty_ids: list[str] = field(default_factory=list)  # the questions with no hits
    # distinct unit ids named in the qrels, and how many of them the index does not hold
    n_qrels_ids: int = 0
    n_qrels_ids_missing: int = 0
    drop_empty: bool = False
    k: int | None = None
    seconds: float | None = None
    queries_per_second: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # index-specific (e.g. unit_search)

    def to_dict(self, *, per_question: bool = False) -> dict[str, Any]:
        """JSON-ready summary (the CLI's ``--json``); per-question values on request."""
        d: dict[str, Any] = {
            "n_questions": self.n_questions,
            "metrics": dict(self.metrics),
            "n_evaluated": dict(self.n_evaluated),
            "n_unanswerable_skipped": self.n_unanswerable_skipped,
            "n_skipped_records": self.n_skipped_records,
            "n_empty": self.n_empty,
            "n_qrels_ids": self.n_qrels_ids,
            "n_qrels_ids_missing": self.n_qrels_ids_missing,
            "drop_empty": self.drop_empty,
            "k": self.k,
            "seconds": self.seconds,
            "queries_per_second": self.queries_per_second,
        }
        d.update(self.extra)
        if per_question:
            d["per_question"] = {q: dict(v) for q, v in self.per_question.items()}
        return d


class _Scorer:
    """Accumulates per-question metric values as batches come back."""

    def __init__(self, metrics: Sequence[Metric], *, drop_empty: bool) -> None:
        self.metrics = list(metrics)
        self.drop_empty = drop_empty
        self.sums = {m.name: 0.0 for m in self.metrics}
        self.counts = {m.name: 0 for m in self.metrics}
        self.per_question: dict[str, dict[str, float]] = {}
        self.empty_ids: list[str] = []

    def add(self, question: Question, hits: Sequence[Hit]) -> None:
        applicable = [m for m in self.metrics if m.applies(question)]
        if not applicable:
            return
        if not hits:
            self.empty_ids.append(question.id)
            if self.drop_empty:
                return
        judged = Judged(question, hits)
        values = {}
        for m in applicable:
            v = m(judged)
            values[m.name] = v
            self.sums[m.name] += v
            self.counts[m.name] += 1
        self.per_question[question.id] = values

    def report(self, n_questions: int, n_unanswerable: int, k: int | None) -> EvalReport:
        means = {n: (self.sums[n] / c if c else 0.0) for n, c in self.counts.items()}
        return EvalReport(
            n_questions=n_questions,
            metrics=means,
            n_evaluated=dict(self.counts),
            per_question=self.per_question,
            n_unanswerable_skipped=n_unanswerable,
            n_empty=len(self.empty_ids),
            empty_ids=self.empty_ids,
            drop_empty=self.drop_empty,
            k=k,
        )


def _prepare(
    questions: Iterable[Question], metrics: str | Iterable[str | Metric]
) -> tuple[list[Question], list[Metric]]:
    qs = list(questions)
    ms = parse_metrics(metrics)
    seen: set[str] = set()
    for q in qs:
        if q.id in seen:
            raise AnygrainError(f"question id {q.id!r} appears more than once; ids must be unique")
        seen.add(q.id)
    for m in ms:
        if qs and not any(m.applies(q) for q in qs):
            raise AnygrainError(
                f"metric {m.name} needs {m.needs}, and none of the {len(qs)} questions has them"
            )
    return qs, ms


def _needed_k(questions: Sequence[Question], metrics: Sequence[Metric]) -> int:
    depth = 1
    for m in metrics:
        if m.k is not None:
            depth = max(depth, m.k)
        else:
            depth = max([depth, *(m.depth(q) for q in questions if m.applies(q))])
    return depth


def evaluate_run(
    run: Mapping[str, Sequence[Hit]],
    questions: Iterable[Question],
    metrics: str | Iterable[str | Metric] = DEFAULT_METRICS,
    *,
    drop_empty: bool = False,
) -> EvalReport:
    """Score a ready-made run (question id -> hits, best first) on ``questions``.

    A question missing from ``run`` counts as having no hits.
    """
    qs, ms = _prepare(questions, metrics)
    ids = {q.id for q in qs}
    unknown = sum(1 for qid in run if qid not in ids)
    if unknown:
        log.warning("%d run queries are not in the question set and were ignored", unknown)
    scorer = _Scorer(ms, drop_empty=drop_empty)
    for q in qs:
        scorer.add(q, run.get(q.id, ()))
    n_unanswerable = sum(1 for q in qs if not q.answerable)
    return scorer.report(len(qs), n_unanswerable, None)


def _default_metrics(index: Searcher, k: int | None, options: Mapping[str, Any]) -> list[str]:
    """The index kind's default metrics at the searched unit, so an index scores the same
    by default here as through ``anygrain.evaluate_index``; DEFAULT_METRICS for any other
    searcher."""
    of_kind = getattr(index, "default_metrics", None)
    check_unit = getattr(index, "check_unit", None)
    if of_kind is None or check_unit is None:
        return list(DEFAULT_METRICS)
    return list(of_kind(k, check_unit(options.get("unit"))))


def evaluate(
    index: Searcher,
    questions: Iterable[Question],
    metrics: str | Iterable[str | Metric] | None = None,
    *,
    k: int | None = None,
    batch_size: int = 64,
    run_out: str | os.PathLike[str] | None = None,
    drop_empty: bool = False,
    progress: bool = True,
    search_options: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Search ``questions`` on ``index`` and score the hits.

    ``k`` (hits per query) defaults to the largest cutoff the metrics need -- at
    least 1, R for ``rprec`` -- and may not be smaller than any ``@k`` cutoff.
    ``run_out`` writes a TREC run tagged with the index kind.  ``metrics`` default to the
    index kind's (``Index.default_metrics``), or DEFAULT_METRICS for another searcher.
    """
    if metrics is None:
        metrics = _default_metrics(index, k, search_options or {})
    qs, ms = _prepare(questions, metrics)
    need = _needed_k(qs, ms)
    cut = max((m.k for m in ms if m.k is not None), default=0)
    if k is None:
        k = need
    elif k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    elif k < cut:
        raise AnygrainError(f"k={k} is smaller than the cutoff {cut} a requested metric needs")
    if batch_size < 1:
        raise AnygrainError(f"batch_size must be at least 1, got {batch_size}")
    options = dict(search_options or {})
    to_search = [q for q in qs if run_out is not None or any(m.applies(q) for m in ms)]

    scorer = _Scorer(ms, drop_empty=drop_empty)
    kind = getattr(index, "kind", None)
    tag = str(getattr(kind, "value", kind) or "anygrain")
    writer = RunWriter(run_out, tag) if run_out is not None else None
    seconds = 0.0
    from tqdm import tqdm  # here, not at the top: a search or --help imports this module

    try:
        with tqdm(total=len(to_search), disable=not progress, desc="evaluating", unit="q") as bar:
            for start in range(0, len(to_search), batch_size):
                batch = to_search[start : start + batch_size]
                t0 = time.perf_counter()
                results = index.search([q.text for q in batch], k, **options)
                seconds += time.perf_counter() - t0
                if len(results) != len(batch):
                    raise AnygrainError(
                        f"index returned {len(results)} result lists for {len(batch)} queries"
                    )
                for q, hits in zip(batch, results, strict=True):
                    scorer.add(q, hits)
                    if writer is not None:
                        writer.write(q.id, hits)
                bar.update(len(batch))
    except BaseException:
        if writer is not None:
            writer.close(ok=False)
        raise
    if writer is not None:
        writer.close(ok=True)

    n_unanswerable = sum(1 for q in qs if not q.answerable)
    report = scorer.report(len(qs), n_unanswerable, k)
    report.seconds = seconds
    report.queries_per_second = len(to_search) / seconds if seconds > 0 else None
    return report
