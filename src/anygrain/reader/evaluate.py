"""Reader evaluation: SQuAD exact match and F1 of the answers, end to end or with the gold passage.

Two settings, as in DPR / DensePhrases tables:

* **end to end**: retrieve ``k`` passages with an index, read them, score the answer;
* **gold passage** (``D = {p}``): read each question with only its source
  paragraph, looked up by ``question.gold[0]`` in a corpus store -- plain reading
  comprehension, the upper bound of the reader.

EM/F1 use :mod:`anygrain.eval.squad` (SQuAD v1.1 normalisation, CMRC rules when
the golds are Chinese), max over gold answers, averaged over answerable
questions; unanswerable ones (no answers) are skipped and counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.questions import Question
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, UsageError
from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Hit, Unit
from anygrain.reader.runtime import ReadingModel
from anygrain.utils.progress import progress_bar

if TYPE_CHECKING:
    from anygrain.index.base import Index
    from anygrain.reader.answering import ReadSettings

__all__ = ["evaluate_reader", "evaluate_reader_at", "gold_hits"]


def gold_hits(store: CorpusStore, questions: Sequence[Question]) -> tuple[list[list[Hit]], int]:
    """Each question's gold passage as a one-hit list, and how many were not found."""
    out: list[list[Hit]] = []
    missing = 0
    for q in questions:
        if not q.gold or q.gold[0] not in store:
            out.append([])
            missing += 1
            continue
        row = store.row_of(q.gold[0])
        p = store.passage(row)
        out.append([Hit(Unit.PASSAGE, 0.0, row, p.id, p.doc_id, p.title, p.text)])
    return out, missing


