"""The Python API behind the CLI: each function is one user-level operation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import parse_source
from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError, ErrorLog, parse_enum
from anygrain.eval.evaluate import EvalReport
from anygrain.search.hit import Hit, Unit
from anygrain.search.index import Index, IndexKind
from anygrain.search.scope import Scope

# the passage-index metrics ``evaluate_index`` and ``anygrain eval`` report by default
PASSAGE_METRICS = ("top@1", "top@5", "top@20", "mrr@20", "p@20")


def load_questions(
    spec: str | Path, *, errors: ErrorLog | None = None, limit: int | None = None
) -> Questions:
    """Read a question set from ``FORMAT:PATH`` or ``PATH`` (format detected)."""
    return _first(parse_source(str(spec), want="questions").questions(errors), limit)


def _first(qs: Questions, limit: int | None) -> Questions:
    if limit is None:
        return qs
    if limit < 1:
        raise AnygrainError(f"limit must be at least 1, got {limit}")
    return Questions(qs.items[:limit], source=qs.source, format=qs.format)


def search_index(
    index: str | Path | Index,
    queries: Sequence[str],
    k: int = 10,
    *,
    unit: Unit | str | None = None,
    **options: Any,
) -> list[list[Hit]]:
    """Top-``k`` hits per query. ``unit`` (phrase, sentence, passage, document) needs a
    phrase index unless it is ``passage``; phrase indexes default to phrases."""
    idx = index if isinstance(index, Index) else Index.load(index)
    if k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise AnygrainError(f"query {i + 1} is empty")
    if idx.kind is IndexKind.PHRASE:
        return idx.search(list(queries), k, unit=parse_enum(Unit, unit or Unit.PHRASE), **options)
    _check_passage_unit(idx, unit)
    return idx.search(list(queries), k, **options)


def evaluate_index(
    index: str | Path | Index,
    questions: str | Path | Questions,
    *,
    metrics: Sequence[str] | None = None,
    k: int | None = None,
    run_out: str | Path | None = None,
    drop_empty: bool = False,
    limit: int | None = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
    search_options: dict[str, Any] | None = None,
    unit: Unit | str | None = None,
    scope: Scope | str | None = None,
) -> EvalReport:
    """Score an index on a question set; index and questions may be given as paths.

    Passage indexes (BM25, dense, hybrid) default to ``PASSAGE_METRICS``. Phrase
    indexes default to EM/F1 of the top phrase plus top@1 and top@k (``k`` defaults to
    10), at the grain ``unit``, over the whole index or (``scope="gold-passage"``) each
    question's own passage. ``errors`` collects records skipped under
    ``ErrorPolicy.SKIP``; the report counts them.
    """
    from anygrain.eval import evaluate
    from anygrain.eval.runs import check_run_path

    if run_out is not None:
        check_run_path(run_out)  # before loading anything, not after the whole evaluation
    idx = index if isinstance(index, Index) else Index.load(index)
    errors = errors if errors is not None else ErrorLog()
    if isinstance(questions, Questions):
        qs = _first(questions, limit)
    else:
        qs = load_questions(questions, errors=errors, limit=limit)
    ms = list(metrics) if metrics is not None else None
    report: EvalReport
    if idx.kind is IndexKind.PHRASE:
        from anygrain.phrase.evaluate import evaluate_phrase

        report = evaluate_phrase(
            idx,
            qs,
            k=10 if k is None else k,
            unit=parse_enum(Unit, unit or Unit.PHRASE),
            scope=parse_enum(Scope, scope or Scope.CORPUS),
            metrics=ms,
            run_out=run_out,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
    else:
        _check_passage_unit(idx, unit)
        if scope is not None and parse_enum(Scope, scope) is not Scope.CORPUS:
            raise AnygrainError(
                f"{idx.path}: scope {parse_enum(Scope, scope).value} needs a phrase index "
                f"(this one is {idx.kind.value})"
            )
        report = evaluate(
            idx,
            qs,
            metrics=ms if ms is not None else list(PASSAGE_METRICS),
            k=k,
            run_out=Path(run_out) if run_out else None,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
    report.n_skipped_records = errors.n_skipped
    return report


def _check_passage_unit(idx: Index, unit: Unit | str | None) -> None:
    if unit is not None and parse_enum(Unit, unit) is not Unit.PASSAGE:
        raise AnygrainError(
            f"{idx.path}: a {idx.kind.value} index returns passages; "
            "unit phrase, sentence or document needs a phrase index"
        )


@dataclass
class DemoResult:
    index: Index
    answers: list[tuple[Question, list[Hit]]]
    report: Any


def run_demo(
    out: str | Path, *, kind: str = "bm25", progress: bool = True, **settings: Any
) -> DemoResult:
    """Index CPython's reference topics and answer the demo questions, all offline."""
    from anygrain.corpus.builtin import demo_questions, pydoc_topics
    from anygrain.eval import evaluate_run

    out = Path(out)
    # rerunning the demo replaces its own index (never a directory that is not an index)
    settings.setdefault("overwrite", True)
    idx = Index.build(
        list(pydoc_topics()), kind=kind, out=out, split="paragraph", progress=progress, **settings
    )
    qs = demo_questions()
    hits = idx.search(qs.texts, 5)
    # Score the hits already in hand rather than searching again.
    report = evaluate_run(
        {q.id: h for q, h in zip(qs, hits, strict=True)}, qs, ["top@1", "top@5", "mrr@5"]
    )
    return DemoResult(idx, list(zip(qs.items, hits, strict=True)), report)
