"""Searching an index at any grain, one query list or a stream of questions: the answer
grain's reading options taken out of the search options and read by the reader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.pydocs import surrogate_at
from anygrain.corpus.questions import Question, Questions, batch_questions
from anygrain.errors import AnygrainError, ErrorLog, UsageError
from anygrain.hits.hit import Hit, Unit, hits_json
from anygrain.index.base import Index
from anygrain.utils.threads import set_threads

if TYPE_CHECKING:
    from anygrain.encode.runtime import Runtime
    from anygrain.reader.answering import ReadSettings


def check_text(text: str, where: str) -> None:
    """One line for a question no tokenizer can read: a lone surrogate (invalid UTF-8 bytes
    in a command-line argument, or a JSON ``\\udcff`` escape)."""
    bad = surrogate_at(text)
    if bad is not None:
        raise AnygrainError(f"{where} holds a lone surrogate ({bad}): not valid Unicode text")


def search_index(
    index: str | Path | Index,
    queries: Sequence[str],
    k: int = 10,
    *,
    unit: Unit | str | None = None,
    threads: int | None = None,
    runtime: Runtime | str | None = None,
    **options: Any,
) -> list[list[Hit]]:
    """Top-``k`` hits per query. ``unit`` (phrase, sentence, passage, document) needs a
    phrase index unless it is ``passage``; phrase indexes default to phrases. ``threads``
    sets torch's and FAISS's thread count (default: theirs).  ``options`` are the kind's
    search options (``batch_size``, hybrid ``fusion``/``weight``/``depth``, phrase
    ``sparse_weight``/``stats``, ...); None is no option, and one the kind does not take
    raises :class:`~anygrain.errors.UsageError` naming it.  ``runtime`` runs the reader of
    the answer grain (auto, onnx, torch: :func:`anygrain.reader.onnx.load_reader`)."""
    set_threads(threads)
    idx = index if isinstance(index, Index) else Index.load(index)
    if k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise AnygrainError(f"query {i + 1} is empty")
        check_text(q, f"query {i + 1}")
    options = dict(options)
    u = idx.check_unit(answer_unit(unit, options))
    reading = read_settings(u, options)
    opts = idx.check_search_options(options)
    if reading is not None:
        from anygrain.reader.answering import load_reader_for, read_passages

        model = load_reader_for(idx, reading.extra.get("reader"), runtime)
        return read_passages(idx, model, list(queries), k, reading, **opts)
    return idx.search(list(queries), k, **idx.unit_options(u), **opts)


def one_question_runtime(runtime: Any) -> Any:
    """The reader's runtime for a one-off question (``anygrain search IDX "q"``): under auto
    (None), ONNX Runtime where it is installed, since importing torch costs more than its
    bfloat16 reading saves on one question."""
    from anygrain.encode.runtime import Runtime, onnxruntime_installed

    if runtime is None and onnxruntime_installed():
        return Runtime.ONNX
    return runtime


def takes_load_option(path: str | Path, name: str) -> bool:
    """Whether the kind of the index at ``path`` takes the load option ``name`` (a BM25
    index takes no ``runtime``: it encodes no questions, so an answer search's runtime is
    its reader's alone); True when the kind cannot be told, so that loading says why."""
    from anygrain.index.manifest import read_manifest
    from anygrain.index.registry import index_class

    try:
        return name in index_class(str(read_manifest(Path(path)).get("kind"))).load_options
    except AnygrainError:
        return True


#: Search options of the answer grain (a reader reads the top passages), for any kind.
READ_OPTIONS = ("reader", "read", "retriever_weight", "min_confidence", "read_window", "read_sure")


def answer_unit(unit: Unit | str | None, options: Mapping[str, Any]) -> Unit | str | None:
    """``unit``, or the answer grain when it is not given and a reading option is."""
    if unit is None and any(options.get(k) is not None for k in READ_OPTIONS):
        return Unit.ANSWER
    return unit


def read_settings(unit: Unit, options: dict[str, Any]) -> ReadSettings | None:
    """The reading settings of an ``answer`` search, taken out of ``options``; None for
    other grains, which refuse the reading options."""
    given = {k: options.pop(k) for k in READ_OPTIONS if options.get(k) is not None}
    for k in READ_OPTIONS:
        options.pop(k, None)
    if unit is not Unit.ANSWER:
        if given:
            raise UsageError(
                f"{', '.join(given)}: reading options apply to the answer grain (unit answer)"
            )
        return None
    # the reader (torch) only for the answer grain: other searches start without it
    from anygrain.reader.answering import (
        DEFAULT_PASSAGES,
        DEFAULT_RETRIEVER_WEIGHT,
        ReadSettings,
        how_much_to_read,
    )

    return ReadSettings(
        passages=int(given.get("read", DEFAULT_PASSAGES)),
        retriever_weight=float(given.get("retriever_weight", DEFAULT_RETRIEVER_WEIGHT)),
        min_confidence=given.get("min_confidence"),
        **how_much_to_read(given.get("read_window"), given.get("read_sure")),
        extra={"reader": given.get("reader")},
    )


@dataclass
class QuestionHits:
    """One question of a batch search with its hits (one JSON line of
    ``anygrain search --questions``)."""

    id: str
    question: str
    hits: list[Hit]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "hits": hits_json(self.hits)}


