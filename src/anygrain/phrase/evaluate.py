"""Evaluating a phrase index: EM/F1 of the top phrase and top@k, open corpus or D = {p}.

``scope="gold-passage"`` is the reading-comprehension setting (D = {p}): each
question is searched only in its own gold passage, so the score measures the
phrase representations alone, with no retrieval errors mixed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError, parse_enum
from anygrain.eval import EvalReport, evaluate, parse_metrics
from anygrain.index.base import Index, IndexKind
from anygrain.index.scope import Scope, gold_rows
from anygrain.search.hit import Hit, Unit, UnitSearchStats


def default_metrics(k: int, unit: Unit) -> list[str]:
    """EM/F1 only mean something for phrases; every unit gets top@1 and top@k."""
    ms = ["em", "f1"] if unit is Unit.PHRASE else []
    return ms + ["top@1"] + ([f"top@{k}"] if k > 1 else [])


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


def evaluate_phrase(
    index: Any,
    questions: Iterable[Question],
    *,
    k: int = 10,
    unit: Unit | str = Unit.PHRASE,
    scope: Scope | str | None = None,
    metrics: Sequence[str] | None = None,
    batch_size: int = 64,
    run_out: str | Path | None = None,
    drop_empty: bool = False,
    progress: bool = True,
    search_options: dict[str, Any] | None = None,
) -> EvalReport:
    """EM, F1 (of the top-1 phrase) and top@k of a phrase index (or its path).

    ``scope`` is ``None``/``"corpus"`` (open retrieval over the whole index) or
    ``"gold-passage"`` (D = {p}: each question searched in its gold passage only).
    Over the corpus at a coarser ``unit`` the report's ``unit_search`` summarises the
    search rounds (:class:`~anygrain.search.hit.UnitSearchStats`).
    """
    idx = index if not isinstance(index, str | Path) else Index.load(index)
    if getattr(idx, "kind", None) is not IndexKind.PHRASE:
        raise AnygrainError("evaluate_phrase needs a phrase index")
    u = parse_enum(Unit, unit)
    qs = list(questions)
    if k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    ms = list(metrics) if metrics is not None else default_metrics(k, u)
    collected: list[UnitSearchStats] = []
    opts = {"unit": u, "stats": collected, **(search_options or {})}
    common: dict[str, Any] = dict(
        batch_size=batch_size, run_out=run_out, drop_empty=drop_empty, progress=progress
    )
    where = parse_enum(Scope, scope or Scope.CORPUS)
    if where is Scope.CORPUS:
        report = evaluate(idx, qs, ms, k=k, search_options=opts, **common)
        if u is not Unit.PHRASE:
            report.extra["unit_search"] = UnitSearchStats.summary(collected)
        return report
    parsed = parse_metrics(ms)
    # the same questions, in the same order, as ``evaluate`` will search
    searched = [q for q in qs if run_out is not None or any(m.applies(q) for m in parsed)]
    source = getattr(questions, "source", "")
    rows = [gold_rows(idx.corpus, q, source=source)[:1] for q in searched]
    scoped = _Scoped(idx, searched, rows)
    return evaluate(scoped, qs, ms, k=k, search_options=opts, **common)
