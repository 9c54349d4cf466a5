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

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from anygrain.corpus.questions import Question
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, UsageError
from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Hit, Unit
from anygrain.reader.runtime import ReadingModel
from anygrain.utils.precision import cap_onednn_cache
from anygrain.utils.progress import progress_counter

if TYPE_CHECKING:
    from anygrain.encode.runtime import Runtime
    from anygrain.index.base import Index
    from anygrain.reader.answering import ReadSettings

__all__ = ["check_counts", "describe_reader", "evaluate_reader", "evaluate_reader_at", "gold_hits"]

#: questions retrieved per index call, and passages read per reading call: small enough
#: that the progress bar moves every few seconds, large enough to batch the models
RETRIEVE_BATCH = 32
READ_PASSAGES = 64

#: ``on_progress(stage, done, total)``: called after each batch of questions a stage
#: (``retrieving``, ``reading``) finishes
Progress = Callable[[str, int, int], None]


def check_counts(k: int, at: Sequence[int], gold_passage: bool = False) -> None:
    """Refuse ``k`` below 1 and any ``at`` cutoff outside ``1..k`` (a cutoff is a prefix of
    the ``k`` passages read), and ``at`` in the gold-passage setting (one passage read)."""
    if gold_passage:
        if at:
            raise UsageError(
                "--at: the gold-passage setting reads one passage, so it has no cutoffs"
            )
        return
    from anygrain.reader.answering import MAX_PASSAGES

    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_PASSAGES:
        raise UsageError(f"-k (passages read) must be between 1 and {MAX_PASSAGES}, got {k!r}")
    for c in at:
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= k:
            raise UsageError(f"--at: cutoff {c!r} must be between 1 and -k ({k})")


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
    on_progress: Progress | None = None,
    read_window: int | None = None,
    read_sure: float | None = None,
) -> dict[str, Any]:
    """EM/F1 of ``reader`` on ``questions`` at the answer grain, and questions per second.

    ``index`` retrieves ``k`` passages per question (at its passage grain; any object
    with ``search(queries, k, ...)``, ``search_options`` its own); ``hits`` may be given
    instead.  The answer is the best span of those passages, reader and retriever scores
    combined (:mod:`anygrain.reader.answering`, ``retriever_weight``); ``at`` adds
    ``em@K``/``f1@K`` for reading only the first K of the ``k`` passages (one reading
    pass).  With ``gold_passage`` the index is not searched: each question is read with
    its gold passage from ``store`` (default: the index's corpus).  ``progress`` shows a bar
    per stage that advances every few questions, and ``on_progress`` hears of the same
    steps.  The report records the index (path, kind), the reader's runtime and precision.
    """
    from anygrain.reader.answering import DEFAULT_RETRIEVER_WEIGHT, ReadSettings, how_much_to_read

    check_counts(k, at, gold_passage)
    if getattr(reader, "runtime", "torch") == "torch":
        cap_onednn_cache()  # thousands of passages come in ever new shapes, like a dump's
    if bf16 and getattr(reader, "runtime", "torch") == "onnx":
        raise UsageError("--bf16 reads with torch: ONNX Runtime reads in float32 (use --fp32)")
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
        lists = _retrieve(index, qs, k, search_options, progress, on_progress)
        retrieve_s = time.perf_counter() - t0
    settings = ReadSettings(
        passages=k,
        retriever_weight=weight,
        batch_size=batch_size,
        bf16=bf16,
        **how_much_to_read(read_window, read_sure),
    )
    cutoffs = sorted({k, *(c for c in at if 1 <= c <= k)})
    scores = _Scores(cutoffs, weight, k if per_question else None)
    read_s = _read_spans(reader, qs, lists, settings, k, scores, progress, on_progress)
    total = time.perf_counter() - t0
    sums, rows = scores.sums, scores.rows
    report = _report(
        gold_passage, k, weight, len(questions), len(qs), missing, sums, cutoffs,
        total=total, retrieve_s=retrieve_s, read_s=read_s,
    )  # fmt: skip
    report.update(_reading(reader, settings, index if not gold_passage else None))
    if per_question:
        report["per_question"] = rows
    return report


