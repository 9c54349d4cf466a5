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
    from anygrain.eval.runs import check_run_path

    set_threads(threads)
    if run_out is not None:
        check_run_path(run_out)  # before loading anything, not after the whole evaluation
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
    overwrite: bool = False,
) -> Index:
    """A hybrid index reusing an existing BM25 index and dense index over the same corpus,
    given in either order; see :meth:`HybridIndex.combine`."""
    from anygrain.search.hybrid import HybridIndex

    return HybridIndex.combine(
        first, second, out, fusion=fusion, weight=weight, depth=depth, overwrite=overwrite
    )


def add_documents(
    index: str | Path,
    source: Any,
    *,
    split: str | None = None,
    model: Any = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
    threads: int | None = None,
) -> Index:
    """Add the documents of ``source`` (``FORMAT:PATH``, a path, or SourceDocuments) to the
    index at ``index``, encoding only the new passages; returns the index reopened.  Ids it
    holds already are refused; ``model`` must be the index's own (the default).  See
    :mod:`anygrain.index.updater` for what each kind recomputes."""
    from anygrain.index.updater import add_documents as add

    set_threads(threads)
    return add(index, source, split=split, model=model, errors=errors, progress=progress)


def delete_documents(index: str | Path, doc_ids: Sequence[str]) -> dict[str, Any]:
    """Mark documents of the index at ``index`` deleted (by document id): searches stop
    returning them at once; :func:`compact_index` removes them from the files."""
    from anygrain.index.updater import delete_documents as delete

    return delete(index, doc_ids)


def compact_index(index: str | Path, *, progress: bool = True, threads: int | None = None) -> Index:
    """Rebuild the index at ``index`` without its deleted documents, reusing stored vectors;
    returns it reopened."""
    from anygrain.index.updater import compact_index as compact

    set_threads(threads)
    return compact(index, progress=progress)


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
class DemoAnswer:
    """One demo question with its hits at each unit the index returns."""

    question: Question
    hits: dict[Unit, list[Hit]]


@dataclass
class DemoResult:
    index: Index
    answers: list[DemoAnswer]
    metrics: dict[str, float]
    reused: bool
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.index.kind.value,
            "index": str(self.index.path),
            "n_questions": len(self.answers),
            "n_passages": len(self.index.corpus),
            "metrics": self.metrics,
            "reused_index": self.reused,
            "seconds": self.seconds,
        }


def _reusable_demo_index(out: Path, kind: IndexKind, corpus_checksum: str) -> Index | None:
    """The demo index already at ``out`` when it holds the same corpus, kind and (phrase)
    model, so a second ``anygrain demo`` answers at once; None when there is none."""
    if not (out / "index.json").exists():
        return None
    m = read_manifest(out)
    if m.get("kind") != kind.value or m.get("corpus", {}).get("checksum") != corpus_checksum:
        return None
    if kind is IndexKind.PHRASE:
        from anygrain.corpus.readers._io import load_json
        from anygrain.models.shipped import default_phrase_model, shipped_model_dir
        from anygrain.phrase.model import MODEL_CONFIG, PhraseConfig

        cfg = shipped_model_dir(default_phrase_model("en")) / MODEL_CONFIG
        want = PhraseConfig.from_dict(load_json(cfg), str(cfg)).phrase_fingerprint
        if m.get("model", {}).get("fingerprint") != want:
            return None
    return Index.load(out)


def run_demo(
    out: str | Path,
    *,
    kind: IndexKind | str = IndexKind.PHRASE,
    progress: bool = True,
    max_documents: int | None = None,
    k: int = 5,
    **settings: Any,
) -> DemoResult:
    """Index CPython's reference topics and answer the demo questions, all offline.

    A phrase index (the default, with the shipped phrase model) answers with phrases,
    sentences and passages; other kinds with passages.  An index already at ``out`` with
    the same corpus and model is reused; anything else there is refused, never replaced.
    """
    import tempfile
    import time

    from anygrain.corpus.builtin import demo_questions, pydoc_topics
    from anygrain.corpus.store import CorpusStore
    from anygrain.eval import evaluate_run

    out = Path(out)
    k_ = parse_enum(IndexKind, kind)
    docs = list(pydoc_topics())[:max_documents]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = CorpusStore.build(docs, Path(tmp) / "corpus", split="paragraph", progress=False)
        checksum = store.manifest["checksum"]
    idx = _reusable_demo_index(out, k_, checksum)
    reused = idx is not None
    if idx is None:
        if out.exists() and any(out.iterdir()) and not (out / "index.json").exists():
            raise AnygrainError(
                f"{out}: exists and is not this demo's index; pass another --out "
                "(the demo never replaces a directory that is not an anygrain index)"
            )
        # another demo index there (another kind or model) is replaced
        settings.setdefault("overwrite", True)
        idx = Index.build(docs, kind=k_, out=out, split="paragraph", progress=progress, **settings)
    t_index = time.time() - t0
    qs = demo_questions()
    units = [Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE] if k_ is IndexKind.PHRASE else [Unit.PASSAGE]
    t1 = time.time()
    by_unit = {u: search_index(idx, qs.texts, k, unit=u) for u in units}
    t_search = time.time() - t1
    answers = [DemoAnswer(q, {u: by_unit[u][i] for u in units}) for i, q in enumerate(qs.items)]

    # Score the hits already in hand rather than searching again.
    def run_of(u: Unit) -> dict[str, list[Hit]]:
        return {q.id: h for q, h in zip(qs, by_unit[u], strict=True)}

    metrics = dict(
        evaluate_run(run_of(Unit.PASSAGE), qs, ["top@1", f"top@{k}", f"mrr@{k}"]).metrics
    )
    if k_ is IndexKind.PHRASE:
        metrics.update(evaluate_run(run_of(Unit.PHRASE), qs, ["em", "f1"]).metrics)
    seconds = {
        "index": round(t_index, 2),
        "search_per_question": round(t_search / max(1, len(qs) * len(units)), 4),
    }
    return DemoResult(idx, answers, metrics, reused, seconds)