def search_questions(
    index: str | Path | Index,
    questions: str | Path | Questions | Sequence[str],
    k: int = 10,
    *,
    unit: Unit | str | None = None,
    threads: int | None = None,
    chunk: int = 64,
    progress: bool = False,
    errors: ErrorLog | None = None,
    runtime: Runtime | str | None = None,
    **options: Any,
) -> Iterator[QuestionHits]:
    """Batch search: the top-``k`` hits of each question, in order, as they come.

    ``questions`` are a question set, plain strings (ids 1, 2, ...), or a spec for
    :func:`batch_questions` (``FORMAT:PATH``, or a file with one question per line).
    Questions are searched ``chunk`` at a time, so results stream and memory stays
    bounded; ``progress`` shows a bar on stderr.  ``options`` are the index's search
    options, and ``runtime`` the reader's, as for :func:`search_index`."""
    from tqdm import tqdm

    if chunk < 1:
        raise AnygrainError(f"chunk must be at least 1, got {chunk}")
    if isinstance(questions, Questions):
        qs = list(questions)
    elif isinstance(questions, str | Path):
        qs = list(batch_questions(questions, errors=errors))
    else:
        qs = [Question(id=str(i), text=q) for i, q in enumerate(questions, 1)]
    idx = index if isinstance(index, Index) else Index.load(index)
    # checked once, before the first search: a bad k or unit fails with no output
    if k < 1:
        raise AnygrainError(f"k must be at least 1, got {k}")
    for q in qs:
        if not isinstance(q.text, str) or not q.text.strip():
            raise AnygrainError(f"question {q.id} is empty")
        check_text(q.text, f"question {q.id}")
    unit = idx.check_unit(answer_unit(unit, options))
    rest = dict(options)
    read_settings(unit, rest)  # checked once, before the first search
    idx.check_search_options(rest)
    options = {k: v for k, v in options.items() if v is not None}
    # a question batch larger than a chunk would never fill
    chunk = max(chunk, int(options.get("batch_size") or 0))
    with tqdm(total=len(qs), disable=not progress, desc="searching", unit="q") as bar:
        for start in range(0, len(qs), chunk):
            batch = qs[start : start + chunk]
            found = search_index(
                idx,
                [q.text for q in batch],
                k,
                unit=unit,
                threads=threads,
                runtime=runtime,
                **options,
            )
            for q, hits in zip(batch, found, strict=True):
                yield QuestionHits(q.id, q.text, hits)
            bar.update(len(batch))
