"""The Index base class: what every index kind shares.

``Index.load(dir)`` checks the files its manifest lists (:mod:`anygrain.index.manifest`),
reads the kind from ``index.json`` (never from the file name) and dispatches to the
registered class, importing the kind's module on first use
(:mod:`anygrain.index.registry`).  ``Index.build`` refuses a target whose replacement
would lose data (:func:`~anygrain.index.manifest.check_build_target`) before anything is
written, then builds in a temporary sibling renamed onto the output when complete.  The
class also holds the kinds' shared options checks, per-kind defaults, evaluation and the
hooks through which :mod:`anygrain.index.updater` adds and compacts.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.errors import AnygrainError, ErrorLog, IndexMismatchError, UsageError, parse_enum
from anygrain.hits.hit import Hit, Unit
from anygrain.index.encoded import EncodedQueries
from anygrain.index.filters import accepts_filter
from anygrain.index.manifest import MANIFEST, check_build_target, check_on_open, read_manifest
from anygrain.index.registry import IndexKind, registered_class
from anygrain.index.scope import Scope, gold_rows
from anygrain.index.settings import BuildJob, BuildOptions, IndexSettings
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.checksums import SMALL_LIMIT, Verify
from anygrain.utils.lock import writer_lock

if TYPE_CHECKING:
    from anygrain.corpus.questions import Questions
    from anygrain.eval.evaluate import EvalReport
    from anygrain.index.updater import StagedUpdate

# the metrics ``evaluate_index`` and ``anygrain eval`` report by default for passage-grain
# results, whatever the kind (dense, BM25, hybrid, and a phrase index at passage, sentence
# or document), so two indexes compare without flags; the same as
# ``anygrain.eval.DEFAULT_METRICS`` for a searcher that is no index
PASSAGE_METRICS = ("top@1", "top@5", "top@20", "mrr@20")


class UpdateOp(str, enum.Enum):
    """An update of a built index in place of a rebuild (:mod:`anygrain.index.updater`);
    the value is how messages name it."""

    ADD = "adding documents"
    COMPACT = "compacting"


@functools.cache
def keyword_only(method: Callable[..., Any]) -> frozenset[str]:
    """The keyword-only parameters of ``method`` (the options a kind's ``search`` takes)."""
    return frozenset(
        p.name
        for p in inspect.signature(method).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def _refused(cls: type[Index], what: str, name: str, where: str | Path | None) -> UsageError:
    """The error for a ``what`` (load or search) option ``name`` that the kind of ``cls``
    does not take, naming the kinds that take it."""

    def takes(c: type[Index]) -> bool:
        return name in (c.load_options if what == "load" else c.search_options())

    kinds = [
        k.value
        for k in IndexKind
        if k is not IndexKind.SHARDED and (c := registered_class(k)) is not None and takes(c)
    ]
    at = f"{where}: " if where is not None else ""
    if not kinds:
        return UsageError(f"{at}no index kind takes the {what} option '{name}'")
    which = ", ".join(kinds[:-1]) + " or " * (len(kinds) > 1) + kinds[-1]
    return UsageError(f"{at}the {what} option '{name}' needs a {which} index, not {cls.kind.value}")


class Index(ABC):
    """A searchable index over a corpus store."""

    kind: ClassVar[IndexKind]
    format_version: ClassVar[int] = 1
    # Per-kind defaults, so callers ask the index instead of testing its kind.
    #: the grains ``search`` returns; a kind with several takes ``search(unit=...)``
    units: ClassVar[tuple[Unit, ...]] = (Unit.PASSAGE,)
    default_unit: ClassVar[Unit] = Unit.PASSAGE
    #: the evaluation scopes the kind takes (what gold-passage means: :meth:`evaluate_questions`)
    scopes: ClassVar[tuple[Scope, ...]] = (Scope.CORPUS, Scope.GOLD_PASSAGE)
    #: whether ``load(model=...)`` takes a question-side model in place of the index's own
    takes_query_model: ClassVar[bool] = False
    #: the options :meth:`load` hands to the kind's :meth:`open` (``model``: a question-side
    #: model, ``device``: where questions are encoded, ...); :meth:`load` refuses any other
    load_options: ClassVar[frozenset[str]] = frozenset()
    #: the search options whose values the kind checks before a search, each with its check
    #: (``check(value, name)``: the value as searched, or an AnygrainError naming ``name``);
    #: these are the ones a server's client may set (:mod:`anygrain.serve.options`)
    search_option_checks: ClassVar[Mapping[str, Callable[[Any, str], Any]]] = {}
    #: the kind's build settings (its options besides the shared :class:`BuildOptions`)
    settings_type: ClassVar[type[IndexSettings]]
    #: the finaliser removing the temporary directory a :meth:`from_texts` index was built
    #: in (:mod:`anygrain.index.from_python`); None for an index the caller placed
    managed_dir: Any = None
    #: the documents deleted from it (:class:`~anygrain.index.tombstones.Tombstones`, which
    #: :meth:`load` records), whose rows every search leaves out; None when none
    tombstones: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # every kind's search takes filter= (anygrain.index.filters), without knowing of it
        for name in ("search", "search_encoded"):
            if name in cls.__dict__:
                setattr(cls, name, accepts_filter(cls.__dict__[name]))

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = Path(path)
        self.manifest = manifest
        # the settings it was built with, from index.json; None for an index from before
        # they were recorded (and for the parts a hybrid index opens)
        build = (manifest.get("settings") or {}).get("build")
        try:
            self.build_settings: IndexSettings | None = (
                None if build is None else self.settings_type.from_dict(build)
            )
        except AnygrainError as e:  # a setting out of its range: checked on open too
            raise AnygrainError(f"{self.path / MANIFEST}: settings.build: {e}") from None

    # --- construction -------------------------------------------------
    @staticmethod
    def build(
        source: Any,
        *,
        kind: IndexKind | str,
        out: str | Path,
        overwrite: bool = False,
        **settings: Any,
    ) -> Index:
        """Build an index of ``kind`` from a source (``FORMAT:PATH``, path, or corpus store).

        ``settings`` are the shared :class:`BuildOptions` and the kind's own
        (``cls.settings_type``); one the kind does not take raises :class:`UsageError`.
        ``text_field``, ``id_field``, ``title_field`` and ``meta_fields`` name the fields
        of a CSV, TSV or JSONL source (:mod:`anygrain.corpus.fields`).
        ``out`` must be new or empty, or an index to replace with ``overwrite``; see
        :func:`check_build_target`."""
        from anygrain.corpus.fields import FieldMap, with_read_options

        source = with_read_options(source, FieldMap.take(settings))
        k = IndexKind(kind)
        cls = registered_class(k)
        if cls is None:
            raise AnygrainError(f"index kind '{k.value}' is not available")
        o = Path(out)
        if o.name in ("", ".."):  # "." or "..": temporary siblings need a real name
            o = o.resolve()
        return cls.build_from(source, o, overwrite=overwrite, **settings)

    @staticmethod
    def from_texts(
        texts: Iterable[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[Any] | None = None,
        *,
        kind: IndexKind | str = IndexKind.BM25,
        out: str | Path | None = None,
        **options: Any,
    ) -> Index:
        """An index over ``texts`` (one document each, with the metadata and id at the same
        position), built as :meth:`build` builds files.  ``out=None`` builds into a
        temporary directory that lives as long as the index (:meth:`close`); ``options``
        are :meth:`build`'s (``progress`` defaults to False)."""
        from anygrain.corpus.pydocs import texts_as_documents
        from anygrain.index.from_python import build_documents

        docs = texts_as_documents(texts, metadatas, ids)
        return build_documents(docs, kind=kind, out=out, **options)

    @staticmethod
    def from_documents(
        docs: Iterable[Any],
        *,
        kind: IndexKind | str = IndexKind.BM25,
        out: str | Path | None = None,
        **options: Any,
    ) -> Index:
        """:meth:`from_texts` for documents: anygrain ``SourceDocument``s, dicts (``text``,
        ``meta``/``metadata``, ``id``, ...) or LangChain, LlamaIndex and Haystack documents
        (recognised by their attributes: :mod:`anygrain.corpus.pydocs`)."""
        from anygrain.corpus.pydocs import as_documents
        from anygrain.index.from_python import build_documents

        return build_documents(as_documents(docs), kind=kind, out=out, **options)

    def close(self) -> None:
        """Remove the temporary directory a :meth:`from_texts` index without ``out`` was
        built in (nothing for any other index); the index is unusable afterwards."""
        if self.managed_dir is not None:
            self.managed_dir()

    def prepare_serving(self) -> None:
        """Load what a long-running process (a server) should hold before its first search,
        which a one-shot search would rather not pay for (nothing, unless a kind says so)."""
        return None

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def build_from(
        cls,
        source: Any,
        out: Path,
        *,
        split: str | None = None,
        errors: ErrorLog | None = None,
        progress: bool = True,
        corpus_dir: Path | None = None,
        overwrite: bool = False,
        executor: Executor | ExecutorKind | str | None = None,
        device: str | None = None,
        runtime: str | None = None,
        **options: Any,
    ) -> Index:
        """Build this kind from ``source`` into ``out``: ``options`` are the kind's settings
        (:meth:`settings_from`), checked and typed before anything is read or written."""
        from anygrain.utils.device import check_device

        settings = cls.settings_from(**options)
        check_device(device)  # a missing GPU is refused before anything is read
        common = BuildOptions(
            split, errors, progress, corpus_dir, overwrite, executor, device, runtime
        )
        return cls.build_with(source, Path(out), settings, common)

    @classmethod
    def settings_from(cls, **options: Any) -> IndexSettings:
        """The kind's settings (``settings_type``) from :meth:`build_from`'s options; an
        error for one it does not take."""
        return cls.settings_type.from_options(cls.kind.value, options)

    #: names the scratch directory beside the output a build keeps across an interruption
    #: (``.OUT.NAME.partial``: what a resumed build picks up); removed once the build is done
    scratch_name: ClassVar[str] = "build"

    @classmethod
    def build_with(
        cls, source: Any, out: Path, settings: IndexSettings, options: BuildOptions
    ) -> Index:
        """The build every kind shares: refuse a target whose replacement would lose data
        (:func:`check_build_target`) and what :meth:`check_build` refuses, before anything
        is read or written; then, in a temporary sibling renamed onto ``out`` only when
        complete, open or build the passage store (``options.corpus_dir``, default
        ``corpus/`` inside the index) and let the kind :meth:`write` its files and
        ``index.json``; remove the scratch directory and open the index."""
        from anygrain.corpus.source import open_or_build_corpus

        out = Path(out)
        # one writer per --out: an update or another build of it at work is refused
        with writer_lock(out, "building an index"):
            check_build_target(source, out, overwrite=options.overwrite)
            cls.check_build(settings, options)
            work = out.with_name(f".{out.name}.{cls.scratch_name}.partial")
            with atomic_dir(out) as tmp:
                store = open_or_build_corpus(
                    source,
                    options.corpus_dir or tmp / "corpus",
                    split=options.split,
                    errors=options.errors,
                    progress=options.progress,
                )
                reopen = cls.write(BuildJob(tmp, store, settings, options, work))
            shutil.rmtree(work, ignore_errors=True)
        return Index.load(out, **(reopen or {}))

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        """Refuse, before the corpus is read, what the kind cannot build (e.g. load a named
        model, so that a wrong name fails first); nothing by default."""
        return None

    @classmethod
    @abstractmethod
    def write(cls, job: BuildJob) -> Mapping[str, Any] | None:
        """The kind's part of :meth:`build_with`: write its files for ``job.corpus`` under
        ``job.out`` (a temporary directory), ``index.json`` last with ``write_manifest`` and
        ``job.settings`` under ``settings.build``.  ``job.work`` is a scratch directory
        outside ``job.out`` that survives a failed build (where a resumable encode keeps its
        shards); the template removes it after success.  May return load options the built
        index is opened with (the model already in memory, so it is not loaded twice)."""

    @staticmethod
    def load(
        path: str | Path,
        *,
        verify: Verify | str = Verify.SMALL,
        small_limit: int = SMALL_LIMIT,
        **options: Any,
    ) -> Index:
        """Open an index directory, whatever its kind, after checking its files.

        ``verify``: ``sizes`` (every file's size), ``small`` (sizes, and the checksum of
        files up to ``small_limit`` bytes and of the index's model weights whatever their
        size, once per process for each version of a weight file; the default) or
        ``full`` (every checksum).  ``options`` are the kind's :attr:`load_options` (one it
        does not take raises :class:`UsageError`); a None value is no option."""
        p = Path(path)
        m = read_manifest(p)
        try:
            kind = IndexKind(m.get("kind"))
        except ValueError:
            raise AnygrainError(f"{p / MANIFEST}: unknown index kind {m.get('kind')!r}") from None
        cls = registered_class(kind)
        if cls is None:
            raise AnygrainError(f"{p}: index kind '{kind.value}' is not available")
        options = cls.check_load_options(options, where=p)
        if m.get("format_version") != cls.format_version:
            raise IndexMismatchError(
                f"{p}: index format version {m.get('format_version')} but this anygrain reads "
                f"version {cls.format_version}; rebuild the index"
            )
        check_on_open(p, m, parse_enum(Verify, verify), small_limit)
        try:
            idx = cls.open(p, m, **options)
        except (OSError, ValueError, EOFError, KeyError, RuntimeError) as e:
            # what the checksums cannot catch (an index from before them, a large file
            # checked by size only) still gets one line naming the index, not a traceback
            raise AnygrainError(
                f"{p}: cannot open the index ({type(e).__name__}: {e}); "
                f"`anygrain verify {p}` checks its files"
            ) from e
        if m.get("tombstones"):  # deleted documents (`anygrain delete`), hidden by search
            from anygrain.index.tombstones import hide_deleted

            hide_deleted(idx, m)
        return idx

    @classmethod
    @abstractmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> Index: ...

    @classmethod
    def part_dirs(cls, path: Path, manifest: dict[str, Any]) -> list[Path]:
        """The index directories :meth:`open` opens as parts of the index at ``path`` (a
        hybrid index's two, a sharded index's shards); none by default.  Those outside
        ``path`` are checked with the index's own files, at the depth :meth:`load` (or
        ``anygrain verify``) was asked for."""
        return []

    # --- search ---------------------------------------------------------
    @abstractmethod
    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        """Top-``k`` hits for each query, best first; ``filter=`` (any kind,
        :mod:`anygrain.index.filters`) keeps the top ``k`` whose metadata match."""

    def search_one(self, query: str, k: int = 10, **options: Any) -> list[Hit]:
        return self.search([query], k, **options)[0]

    def encode(self, queries: Sequence[str]) -> EncodedQueries:
        """The query encoder's stage of :meth:`search` (:mod:`anygrain.index.encoded`);
        kinds with one override it, the others encode nothing."""
        return EncodedQueries(list(queries))

    def search_threads(self) -> int:
        """Threads a server searches this index from at once (:meth:`search_encoded`): 1
        unless the kind is safe to search concurrently and its search costs far more than
        encoding the questions (a phrase index that re-scores passages)."""
        return 1

    def search_encoded(
        self, encoded: EncodedQueries, k: int = 10, **options: Any
    ) -> list[list[Hit]]:
        """:meth:`search` of queries :meth:`encode` has encoded: the same hits."""
        return self.search(encoded.texts, k, **options)

    @property
    def corpus(self):  # type: ignore[no-untyped-def]
        """The passage store this index was built over."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), **self.manifest}

    def summary(self) -> dict[str, Any]:
        """What the index is, JSON-ready, for people and programs (``anygrain index`` and
        ``add`` print it, the server's ``/info`` returns it): kind, path, format, when it was
        built, its model (``name``, ``base_model``, ``fingerprint``; None without one), its
        corpus (checksum and counts), ``counts`` (phrase indexes), units, ``encoding`` (how a
        phrase build encoded: ``precision``, ``runtime``, ``device``); kinds add their own
        (a hybrid index its ``fusion`` and ``components``, a sharded one its ``shards``)."""
        m = self.manifest
        corpus = {k: v for k, v in (m.get("corpus") or {}).items() if k != "path"}
        try:
            store = self.corpus
            corpus["n_passages"] = len(store)
            corpus["n_documents"] = store.n_documents
            corpus["source_format"] = store.manifest.get("source_format")
        except (NotImplementedError, AttributeError, KeyError):
            pass
        model = m.get("model")
        # how a build encoded its passages, where it records that (a phrase build does)
        encoding = (m.get("timings") or {}).get("encoding")
        return {
            "kind": self.kind.value,
            "path": str(self.path),
            "format": m.get("format"),
            "format_version": m.get("format_version"),
            "created": m.get("created"),
            "model": (
                {k: model[k] for k in ("name", "base_model", "fingerprint") if model.get(k)}
                if isinstance(model, dict)
                else None
            ),
            "corpus": corpus,
            "counts": m.get("counts"),
            "units": [u.value for u in self.units],
            "default_unit": self.default_unit.value,
            **({"encoding": encoding} if isinstance(encoding, dict) else {}),
        }

    # --- the options a kind takes ---------------------------------------------------------
    @classmethod
    def check_load_options(
        cls, options: Mapping[str, Any], *, where: str | Path | None = None
    ) -> dict[str, Any]:
        """``options`` for :meth:`load` without those set to None; :class:`UsageError` for one
        the kind does not take (naming the kinds that do), and for a ``device`` that is not
        here (a missing GPU), before anything is read."""
        given = {k: v for k, v in options.items() if v is not None}
        for name in given:
            if name not in cls.load_options:
                raise _refused(cls, "load", name, where)
        if "device" in given:
            from anygrain.utils.device import check_device

            check_device(given["device"])
        return given

    @classmethod
    def encode_options(cls) -> frozenset[str]:
        """The options the kind's :meth:`encode` takes (its keyword-only parameters)."""
        return keyword_only(cls.encode)

    @classmethod
    def search_options(cls) -> frozenset[str]:
        """The options the kind's :meth:`search` takes: its keyword-only parameters and
        those of :meth:`search_encoded`, which it forwards them to."""
        return keyword_only(cls.search) | keyword_only(cls.search_encoded) | {"filter"}

    def check_search_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` for :meth:`search` without those set to None, each value checked by
        :attr:`search_option_checks` where the kind has a check for it; :class:`UsageError`
        for an option the kind does not take, naming the kinds that do."""
        given = {k: v for k, v in options.items() if v is not None}
        takes = self.search_options()
        for name in given:
            if name not in takes:
                raise _refused(type(self), "search", name, self.path)
        checks = self.search_option_checks
        return {k: checks[k](v, k) if k in checks else v for k, v in given.items()}

    # --- per-kind defaults ----------------------------------------------------------------
    @classmethod
    def cuts_units(cls) -> bool:
        """Whether the kind returns several grains, cutting coarser hits from finer ones in
        search rounds (``search(unit=..., stats=[...])``)."""
        return len(cls.units) > 1

    @classmethod
    def default_metrics(cls, k: int | None, unit: Unit, scope: Scope = Scope.CORPUS) -> list[str]:
        """The metrics an evaluation at ``unit`` with ``k`` hits, in ``scope``, reports by
        default."""
        return list(PASSAGE_METRICS)

    @classmethod
    def default_model_fingerprint(cls, lang: str) -> str | None:
        """The fingerprint of the model a build without ``model`` uses for ``lang``, where
        the kind records one to check (None: nothing to check)."""
        return None

    def check_unit(self, unit: Unit | str | None) -> Unit:
        """``unit`` as a Unit (the kind's default when None); an error for one it lacks."""
        if unit is None:
            return self.default_unit
        u = parse_enum(Unit, unit)
        if u is Unit.ANSWER:  # any index answers: a reader reads its top passages
            return u
        if u not in self.units:
            have = ", ".join(f"{x.value}s" for x in self.units)
            lacking = [x.value for x in Unit if x not in self.units and x is not Unit.ANSWER]
            others = ", ".join(lacking[:-1]) + " or " * (len(lacking) > 1) + lacking[-1]
            raise AnygrainError(
                f"{self.path}: a {self.kind.value} index returns {have}; "
                f"unit {others} needs a phrase index"
            )
        return u

    def check_scope(self, scope: Scope | str | None) -> Scope:
        """``scope`` as a Scope (corpus when None); an error for one the kind does not take."""
        s = parse_enum(Scope, scope or Scope.CORPUS)
        if s not in self.scopes:
            raise AnygrainError(
                f"{self.path}: a {self.kind.value} index takes scope "
                f"{' or '.join(x.value for x in self.scopes)}, not {s.value}"
            )
        return s

    def unit_options(self, unit: Unit) -> dict[str, Any]:
        """The ``search`` options that ask for ``unit`` (none where the kind has one unit)."""
        return {"unit": unit} if self.cuts_units() else {}

    def _on(self, questions: Questions) -> str:
        """How errors about an evaluation name it."""
        return f"{self.path} on {questions.source or 'these questions'}"

    def unit_ids(self, unit: Unit) -> Callable[[str], bool]:
        """Whether the index holds a unit id at ``unit``'s grain (what qrels name)."""
        store = self.corpus
        if unit is not Unit.DOCUMENT:
            return store.__contains__  # type: ignore[no-any-return]
        doc_ids: set[str] = set()

        def has_document(uid: str) -> bool:
            # the id column is read only when some question has qrels to check
            if not doc_ids:
                doc_ids.update(store.column("doc_id"))
            return uid in doc_ids

        return has_document

    def evaluate_questions(
        self,
        questions: Questions,
        *,
        unit: Unit,
        scope: Scope,
        k: int | None,
        metrics: list[str],
        run_out: str | Path | None,
        drop_empty: bool,
        progress: bool,
        search_options: dict[str, Any] | None,
    ) -> EvalReport:
        """Score the index on ``questions`` (checked ``unit`` and ``scope``; ``metrics``, when
        not given, are :meth:`default_metrics`: :func:`anygrain.api.evaluate_index`, the one
        entry, resolves them), recording how many qrels ids it holds.  A passage kind searches the whole corpus in either scope;
        ``gold-passage`` changes what counts as relevant: the question's own paragraph (by
        id), not any passage that happens to contain the answer string."""
        from anygrain.corpus.questions import Question
        from anygrain.eval import evaluate
        from anygrain.eval.coverage import check_qrels_coverage, judge_by_gold
        from anygrain.eval.runs import check_run_path

        if run_out is not None:  # never over the question file (API callers too)
            check_run_path(run_out, [questions.source or None, self.path])
        items: list[Question] = list(questions)
        if scope is Scope.GOLD_PASSAGE:
            for q in items:
                if q.answerable and not q.qrels:
                    gold_rows(self.corpus, q, source=questions.source)  # same passage, same text
            items = judge_by_gold(items, source=questions.source)
        coverage = check_qrels_coverage(items, self.unit_ids(unit), where=self._on(questions))
        report = evaluate(
            self,
            items,
            metrics=metrics,
            k=k,
            run_out=Path(run_out) if run_out else None,
            drop_empty=drop_empty,
            progress=progress,
            search_options=search_options,
        )
        report.n_qrels_ids = coverage.n_ids
        report.n_qrels_ids_missing = coverage.n_missing
        return report

    # --- updates: `anygrain add` and `compact` ---------------------------------------------
    # anygrain.index.updater stages a copy of the index, grows or compacts its corpus and
    # swaps it in; the kind's hooks bring the rest of the staged copy up to that corpus.
    #: the module (beside the kind's build) defining ``add_rows(update)`` and
    #: ``compact_rows(update)``, imported on first use; None: the kind takes no updates
    update_module: ClassVar[str | None] = None

    @classmethod
    def check_update(cls, index: Index, op: UpdateOp) -> None:
        """Refuse ``op`` on ``index`` (a UsageError naming it) where the kind cannot do it;
        asked before anything is staged.  A kind refusing some of its indexes overrides it."""
        if cls.update_module is None:
            raise UsageError(
                f"{index.path}: {op.value} is not supported for a {cls.kind.value} index"
            )

    @classmethod
    def _update_step(cls, update: StagedUpdate, op: UpdateOp) -> None:
        cls.check_update(update.index, op)
        assert cls.update_module is not None  # check_update refused otherwise
        step = "add_rows" if op is UpdateOp.ADD else "compact_rows"
        getattr(importlib.import_module(cls.update_module), step)(update)

    @classmethod
    def add_rows(cls, update: StagedUpdate) -> None:
        """Add ``update.segment``'s passages (rows after the old ones in ``update.store``,
        the grown corpus) to the staged copy ``update.staged`` of ``update.index``,
        rewriting its ``index.json`` last."""
        cls._update_step(update, UpdateOp.ADD)

    @classmethod
    def compact_rows(cls, update: StagedUpdate) -> None:
        """Keep only ``update.keep_rows`` (old rows, in order; ``update.store`` is the
        compacted corpus) in the staged copy ``update.staged`` of ``update.index``,
        rewriting its ``index.json`` last."""
        cls._update_step(update, UpdateOp.COMPACT)