def _reading(reader: ReadingModel, settings: ReadSettings, index: Any) -> dict[str, Any]:
    """What read: the runtime, the precision it read in (ONNX Runtime: always float32) and
    the index that retrieved (None: the passages came from elsewhere)."""
    runtime = str(getattr(reader, "runtime", "torch"))
    bf16 = runtime == "torch" and settings.use_bf16()
    kind = getattr(index, "kind", None)
    return {
        "runtime": runtime,
        "precision": "bfloat16" if bf16 else "float32",
        "index": None
        if index is None or kind is None
        else {"path": str(index.path), "kind": getattr(kind, "value", str(kind))},
    }


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
    index: Any | None,
    qs: Sequence[Question],
    k: int,
    search_options: dict[str, Any] | None,
    progress: bool,
    on_progress: Progress | None,
) -> list[list[Hit]]:
    """The top ``k`` passages ``index`` retrieves for each question, a small batch at a time."""
    if index is None:
        raise AnygrainError("end-to-end evaluation needs an index (or gold_passage=True)")
    unit_opts = index.unit_options(Unit.PASSAGE) if hasattr(index, "unit_options") else {}
    lists: list[list[Hit]] = []
    with progress_counter(desc="retrieving", unit="q", total=len(qs), disable=not progress) as bar:
        for b in range(0, len(qs), RETRIEVE_BATCH):
            batch = [q.text for q in qs[b : b + RETRIEVE_BATCH]]
            found = index.search(batch, k, **unit_opts, **(search_options or {}))
            lists.extend(list(h) for h in found)
            bar.update(len(batch))
            if on_progress is not None:
                on_progress("retrieving", len(lists), len(qs))
    return lists


