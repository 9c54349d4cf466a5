"""The index a server answers from: loaded once, searched in two stages, inputs checked
(:mod:`.requests`).  No web code here: :mod:`anygrain.serve.app` turns
:class:`RequestError` into a 4xx response and everything else into the JSON it returns.

Two worker threads, one per stage of a search (:mod:`anygrain.index.encoded`): the
*encoder* thread runs the index's query encoder (:meth:`Index.encode`: tokenizer and
transformer), the *search* thread the rest (:meth:`Index.search_encoded`: FAISS, span
scoring, BM25, hits).  An index whose search costs far more than encoding (a phrase index
re-scoring passages: :meth:`Index.search_threads`) gets two search threads, the second
taking the next batch while the first searches; the phrase model's tokenizer and BM25's
query analysis take locks for it.  While one batch is searched the next is encoded, so the
two stages use two cores.
Each stage stays in one thread because its state is not shared safely: a Hugging Face fast
tokenizer raises "Already borrowed" when two threads encode at once, and BM25's stemmer
objects are not documented as thread-safe.  Phrase search sets torch to one thread around
span scoring; serve with ``threads=1`` so each stage keeps to its core.

On a CPU with native bfloat16 (AVX-512 BF16, AMX) the question encoder's linear layers run
in bfloat16 by default (``question_bf16``; :meth:`PhraseEncoder.bf16_questions`).

Request threads hand their questions to the encoder thread and wait.  While it encodes,
new requests queue; it then takes everything queued (up to ``MAX_BATCH_QUESTIONS``
questions) and encodes it as one batch; the search thread searches it as one batch per
(unit, k): one encoder pass and one FAISS call for several clients, which is where
concurrent load gains over a plain lock.  Each question gets the hits it would get alone.
The latency a response reports includes the wait.

Files changed under a running server: the index memory-maps its arrays (``.npy``, FAISS,
Arrow), and a mapped file truncated in place kills the process with SIGBUS at the next
read of a page past the new end -- no exception can be raised for it.  So before each
batch the encoder thread compares the mapped files' size, mtime and inode with what they were
when the index was loaded (one ``stat`` per file).  On a difference it reopens the index
from its directory (``Index.load``, which checks the files against their recorded
checksums): the index was replaced, and the new one is searched from then on.  When it
does not open, the batch is refused with :class:`IndexUnavailable` (a 503 naming the
file), ``/health`` says unhealthy, and the reload is tried again once the files change
again (the index is rebuilt or restored).

The answer grain (unit ``answer``, any kind of index) needs a reader: the one given
(``reader``, loaded at startup) or the shipped reader for the corpus language (loaded on
the first answer request).  Without one, an answer request is refused with
:class:`ReaderUnavailable` (a 400 saying to pass ``--reader``).  The search thread
retrieves the top ``read`` passages of every answer question of a batch and hands them to
the *reading* threads (:class:`~anygrain.serve.reading.ReadingThreads`, two where there are
two cores): reading is the costliest stage, and in the search thread it would hold back
every other search.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.encoded import EncodedQueries
from anygrain.index.filters import filter_key
from anygrain.index.manifest import MANIFEST
from anygrain.serve import requests
from anygrain.serve.options import SearchOptions
from anygrain.serve.reading import (
    ReadingThreads,
    index_options,
    load_reader,
    read_jobs,
    read_settings,
    reader_label,
    reading_threads,
    shipped_reader_for,
)
from anygrain.serve.requests import (  # the limits and RequestError, re-exported
    DEFAULT_K,
    MAX_BATCH,
    MAX_K,
    MAX_QUESTION_CHARS,
    RequestError,
    check_max_k,
)
from anygrain.serve.watch import Stamp, describe_change, mapped_files, stamp
from anygrain.utils.precision import native_bf16

if TYPE_CHECKING:  # the reader imports torch: only when unit answer is asked
    from anygrain.reader.runtime import ReadingModel

#: The most questions the worker searches in one call (several requests' worth).
MAX_BATCH_QUESTIONS = 64

log = logging.getLogger("anygrain.serve")


class ReaderUnavailable(RequestError):
    """Unit answer asked of a server that has no reader to read with (a 400 naming the
    option that gives it one)."""


class IndexUnavailable(AnygrainError):
    """The index's files changed on disk and it does not open again (the server's state: a
    503 until the index is whole again)."""


@dataclass
class SearchOutcome:
    hits: list[list[Hit]]
    unit: Unit
    k: int
    latency_ms: float


_T = TypeVar("_T")


@dataclass
class _Job:
    questions: list[str]
    unit: Unit
    k: int
    future: Future[list[list[Hit]]]
    options: SearchOptions = ()  # the index's search options (anygrain.serve.options)
    encoded: EncodedQueries | None = None  # set by the encoder thread
    filter: dict[str, Any] | None = None  # metadata filter (anygrain.index.filters)
    min_confidence: float | None = None  # answers below it: "no answer" (the passages read)


@dataclass
class _Reading:
    """An answer job the search thread hands to the reader thread: its questions' passages,
    retrieved from ``index``, and the number of answers each question gets."""

    index: Index
    job: _Job
    passages: list[list[Hit]]
    k: int


@dataclass
class _Encoded:
    """A batch the encoder thread hands to the search thread: the index that encoded it
    (searched with the same, even if the index is reloaded meanwhile) and its jobs."""

    index: Index
    jobs: list[_Job]


class SearchService:
    """One open index, searched by worker threads (encode, then one or two search threads:
    :meth:`Index.search_threads`) that batch queued requests.

    ``batching=False`` searches each request on its own (still one at a time per stage).
    ``reader`` (a reader directory or shipped name, loaded here) reads answers for unit
    ``answer``; without it the shipped reader for the corpus language does, when one
    ships (loaded on the first answer request).  ``read``: passages read per question
    (default :data:`~anygrain.reader.answering.DEFAULT_PASSAGES`).  ``max_k``: the most
    hits a request may ask for (default :data:`~anygrain.serve.requests.MAX_K`).
    ``read_threads``: threads reading answers at once (default
    :data:`~anygrain.serve.reading.READ_THREADS`, at most one per core)."""

    def __init__(
        self,
        index: Index,
        *,
        batching: bool = True,
        load_options: dict[str, Any] | None = None,
        question_bf16: bool | None = None,
        reader: str | Path | None = None,
        read: int | None = None,
        max_k: int = MAX_K,
        read_threads: int | None = None,
    ) -> None:
        self.batching = batching
        self.read_threads = reading_threads(read_threads, os.cpu_count())
        self.max_k = check_max_k(max_k)
        self.read_settings = read_settings(read)
        self.read = self.read_settings.passages  # passages read per answer question
        # questions encoded with bfloat16 linear layers; None: where this CPU has native bf16
        if question_bf16:  # asked for: without torch the question graph runs float32
            from anygrain.encode.onnx_runtime import require_torch

            require_torch("--question-bf16")
        self.question_bf16 = native_bf16() if question_bf16 is None else bool(question_bf16)
        self.n_searches = 0  # search calls the index has made
        self.n_questions = 0
        self._counting = threading.Lock()  # the counters, updated by each search thread
        # one search at a time for an index that wants one search thread (the index may be
        # reloaded as such while two search threads run)
        self._one_search = threading.Lock()
        self.n_reloads = 0  # times the index was reopened after its files changed
        self.generation = 0  # counts reloads: what describes the index is recomputed on change
        self.started = time.time()
        # how the index is reopened when its files change (Index.load's options)
        self._load_options = dict(load_options or {})
        # held while the index is checked, reloaded or searched: a reload never swaps the
        # index under a running search
        self._lock = threading.Lock()
        self._error: str | None = None  # why the index is unavailable; None while it is fine
        self._failed: dict[Path, Stamp] | None = None  # the files when the reload failed
        self._use(index)
        # the answer grain's reader: given (loaded now, so a bad one fails the startup) or
        # the shipped one for the corpus language (loaded on the first answer request)
        self._reader_lock = threading.Lock()
        self._reader: ReadingModel | None = None
        self._reader_error: str | None = None  # why the default reader did not load
        self._reader_given = reader is not None
        if reader is not None:
            self.reader_name: str | None = reader_label(reader)
            self._reader = load_reader(index, reader, self._load_options.get("runtime"))
        else:
            self.reader_name = shipped_reader_for(index)
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # one batch in hand between the stages: the encoder runs at most one batch ahead,
        # and what arrives meanwhile waits to be batched with what follows
        self._encoded: queue.Queue[_Encoded] = queue.Queue(maxsize=1)
        self._readers = ReadingThreads(self.read_threads, batching)
        # two where the index's search is the costly stage (Index.search_threads)
        searchers = max(1, min(index.search_threads(), os.cpu_count() or 1))
        self.search_threads = searchers
        self._workers = [
            threading.Thread(target=self._encode_work, name="anygrain-encode", daemon=True),
            *(
                threading.Thread(target=self._search_work, name=f"anygrain-search-{i}", daemon=True)
                for i in range(searchers)
            ),
            *(
                threading.Thread(
                    target=self._read_work, args=(i,), name=f"anygrain-read-{i}", daemon=True
                )
                for i in range(self.read_threads)
            ),
        ]
        for w in self._workers:
            w.start()

    @classmethod
    def load(
        cls,
        index: str | Path | Index,
        *,
        batching: bool = True,
        question_bf16: bool | None = None,
        reader: str | Path | None = None,
        read: int | None = None,
        max_k: int = MAX_K,
        read_threads: int | None = None,
        **load_options: Any,
    ) -> SearchService:
        read_settings(read)  # a bad --read is refused before the index loads
        check_max_k(max_k)  # and a bad --max-k
        reading_threads(read_threads, os.cpu_count())  # and a bad --read-threads
        idx = (
            index
            if isinstance(index, Index)
            else Index.load(index, **index_options(index, load_options))
        )
        return cls(
            idx,
            batching=batching,
            load_options=load_options,
            question_bf16=question_bf16,
            reader=reader,
            read=read,
            max_k=max_k,
            read_threads=read_threads,
        )

    # --- the files under the index ------------------------------------------------------
    def _use(self, index: Index) -> None:
        self.index = index
        self.units = index.units  # the grains this kind returns, its default first
        self.default_unit = index.default_unit
        files = mapped_files(index)
        if files:  # and index.json: rewritten when the index is updated or rebuilt
            files.append(Path(index.path) / MANIFEST)
        self._files = {p: stamp(p) for p in files}

    def _changed(self) -> tuple[dict[Path, Stamp], str | None]:
        """The files' stamps now, and what changed since the index was loaded (None: nothing)."""
        now = {p: stamp(p) for p in self._files}
        for p, was in self._files.items():
            if now[p] != was:
                return now, describe_change(p, was, now[p])
        return now, None

    def check_index(self) -> None:
        """Raise :class:`IndexUnavailable` unless the index can be searched: its mapped
        files are as they were when it was loaded, or they changed and it opens again
        (reloaded here, once per change of the files).  The worker calls it before each
        batch, ``/health`` on each probe; only ``stat`` calls when nothing changed."""
        with self._lock:
            self._check_locked()

    def _check_locked(self) -> None:
        now, change = self._changed()
        if change is None:
            self._error = self._failed = None
            return
        if self._failed == now:  # the reload failed with the files as they are: no retry
            raise IndexUnavailable(self._error)
        try:
            idx = Index.load(self.index.path, **index_options(self.index.path, self._load_options))
            idx.prepare_serving()
        except Exception as e:  # the index is damaged or half-written: refuse until it opens
            why = str(e) if isinstance(e, AnygrainError) else f"{type(e).__name__}: {e}"
            self._error = (
                f"{change}, while the index was being served; it does not reopen ({why}); "
                "searches resume once it does"
            )
            self._failed = now
            log.error("%s", self._error)  # once per change of the files, not per request
            raise IndexUnavailable(self._error) from None
        self._use(idx)  # replaced: the old arrays are unmapped once nothing uses them
        self._error = self._failed = None
        self.n_reloads += 1
        self.generation += 1
        log.warning("%s; the index was reopened from %s", change, idx.path)

    @property
    def error(self) -> str | None:
        """Why the index cannot be searched now (None while it can), as of the last check."""
        return self._error

    # --- the answer grain's reader -------------------------------------------------------
    @property
    def reader_available(self) -> bool:
        """Whether unit ``answer`` can be asked: a reader was given, or one ships for the
        corpus language (and did not fail to load)."""
        if self._reader_given:
            return True
        return self.reader_name is not None and self._reader_error is None

    def reader(self) -> ReadingModel:
        """The reader answers are read with, loaded on first use when it was not given;
        :class:`ReaderUnavailable` when there is none."""
        with self._reader_lock:
            if self._reader is not None:
                return self._reader
            if self._reader_error is None and self.reader_name is None:
                self._reader_error = "no reader ships for the corpus language, none was given"
            if self._reader_error is None:
                try:
                    self._reader = load_reader(
                        self.index, self.reader_name, self._load_options.get("runtime")
                    )
                    return self._reader
                except AnygrainError as e:
                    self._reader_error = str(e)
                    log.error("the reader for unit answer does not load: %s", e)
            raise ReaderUnavailable(
                f"unit answer needs a reader ({self._reader_error}): start the server with "
                "--reader DIR_OR_NAME (a reader directory, e.g. from `anygrain train reader`, "
                "or a shipped reader's name; create_app(..., reader=...) in Python)"
            )

    # --- checks (anygrain.serve.requests) --------------------------------------------
    def check_unit(self, unit: Unit | str | None) -> Unit:
        """The unit asked (unit answer loads the reader now, or is a 400 naming --reader)."""
        return requests.check_unit(self.index, unit, self.reader)

    def check_options(self, options: Mapping[str, Any] | None) -> SearchOptions:
        return requests.check_options(self.index, options)

    check_filter = staticmethod(requests.check_filter)
    check_questions = staticmethod(requests.check_questions)

    def check_k(self, k: int) -> int:
        """``k`` between 1 and this server's ``max_k``."""
        return requests.check_k(k, self.max_k)

    def passage(self, passage_id: str) -> dict[str, Any]:
        """One passage by id (:func:`~anygrain.serve.requests.passage_of`), read from the
        index searched now (a reload swaps it whole)."""
        with self._lock:
            index = self.index
        return requests.passage_of(index, passage_id)

    # --- search -------------------------------------------------------------------------
    def search(
        self,
        questions: Sequence[str],
        *,
        unit: Unit | str | None = None,
        k: int = DEFAULT_K,
        filter: Any = None,
        options: Mapping[str, Any] | None = None,
        min_confidence: float | None = None,
    ) -> SearchOutcome:
        """Check the request, then have the worker search it; the latency includes the wait.
        ``filter`` keeps the top ``k`` hits whose metadata match (a dict or its JSON text:
        :mod:`anygrain.index.filters`); ``options`` are the index's search options a client
        sets (a phrase index's ``sparse_weight``, a hybrid index's ``fusion``, ``weight``
        and ``depth``: :mod:`.options`)."""
        t0 = time.perf_counter()
        job = self._submit(questions, unit, k, filter, options, min_confidence)
        hits = job.future.result()  # raises what the search raised
        return SearchOutcome(hits, job.unit, job.k, (time.perf_counter() - t0) * 1000.0)

    async def search_async(
        self,
        questions: Sequence[str],
        *,
        unit: Unit | str | None = None,
        k: int = DEFAULT_K,
        filter: Any = None,
        options: Mapping[str, Any] | None = None,
        min_confidence: float | None = None,
    ) -> SearchOutcome:
        """:meth:`search` for an event loop: the request waits for the workers without
        holding a thread (an HTTP server's thread pool hand-off costs each request time)."""
        t0 = time.perf_counter()
        job = self._submit(questions, unit, k, filter, options, min_confidence)
        hits = await asyncio.wrap_future(job.future)
        return SearchOutcome(hits, job.unit, job.k, (time.perf_counter() - t0) * 1000.0)

    def _submit(
        self,
        questions: Sequence[str],
        unit: Unit | str | None,
        k: int,
        filter: Any,
        options: Mapping[str, Any] | None,
        min_confidence: float | None = None,
    ) -> _Job:
        """The checked request, queued for the encoder thread."""
        qs = self.check_questions(questions)
        u = self.check_unit(unit)
        k = self.check_k(k)
        floor = requests.check_floor(min_confidence, u, self.reader)
        options_ = self.check_options(options)
        job = _Job(qs, u, k, Future(), options_, filter=self.check_filter(filter))
        job.min_confidence = floor
        self._queue.put(job)
        return job

    def _encode_work(self) -> None:
        while True:
            jobs = [self._queue.get()]
            n = len(jobs[0].questions)
            while self.batching and n < MAX_BATCH_QUESTIONS:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                jobs.append(job)
                n += len(job.questions)
            with self._lock:
                # A mapped file truncated after this check but before the search reads it
                # still kills the process with SIGBUS: the check narrows that window to one
                # batch, it cannot close it (only copying every array into memory would).
                try:
                    self._check_locked()
                except Exception as e:  # IndexUnavailable, or a bug: the worker goes on
                    for job in jobs:
                        job.future.set_exception(e)
                    continue
                index = self.index
            ready = self._encode(index, jobs)
            if ready:
                self._hand_over(_Encoded(index, ready))

    def _hand_over(self, pending: _Encoded) -> None:
        """Put an encoded batch in the search stage's hands; while that stage is busy,
        requests arriving meanwhile are encoded and join the batch, so a slow stage (reading
        answers) gets batches as large as its own pace allows."""
        n = sum(len(j.questions) for j in pending.jobs)
        while True:
            try:
                self._encoded.put(pending, timeout=0.003)
                return
            except queue.Full:
                pass
            more: list[_Job] = []
            while self.batching and n < MAX_BATCH_QUESTIONS:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                more.append(job)
                n += len(job.questions)
            if more:
                pending.jobs.extend(self._encode(pending.index, more))

    def encode_options(self, index: Index) -> dict[str, Any]:
        """What :meth:`Index.encode` is given: bf16 where chosen and the kind takes it."""
        return {"bf16": True} if self.question_bf16 and "bf16" in index.encode_options() else {}

    def _encode(self, index: Index, jobs: list[_Job]) -> list[_Job]:
        """Encode the jobs' questions in one call (each job alone if that fails, so one
        request's questions cannot fail the others); the jobs encoded."""
        try:
            enc = index.encode(
                [q for job in jobs for q in job.questions], **self.encode_options(index)
            )
        except Exception as e:
            if len(jobs) > 1:
                return [j for job in jobs for j in self._encode(index, [job])]
            jobs[0].future.set_exception(
                RequestError(str(e)) if isinstance(e, AnygrainError) else e
            )
            return []
        i = 0
        for job in jobs:
            job.encoded = enc.take(range(i, i + len(job.questions)))
            i += len(job.questions)
        return jobs

    def _search_work(self) -> None:
        while True:
            # What the encoder finished meanwhile joins this round: the encoder runs one
            # batch ahead, so under steady load each batch would otherwise hold one request.
            batches = self._waiting(self._encoded)
            for index in dict.fromkeys(b.index for b in batches):
                groups: dict[tuple[Unit, int, SearchOptions, str], list[_Job]] = {}
                for b in batches:
                    if b.index is not index:
                        continue
                    for job in b.jobs:
                        f = filter_key(job.filter) if job.filter else ""
                        groups.setdefault((job.unit, job.k, job.options, f), []).append(job)
                for (unit, k, options, _), group in groups.items():
                    self._run(index, group, unit, k, options, group[0].filter)

    def _run(
        self,
        index: Index,
        jobs: list[_Job],
        unit: Unit,
        k: int,
        options: SearchOptions,
        filter: dict[str, Any] | None = None,
    ) -> None:
        encoded = EncodedQueries.join([job.encoded for job in jobs if job.encoded is not None])
        given = {**dict(options), **({"filter": filter} if filter else {})}
        try:
            # an index reloaded meanwhile may want one search at a time
            alone = index.search_threads() < 2
            with self._one_search if alone else contextlib.nullcontext():
                if unit is Unit.ANSWER:
                    # the passages to read; the reader thread answers the jobs
                    hits = index.search_encoded(
                        encoded, self.read, **index.unit_options(Unit.PASSAGE), **given
                    )
                else:
                    hits = index.search_encoded(encoded, k, **index.unit_options(unit), **given)
        except Exception as e:  # reported to the waiting requests; the worker goes on
            if len(jobs) > 1:  # one request's questions must not fail the others
                for job in jobs:
                    self._run(index, [job], unit, k, options, filter)
                return
            err = RequestError(str(e)) if isinstance(e, AnygrainError) else e
            jobs[0].future.set_exception(err)
            return
        with self._counting:
            self.n_searches += 1
            self.n_questions += len(encoded)
        if unit is Unit.ANSWER:  # one item per job, so a failed read can fail just its job
            i = 0
            for job in jobs:
                n = len(job.questions)
                self._readers.put(_Reading(index, job, hits[i : i + n], k))
                i += n
            return
        _settle(jobs, hits)

    def _waiting(self, q: queue.Queue[_T] | queue.SimpleQueue[_T]) -> list[_T]:
        """The next item of ``q`` (waited for) and, when batching, every item already behind it."""
        items = [q.get()]
        while self.batching:
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                break
        return items

    def _read_work(self, slot: int) -> None:
        while True:
            # what the search thread handed over while the last batch was read joins this one
            items: list[_Reading] = self._readers.next_share()
            groups: dict[tuple[int, int], list[_Reading]] = {}
            for item in items:
                groups.setdefault((id(item.index), item.k), []).append(item)
            for group in groups.values():
                read_jobs(
                    group,
                    lambda: self._readers.reader_for(slot, self.reader()),
                    self.read_settings,
                    _settle,
                )

    def warm_up(self) -> None:
        """One search at startup, so the first client does not pay for torch's first call
        (and one answer search when a reader was given, loaded at startup), after what the
        index holds for serving (:meth:`~anygrain.index.base.Index.prepare_serving`)."""
        self.index.prepare_serving()
        self.search(["warm up"], k=1)
        if self._reader is not None:
            self.search(["warm up"], unit=Unit.ANSWER, k=1)
        self.n_searches = self.n_questions = 0

    # --- description --------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """What ``GET /info`` reports: the index's :meth:`~Index.summary` (kind, format, model,
        corpus, counts, units, and a hybrid index's fusion, a sharded one's shard count), its
        directory's name for its path (a path on the server's disk, like those of a hybrid
        index's components, is no business of a client), and the limits."""
        s = self.index.summary()
        answers = self.reader_available
        units = list(s.get("units") or [u.value for u in self.units])
        return {
            **{k: v for k, v in s.items() if k not in ("path", "components")},
            "index": self.index.path.name,
            "units": [*units, Unit.ANSWER.value] if answers else units,
            "reader": self.reader_name if answers else None,
            "read": self.read if answers else None,
            "question_precision": "bfloat16" if self.encode_options(self.index) else "float32",
            "search_threads": self.search_threads,
            "read_threads": self.read_threads if answers else None,
            "limits": {
                "max_k": self.max_k,
                "max_question_chars": MAX_QUESTION_CHARS,
                "max_batch": MAX_BATCH,
            },
        }


def _settle(jobs: list[_Job], hits: list[list[Hit]]) -> None:
    """Give each job its questions' hits, in the order the jobs' questions were joined."""
    i = 0
    for job in jobs:
        job.future.set_result(hits[i : i + len(job.questions)])
        i += len(job.questions)
