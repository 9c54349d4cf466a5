"""The answer grain of a server: its reader (given, or shipped for the corpus language) and
how many passages it reads per question (:class:`anygrain.serve.service.SearchService`)."""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.search import takes_load_option

if TYPE_CHECKING:  # the reader imports torch: only when unit answer is asked
    from anygrain.encode.runtime import Runtime
    from anygrain.reader.answering import ReadSettings
    from anygrain.reader.runtime import ReadingModel

log = logging.getLogger("anygrain.serve")


def index_options(path: str | Path, load_options: dict[str, Any]) -> dict[str, Any]:
    """``Index.load``'s options of a server: on a kind that encodes no questions (BM25) the
    ``runtime`` (``--runtime``) is the reader's alone."""
    if load_options.get("runtime") is None or takes_load_option(path, "runtime"):
        return load_options
    return {k: v for k, v in load_options.items() if k != "runtime"}


def read_settings(read: int | None) -> ReadSettings:
    """How the server reads answers: ``read`` passages per question (the default when None);
    an :class:`AnygrainError` for a count out of range."""
    from anygrain.reader.answering import ReadSettings

    if read is None:
        return ReadSettings()
    if isinstance(read, bool) or not isinstance(read, int):
        raise AnygrainError(f"read: the number of passages read must be an integer, not {read!r}")
    return ReadSettings(passages=read)


def reader_label(reader: str | Path) -> str:
    """What ``/info`` calls a reader: a shipped reader's name, else its directory's name (a
    path on the server's disk is no business of a client)."""
    from anygrain.models.shipped import SHIPPED

    p = Path(str(reader)).expanduser()
    if not p.exists() and str(reader) in SHIPPED:
        return str(reader)
    return p.resolve().name or str(reader)


def shipped_reader_for(index: Index) -> str | None:
    """The name of the shipped reader for the language of ``index``'s corpus; None when no
    reader ships for it (or the language cannot be told)."""
    from anygrain.corpus.lang import detect_lang
    from anygrain.models.shipped import default_reader, reader_ships

    try:
        lang = detect_lang(index.corpus).value
    except Exception as e:  # a stand-in index without a corpus: no default reader
        log.debug("no corpus language for the default reader: %s", e)
        return None
    return default_reader(lang) if reader_ships(lang) else None


def load_reader(
    index: Index, reader: str | Path | None, runtime: Runtime | str | None = None
) -> ReadingModel:
    """:func:`~anygrain.reader.answering.load_reader_for` (on ``runtime``: the server's
    ``--runtime``), with any failure an :class:`AnygrainError` naming the reader."""
    from anygrain.reader.answering import load_reader_for

    try:
        return load_reader_for(index, reader, runtime)
    except AnygrainError:
        raise
    except Exception as e:  # a damaged model directory: say which, in one line
        raise AnygrainError(f"reader {reader}: does not load ({type(e).__name__}: {e})") from e


#: threads reading answers at once (at most one per core): reading is the costliest stage of
#: an answer search, and each thread keeps to one core (``STAGE_THREADS``)
READ_THREADS = 2


#: the most reading threads a server may be given
MAX_READ_THREADS = 16


def reading_threads(asked: int | None, cpus: int | None) -> int:
    """How many threads of a server read answers: ``asked`` (1 to :data:`MAX_READ_THREADS`;
    an :class:`AnygrainError` otherwise), or by default :data:`READ_THREADS` on a machine
    of ``cpus`` cores, at most one per core."""
    if asked is None:
        return max(1, min(READ_THREADS, cpus or 1))
    if isinstance(asked, bool) or not isinstance(asked, int) or not 1 <= asked <= MAX_READ_THREADS:
        raise AnygrainError(
            f"read_threads: the threads reading answers must be an integer from 1 to "
            f"{MAX_READ_THREADS}, not {asked!r}"
        )
    return asked


def thread_view(reader: ReadingModel) -> ReadingModel:
    """``reader`` for another reading thread: the same weights or graph, read concurrently
    (torch and ONNX Runtime run one model from several threads), with a tokenizer of its
    own -- a tokenizer sets its window size on every call, so a shared one could cut one
    thread's windows at the other's size."""
    view = copy.copy(reader)
    view.tokenizer = copy.deepcopy(reader.tokenizer)
    return view