def _read_spans(
    reader: ReadingModel,
    qs: Sequence[Question],
    lists: Sequence[Sequence[Hit]],
    settings: ReadSettings,
    k: int,
    scores: _Scores,
    progress: bool,
    on_progress: Progress | None,
) -> float:
    """Read each question's passages, about :data:`READ_PASSAGES` passages a chunk, and
    score each chunk as it is read, so that memory does not grow with the questions (the
    bar counts questions); the seconds spent reading."""
    from anygrain.reader.answering import span_candidates

    chunk = max(1, READ_PASSAGES // k)
    read_s = 0.0
    with progress_counter(desc="reading", unit="q", total=len(qs), disable=not progress) as bar:
        for b in range(0, len(qs), chunk):
            part = qs[b : b + chunk]
            t = time.perf_counter()
            cands = span_candidates(reader, [q.text for q in part], lists[b : b + chunk], settings)
            read_s += time.perf_counter() - t
            scores.add(part, cands, lists[b : b + chunk])
            bar.update(len(part))
            if on_progress is not None:
                on_progress("reading", b + len(part), len(qs))
    return read_s


class _Scores:
    """EM and F1 summed over the questions for reading the first ``cut`` passages, each
    cutoff; and, at ``per_question_at``, each question's prediction and scores."""

    def __init__(self, cutoffs: Sequence[int], weight: float, per_question_at: int | None):
        self.cutoffs, self.weight, self.per_question_at = cutoffs, weight, per_question_at
        self.sums = {c: [0.0, 0.0] for c in cutoffs}
        self.rows: dict[str, dict[str, Any]] = {}

    def add(
        self, qs: Sequence[Question], cands: Sequence[Any], lists: Sequence[Sequence[Hit]]
    ) -> None:
        from anygrain.reader.answering import combine

        for q, c, hs in zip(qs, cands, lists, strict=True):
            for cut in self.cutoffs:
                found = combine(c, hs, 1, passages=cut, retriever_weight=self.weight)
                pred = found[0].answer_text if found else ""
                em, f = exact_match(pred, q.answers), f1(pred, q.answers)
                self.sums[cut][0] += em
                self.sums[cut][1] += f
                if cut == self.per_question_at:
                    self.rows[q.id] = {
                        "prediction": pred,
                        "em": em,
                        "f1": f,
                        "passage_id": found[0].passage_id if found else None,
                    }


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
    runtime: Runtime | str | None = None,
    on_progress: Progress | None = None,
    read_window: int | None = None,
    read_sure: float | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_reader` of the reader at ``reader`` (None: the one shipped for the
    language of the index's corpus, or of ``corpus``'s) on ``runtime``, the gold passages
    from ``corpus`` (a corpus directory, or any source, built into a temporary store) or
    the index's corpus (:func:`anygrain.api.evaluate_reader`).  The report names the
    reader (as given, its directory and the fingerprint of its weights where known)."""
    import tempfile

    from anygrain.corpus.lang import detect_lang
    from anygrain.models.shipped import default_reader
    from anygrain.reader.answering import load_reader_for

    check_counts(k, at, gold_passage)
    if corpus is not None and not gold_passage:
        raise UsageError("--corpus serves --gold-passage only (end to end, the index retrieves)")
    runtime = _runtime_for(bf16, runtime)
    with tempfile.TemporaryDirectory() as tmp:
        store = None
        if corpus is not None:
            cp = Path(corpus)
            store = (
                CorpusStore(cp)
                if (cp / "corpus.json").exists()
                else CorpusStore.build(str(corpus), Path(tmp) / "corpus", progress=progress)
            )
        # what is read (the gold passages' corpus, else the index's) picks the shipped
        # reader, and a reader of other languages is refused
        read_from = index if store is None else SimpleNamespace(corpus=store)
        if reader is None:
            if read_from is None:
                raise UsageError(
                    "name a --reader, or an index or --corpus whose language picks the shipped one"
                )
            reader = default_reader(detect_lang(read_from.corpus).value)
        model = load_reader_for(read_from, reader, runtime)
        report = evaluate_reader(
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
            on_progress=on_progress,
            read_window=read_window,
            read_sure=read_sure,
        )
    report["reader"] = describe_reader(reader, model)
    if corpus is not None:
        report["corpus"] = str(corpus)
    return report


def _runtime_for(bf16: bool | None, runtime: Runtime | str | None) -> Runtime | str | None:
    """The reader's runtime: bfloat16 is torch's (ONNX Runtime reads in float32), so asking
    for it picks torch, and refuses ONNX Runtime."""
    from anygrain.encode.onnx_runtime import parse_runtime, require_torch
    from anygrain.encode.runtime import Runtime

    if not bf16:
        return runtime
    require_torch("--bf16")  # named as asked, before torch is picked for it
    r = parse_runtime(runtime)
    if r is Runtime.ONNX:
        raise UsageError("--bf16 reads with torch: ONNX Runtime reads in float32 (use --fp32)")
    return Runtime.TORCH


def describe_reader(reader: str | Path, model: ReadingModel) -> dict[str, Any]:
    """The reader as a report names it: as given, its directory, and the fingerprint of its
    weights where it costs nothing more (a packed reader records it; a torch reader
    computes it from the weights in memory; an ONNX graph of a full reader is named by its
    cache key, which the fingerprint decides)."""
    from anygrain.models.packed_state import PACKED_READER_CONFIG
    from anygrain.models.shipped import saved_model_dir

    path = saved_model_dir(reader).resolve()
    out: dict[str, Any] = {"name": str(reader), "path": str(path), "fingerprint": None}
    try:
        packed = json.loads((path / PACKED_READER_CONFIG).read_text())
        out["fingerprint"] = packed.get("full_fingerprint")
    except (OSError, ValueError, AttributeError):
        fingerprint = getattr(model, "fingerprint", None)
        graph = getattr(model, "graph", None)
        if callable(fingerprint):
            out["fingerprint"] = fingerprint()
        elif graph is not None:
            out["graph"] = graph.meta.get("key")
    return out