def evaluate_reader(
    index: Any | None,
    reader: ReadingModel,
    questions: Sequence[Question],
    *,
    k: int = 5,
    gold_passage: bool = False,
    store: CorpusStore | None = None,
    hits: Sequence[Sequence[Hit]] | None = None,
    batch_size: int = 32,
    bf16: bool | None = None,
    progress: bool = False,
    per_question: bool = False,
    retriever_weight: float | None = None,
    at: Sequence[int] = (),
    search_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """EM/F1 of ``reader`` on ``questions`` at the answer grain, and questions per second.

    ``index`` retrieves ``k`` passages per question (at its passage grain; any object
    with ``search(queries, k, ...)``, ``search_options`` its own); ``hits`` may be given
    instead.  The answer is the best span of those passages, reader and retriever scores
    combined (:mod:`anygrain.reader.answering`, ``retriever_weight``); ``at`` adds
    ``em@K``/``f1@K`` for reading only the first K of the ``k`` passages (one reading
    pass).  With ``gold_passage`` the index is not searched: each question is read with
    its gold passage from ``store`` (default: the index's corpus).
    """
    from anygrain.reader.answering import DEFAULT_RETRIEVER_WEIGHT, ReadSettings

    qs = [q for q in questions if q.answers]
    weight = DEFAULT_RETRIEVER_WEIGHT if retriever_weight is None else retriever_weight
    t0 = time.perf_counter()
    missing = 0
    retrieve_s = 0.0
    if gold_passage:
        lists, missing = gold_hits(_gold_store(index, store), qs)
        k, at = 1, ()
    elif hits is not None:
        lists = _given_hits(hits, questions, k)
    else:
        lists = _retrieve(index, qs, k, search_options)
        retrieve_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    settings = ReadSettings(
        passages=max(1, k), retriever_weight=weight, batch_size=batch_size, bf16=bf16
    )
    cands = _read_spans(reader, qs, lists, settings, k, progress)
    read_s = time.perf_counter() - t1
    total = time.perf_counter() - t0
    cutoffs = sorted({k, *(c for c in at if 1 <= c <= k)})
    sums, rows = _score(qs, cands, lists, cutoffs, weight, k if per_question else None)
    report = _report(
        gold_passage, k, weight, len(questions), len(qs), missing, sums, cutoffs,
        total=total, retrieve_s=retrieve_s, read_s=read_s,
    )  # fmt: skip
    if per_question:
        report["per_question"] = rows
    return report


def _report(
    gold_passage: bool,
    k: int,
    weight: float,
    n_questions: int,
    n: int,
    missing: int,
    sums: dict[int, list[float]],
    cutoffs: Sequence[int],
    *,
    total: float,
    retrieve_s: float,
    read_s: float,
) -> dict[str, Any]:
    """The report of :func:`evaluate_reader`: mean EM/F1 over the ``n`` answerable
    questions of ``n_questions`` (at ``k`` passages and each other cutoff) and timings."""
    report: dict[str, Any] = {
        "setting": "gold_passage" if gold_passage else "end_to_end",
        "k": k,
        "retriever_weight": None if gold_passage else weight,
        "n_questions": n_questions,
        "n_evaluated": n,
        "n_unanswerable_skipped": n_questions - n,
        "n_missing_gold": missing,
        "em": sums[k][0] / n if n else 0.0,
        "f1": sums[k][1] / n if n else 0.0,
        "seconds": round(total, 3),
        "retrieve_seconds": round(retrieve_s, 3),
        "read_seconds": round(read_s, 3),
        "questions_per_second": round(n / total, 3) if total > 0 else None,
        "read_questions_per_second": round(n / read_s, 3) if read_s > 0 else None,
    }
    for cut in cutoffs:
        if cut != k:
            report[f"em@{cut}"] = sums[cut][0] / n if n else 0.0
            report[f"f1@{cut}"] = sums[cut][1] / n if n else 0.0
    return report


def _gold_store(index: Any | None, store: CorpusStore | None) -> CorpusStore:
    """Where the gold passages are looked up: ``store``, else the index's corpus."""
    if store is not None:
        return store
    if index is None:
        raise AnygrainError("the gold-passage setting needs a corpus store or an index")
    corpus: CorpusStore = index.corpus
    return corpus


def _given_hits(
    hits: Sequence[Sequence[Hit]], questions: Sequence[Question], k: int
) -> list[list[Hit]]:
    """The first ``k`` of the hits given for each answerable question."""
    if len(hits) != len(questions):
        raise AnygrainError("hits and questions differ in length")
    keep = [i for i, q in enumerate(questions) if q.answers]
    return [list(hits[i][:k]) for i in keep]


def _retrieve(
    index: Any | None, qs: Sequence[Question], k: int, search_options: dict[str, Any] | None
) -> list[list[Hit]]:
    """The top ``k`` passages ``index`` retrieves for each question, in batches."""
    if index is None:
        raise AnygrainError("end-to-end evaluation needs an index (or gold_passage=True)")
    unit_opts = index.unit_options(Unit.PASSAGE) if hasattr(index, "unit_options") else {}
    lists: list[list[Hit]] = []
    for b in range(0, len(qs), 256):
        batch = [q.text for q in qs[b : b + 256]]
        found = index.search(batch, k, **unit_opts, **(search_options or {}))
        lists.extend(list(h) for h in found)
    return lists


def _read_spans(
    reader: ReadingModel,
    qs: Sequence[Question],
    lists: Sequence[Sequence[Hit]],
    settings: ReadSettings,
    k: int,
    progress: bool,
) -> list[Any]:
    """The reader's span candidates for each question in its passages, about 256 passages
    a chunk."""
    from anygrain.reader.answering import span_candidates

    cands: list[Any] = []
    chunk = max(1, 256 // max(1, k))
    for b in progress_bar(
        range(0, len(qs), chunk), desc="reading", unit="chunk", disable=not progress
    ):
        cands.extend(
            span_candidates(
                reader, [q.text for q in qs[b : b + chunk]], lists[b : b + chunk], settings
            )
        )
    return cands


def _score(
    qs: Sequence[Question],
    cands: Sequence[Any],
    lists: Sequence[Sequence[Hit]],
    cutoffs: Sequence[int],
    weight: float,
    per_question_at: int | None,
) -> tuple[dict[int, list[float]], dict[str, dict[str, Any]]]:
    """EM and F1 summed over the questions for reading the first ``cut`` passages, each
    cutoff; and, at ``per_question_at``, each question's prediction and scores."""
    from anygrain.reader.answering import combine

    sums = {c: [0.0, 0.0] for c in cutoffs}
    rows: dict[str, dict[str, Any]] = {}
    for q, c, hs in zip(qs, cands, lists, strict=True):
        for cut in cutoffs:
            found = combine(c, hs, 1, passages=cut, retriever_weight=weight)
            pred = found[0].answer_text if found else ""
            em, f = exact_match(pred, q.answers), f1(pred, q.answers)
            sums[cut][0] += em
            sums[cut][1] += f
            if cut == per_question_at:
                rows[q.id] = {
                    "prediction": pred,
                    "em": em,
                    "f1": f,
                    "passage_id": found[0].passage_id if found else None,
                }
    return sums, rows


def evaluate_reader_at(
    index: Index | None,
    reader: str | Path | None,
    questions: Sequence[Question],
    *,
    k: int = 5,
    gold_passage: bool = False,
    corpus: str | Path | None = None,
    bf16: bool | None = None,
    progress: bool = True,
    retriever_weight: float | None = None,
    at: Sequence[int] = (),
) -> dict[str, Any]:
    """:func:`evaluate_reader` of the reader at ``reader`` (None: the one shipped for the
    index's language), the gold passages from ``corpus`` (a corpus directory, or any
    source, built into a temporary store) or the index's corpus
    (:func:`anygrain.api.evaluate_reader`)."""
    import tempfile

    from anygrain.reader.answering import load_reader_for

    if reader is None and index is None:
        raise UsageError("name a --reader, or an index whose language picks the shipped one")
    model = load_reader_for(index, reader)
    with tempfile.TemporaryDirectory() as tmp:
        store = None
        if corpus is not None:
            cp = Path(corpus)
            store = (
                CorpusStore(cp)
                if (cp / "corpus.json").exists()
                else CorpusStore.build(str(corpus), Path(tmp) / "corpus", progress=progress)
            )
        return evaluate_reader(
            index,
            model,
            questions,
            k=k,
            gold_passage=gold_passage,
            store=store,
            bf16=bf16,
            progress=progress,
            retriever_weight=retriever_weight,
            at=at,
        )