class ReadingThreads:
    """What a server's reading threads share: the answer jobs handed to them (:meth:`put`),
    each thread's share of those queued (:meth:`next_share`) and what each reads with
    (:meth:`reader_for`)."""

    def __init__(self, threads: int, batching: bool = True) -> None:
        self.threads = threads
        self.batching = batching
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job
        # each further thread's view of the reader: slot -> (the reader, the view)
        self._views: dict[int, tuple[ReadingModel, ReadingModel]] = {}

    def put(self, job: Any) -> None:
        self._jobs.put(job)

    def next_share(self) -> list[Any]:
        """The next job (waited for) and, when batching, this thread's share of those queued
        behind it: all of them while the other threads are busy, else an equal part for
        each idle one (reading is split across the cores, not queued on one)."""
        with self._lock:
            self._idle += 1
        first = self._jobs.get()
        with self._lock:
            self._idle -= 1
            others = self._idle
        items = [first]
        most = -(-(1 + self._jobs.qsize()) // (1 + others)) if self.batching else 1
        while len(items) < most:
            try:
                items.append(self._jobs.get_nowait())
            except queue.Empty:
                break
        return items

    def reader_for(self, slot: int, reader: ReadingModel) -> ReadingModel:
        """What thread ``slot`` reads with: the first reads with ``reader`` itself, the
        others with views of it of their own (:func:`thread_view`)."""
        if not slot:
            return reader
        made = self._views.get(slot)
        if made is None or made[0] is not reader:
            made = self._views[slot] = (reader, thread_view(reader))
        return made[1]


def read_jobs(
    items: list[Any],
    reader: Callable[[], ReadingModel],
    settings: ReadSettings,
    settle: Callable[[list[Any], list[list[Hit]]], None],
) -> None:
    """The top ``k`` answers of every question of ``items`` (answer jobs of one index and
    one ``k``: ``index``, ``job``, ``passages``, ``k``), read in one batch by ``reader()``,
    then abstained on and handed to ``settle(jobs, hits)``; a failure is retried job by job,
    so one request's passages cannot fail the others."""
    from anygrain.reader.answering import answer_hits
    from anygrain.serve.requests import RequestError  # it imports this module

    try:
        hits = answer_hits(
            reader(),
            [q for item in items for q in item.job.questions],
            [p for item in items for p in item.passages],
            items[0].k,
            settings,
            sentences_of(items[0].index),
        )
    except Exception as e:  # reported to the waiting requests; the worker goes on
        if len(items) > 1:
            for item in items:
                read_jobs([item], reader, settings, settle)
            return
        err = RequestError(str(e)) if isinstance(e, AnygrainError) else e
        items[0].job.future.set_exception(err)
        return
    abstain(hits, [(it.passages, it.job.min_confidence) for it in items], settings.passages)
    settle([item.job for item in items], hits)


def sentences_of(index: Index) -> Callable[[list[int]], list[tuple[list[int], list[int]]]]:
    """``answer_hits``'s ``sentences``: each passage row's sentence starts and ends, from
    the corpus store's ``sent_starts`` / ``sent_ends`` columns."""

    def sentences(rows: list[int]) -> list[tuple[list[int], list[int]]]:
        store = index.corpus
        return list(
            zip(store.column("sent_starts", rows), store.column("sent_ends", rows), strict=True)
        )

    return sentences


def check_min_confidence(
    value: Any, unit: Unit, reader: Callable[[], ReadingModel]
) -> float | None:
    """A request's minimum confidence: a number in [0, 1], for the answer grain of a
    reader with a confidence calibration (an :class:`AnygrainError` otherwise)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise AnygrainError(f"min_confidence must be a number in [0, 1], not {value!r}")
    if unit is not Unit.ANSWER:
        raise AnygrainError("min_confidence applies to the answer grain (unit answer)")
    from anygrain.reader.answering import calibration_for

    calibration_for(reader(), float(value))
    return float(value)


def abstain(
    hits: list[list[Hit]], jobs: list[tuple[list[list[Hit]], float | None]], read: int
) -> None:
    """Each job's questions' answers in ``hits`` (in order) replaced by the passages read
    where the best answer's confidence is below the job's minimum ("no answer")."""
    from anygrain.reader.answering import abstain_or_answer

    i = 0
    for passages, floor in jobs:
        for ps in passages:
            hits[i] = abstain_or_answer(hits[i], ps[:read], floor)
            i += 1
