"""The Python API behind the CLI: each function is one user-level operation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import parse_source
from anygrain.corpus.questions import Question, Questions
from anygrain.errors import ErrorLog
from anygrain.search.hit import Hit
from anygrain.search.index import Index


def load_questions(
    spec: str | Path, *, errors: ErrorLog | None = None, limit: int | None = None
) -> Questions:
    """Read a question set from ``FORMAT:PATH`` or ``PATH`` (format detected)."""
    qs = parse_source(str(spec), want="questions").questions(errors)
    if limit is not None:
        qs = Questions(qs.items[:limit], source=qs.source, format=qs.format)
    return qs


def evaluate_index(
    index: str | Path | Index,
    questions: str | Path | Questions,
    *,
    metrics: Sequence[str] = ("top@1", "top@5", "top@20", "mrr@20"),
    k: int | None = None,
    run_out: str | Path | None = None,
    drop_empty: bool = False,
    limit: int | None = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
    search_options: dict[str, Any] | None = None,
) -> Any:
    """Open the index and question set when given as paths, then :func:`anygrain.eval.evaluate`."""
    from anygrain.eval import evaluate

    idx = index if isinstance(index, Index) else Index.load(index)
    qs = (
        questions
        if isinstance(questions, Questions)
        else load_questions(questions, errors=errors, limit=limit)
    )
    return evaluate(
        idx,
        qs,
        metrics=list(metrics),
        k=k,
        run_out=Path(run_out) if run_out else None,
        drop_empty=drop_empty,
        progress=progress,
        search_options=search_options,
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
