"""The Python API behind the CLI: each function is one user-level operation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import parse_source
from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError, ErrorLog, parse_enum
from anygrain.eval.coverage import check_qrels_coverage, judge_by_gold
from anygrain.eval.evaluate import EvalReport
from anygrain.search.fusion import FusionMethod
from anygrain.search.hit import Hit, Unit
from anygrain.search.index import Index, IndexKind, read_manifest
from anygrain.search.scope import Scope, gold_rows
from anygrain.utils.threads import set_threads

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
    threads: int | None = None,
    **options: Any,
) -> list[list[Hit]]:
    """Top-``k`` hits per query. ``unit`` (phrase, sentence, passage, document) needs a
    phrase index unless it is ``passage``; phrase indexes default to phrases. ``threads``
    sets torch's and FAISS's thread count (default: theirs)."""
    set_threads(threads)
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
    threads: int | None = None,
) -> EvalReport:
    """Score an index on a question set; index and questions may be given as paths.

    Passage indexes (BM25, dense, hybrid) default to ``PASSAGE_METRICS``; with
    ``scope="gold-passage"`` they are judged by each question's gold passage id instead
    of by answer strings (the whole corpus is still searched). Phrase
    indexes default to EM/F1 of the top phrase plus top@1 and top@k (``k`` defaults to
    10), at the grain ``unit``, over the whole index or (``scope="gold-passage"``) each
    question's own passage. ``errors`` collects records skipped under
    ``ErrorPolicy.SKIP``; the report counts them. Qrels that name no unit of the index
    raise an error; some missing ones are logged and counted (``n_qrels_ids_missing``).
    """
    from anygrain.eval import evaluate

    set_threads(threads)
    idx = index if isinstance(index, Index) else Index.load(index)
    errors = errors if errors is not None else ErrorLog()
    if isinstance(questions, Questions):
        qs = _first(questions, limit)
    else:
        qs = load_questions(questions, errors=errors, limit=limit)
    ms = list(metrics) if metrics is not None else None
    where = f"{idx.path} on {qs.source or 'these questions'}"
    report: EvalReport
    if idx.kind is IndexKind.PHRASE:
        from anygrain.phrase.evaluate import evaluate_phrase

        u = parse_enum(Unit, unit or Unit.PHRASE)
        coverage = check_qrels_coverage(qs, _unit_ids(idx, u), where=where)
        report = evaluate_phrase(
            idx,
            qs,
            k=10 if k is None else k,
            unit=u,
            scope=parse_enum(Scope, scope or Scope.CORPUS),
            metrics=ms,
            run_out=run_out,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
    else:
        _check_passage_unit(idx, unit)
        items: list[Question] = list(qs)
        if parse_enum(Scope, scope or Scope.CORPUS) is Scope.GOLD_PASSAGE:
            # A passage index searches the whole corpus either way; the scope changes what
            # counts as relevant: the question's own paragraph, not any passage that
            # happens to contain the answer string.
            for q in items:
                if q.answerable and not q.qrels:
                    gold_rows(idx.corpus, q, source=qs.source)  # same passage, same text
            items = judge_by_gold(items, source=qs.source)
        coverage = check_qrels_coverage(items, _unit_ids(idx, Unit.PASSAGE), where=where)
        report = evaluate(
            idx,
            items,
            metrics=ms if ms is not None else list(PASSAGE_METRICS),
            k=k,
            run_out=Path(run_out) if run_out else None,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
    report.n_qrels_ids = coverage.n_ids
    report.n_qrels_ids_missing = coverage.n_missing
    report.n_skipped_records = errors.n_skipped
    return report


def build_index(
    source: Any,
    *,
    kind: IndexKind | str,
    out: str | Path,
    threads: int | None = None,
    **settings: Any,
) -> Index:
    """Build an index of ``kind`` from ``source`` (``FORMAT:PATH``, a path, a corpus
    directory or store); ``settings`` go to the kind's builder (model, split, lang,
    fusion, ...). ``threads`` sets torch's and FAISS's thread count (default: theirs)."""
    set_threads(threads)
    return Index.build(source, kind=parse_enum(IndexKind, kind), out=out, **settings)


def combine_hybrid(
    first: str | Path,
    second: str | Path,
    out: str | Path,
    *,
    fusion: FusionMethod | str = FusionMethod.ZSCORE,
    weight: float | None = None,
    depth: int = 100,
) -> Index:
    """A hybrid index reusing an existing BM25 index and dense index over the same corpus,
    given in either order; see :meth:`HybridIndex.combine`."""
    from anygrain.search.hybrid import HybridIndex

    dirs = [Path(first), Path(second)]
    kinds = [str(read_manifest(d).get("kind")) for d in dirs]
    if sorted(kinds) != [IndexKind.BM25.value, IndexKind.DENSE.value]:
        raise AnygrainError(
            "a hybrid index combines one bm25 and one dense index, not "
            f"{kinds[0]} ({dirs[0]}) and {kinds[1]} ({dirs[1]})"
        )
    parts = dict(zip(kinds, dirs, strict=True))
    return HybridIndex.combine(
        parts[IndexKind.BM25.value],
        parts[IndexKind.DENSE.value],
        out,
        fusion=fusion,
        weight=weight,
        depth=depth,
    )


def _unit_ids(idx: Index, unit: Unit) -> Callable[[str], bool]:
    """Whether the index holds a unit id at ``unit``'s grain (what qrels name)."""
    store = idx.corpus
    if unit is not Unit.DOCUMENT:
        return store.__contains__  # type: ignore[no-any-return]
    doc_ids: set[str] = set()

    def has_document(uid: str) -> bool:
        # the id column is read only when some question has qrels to check
        if not doc_ids:
            doc_ids.update(store.column("doc_id"))
        return uid in doc_ids

    return has_document


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
