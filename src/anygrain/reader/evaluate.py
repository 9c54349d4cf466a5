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
from typing import Any

from anygrain.corpus.questions import Question
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError
from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Hit, Unit
from anygrain.reader.model import Reader
from anygrain.reader.read import Answer, read_many

__all__ = ["evaluate_reader", "gold_hits"]


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
    reader: Reader,
    questions: Sequence[Question],
    *,
    k: int = 5,
    gold_passage: bool = False,
    store: CorpusStore | None = None,
    hits: Sequence[Sequence[Hit]] | None = None,
    batch_size: int = 32,
    bf16: bool = False,
    progress: bool = False,
    per_question: bool = False,
) -> dict[str, Any]:
    """EM/F1 of ``reader`` on ``questions``, and questions per second.

    ``index`` retrieves ``k`` passages per question (any object with
    ``search(queries, k)``); ``hits`` may be given instead to reuse one retrieval
    for several ``k`` (the first ``k`` of each list are read).  With
    ``gold_passage`` the index is not searched: each question is read with its
    gold passage from ``store`` (default: the index's corpus).
    """
    qs = [q for q in questions if q.answers]
    skipped = len(questions) - len(qs)
    t0 = time.perf_counter()
    missing = 0
    retrieve_s = 0.0
    if gold_passage:
        if store is None:
            if index is None:
                raise AnygrainError("the gold-passage setting needs a corpus store or an index")
            store = index.corpus
        assert store is not None
        lists, missing = gold_hits(store, qs)
        k = 1
    elif hits is not None:
        if len(hits) != len(questions):
            raise AnygrainError("hits and questions differ in length")
        keep = [i for i, q in enumerate(questions) if q.answers]
        lists = [list(hits[i][:k]) for i in keep]
    else:
        if index is None:
            raise AnygrainError("end-to-end evaluation needs an index (or gold_passage=True)")
        lists = []
        for b in range(0, len(qs), 256):
            lists.extend(list(h) for h in index.search([q.text for q in qs[b : b + 256]], k))
        retrieve_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    answers: list[Answer] = read_many(
        reader,
        [q.text for q in qs],
        lists,
        top_passages=k,
        batch_size=batch_size,
        bf16=bf16,
        progress=progress,
    )
    read_s = time.perf_counter() - t1
    total = time.perf_counter() - t0
    em_sum = f1_sum = 0.0
    rows: dict[str, dict[str, Any]] = {}
    for q, a in zip(qs, answers, strict=True):
        em, f = exact_match(a.text, q.answers), f1(a.text, q.answers)
        em_sum += em
        f1_sum += f
        if per_question:
            rows[q.id] = {
                "prediction": a.text,
                "em": em,
                "f1": f,
                "passage_id": a.hit.passage_id if a.hit else None,
            }
    n = len(qs)
    report: dict[str, Any] = {
        "setting": "gold_passage" if gold_passage else "end_to_end",
        "k": k,
        "n_questions": len(questions),
        "n_evaluated": n,
        "n_unanswerable_skipped": skipped,
        "n_missing_gold": missing,
        "em": em_sum / n if n else 0.0,
        "f1": f1_sum / n if n else 0.0,
        "seconds": round(total, 3),
        "retrieve_seconds": round(retrieve_s, 3),
        "read_seconds": round(read_s, 3),
        "questions_per_second": round(n / total, 3) if total > 0 else None,
        "read_questions_per_second": round(n / read_s, 3) if read_s > 0 else None,
    }
    if per_question:
        report["per_question"] = rows
    return report
