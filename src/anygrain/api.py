"""The Python API behind the CLI: each function is one user-level operation."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.formats import Format
from anygrain.corpus.questions import Questions, read_questions
from anygrain.corpus.questions import batch_questions as batch_questions  # FORMAT:PATH or lines
from anygrain.corpus.questions import read_question_lines as read_question_lines
from anygrain.corpus.questions import read_text_file as read_text_file  # or stdin
from anygrain.corpus.script import ConversionReport, Script
from anygrain.corpus.splitters import split_help as split_help  # help text of split options
from anygrain.demo import DemoAnswer as DemoAnswer  # what run_demo returns
from anygrain.demo import DemoResult as DemoResult
from anygrain.demo import run_demo as run_demo  # index the offline demo and answer it
from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.encode.onnx_runtime import require_torch
from anygrain.errors import AnygrainError, ErrorLog, UsageError, parse_enum
from anygrain.eval.domains import DOMAIN_SLOT as DOMAIN_SLOT  # one index per domain
from anygrain.eval.domains import DomainTable
from anygrain.eval.evaluate import EvalReport, check_eval_unit
from anygrain.eval.provenance import annotate_report
from anygrain.eval.runs import check_run_tag as check_run_tag  # a TREC run's tag, checked
from anygrain.eval.runs import run_lines as run_lines  # one question's TREC run lines
from anygrain.hits.hit import Hit, Unit, above_threshold, check_threshold
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files, read_manifest
from anygrain.index.registry import ENCODING_KINDS, IndexKind
from anygrain.index.scope import Scope
from anygrain.search import READ_OPTIONS as READ_OPTIONS  # the answer grain's options
from anygrain.search import QuestionHits as QuestionHits  # a batch search's lines
from anygrain.search import answer_unit as answer_unit
from anygrain.search import one_question_runtime as one_question_runtime
from anygrain.search import read_settings as read_settings
from anygrain.search import search_index as _search_index
from anygrain.search import search_questions as search_questions
from anygrain.search import takes_load_option as takes_load_option
from anygrain.train.saved_config import BF16_HELP as BF16_HELP  # help text of --bf16
from anygrain.utils.checksums import Problem, Verify
from anygrain.utils.threads import set_threads

if TYPE_CHECKING:
    from anygrain.phrase.compress import Compress
    from anygrain.phrase.packed import PackedInfo
    from anygrain.reader import Answer
    from anygrain.reader.packed import PackedReaderInfo
    from anygrain.train.dpr.config import DprTrainConfig
    from anygrain.train.dpr.recipe import Recipe
    from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig
    from anygrain.train.reader.config import ReaderTrainConfig


def load_questions(
    spec: str | Path, *, errors: ErrorLog | None = None, limit: int | None = None
) -> Questions:
    """Read a question set from ``FORMAT:PATH`` or ``PATH`` (format detected)."""
    return read_questions(spec, errors=errors, limit=limit)


def search_index(
    index: str | Path | Index,
    queries: Sequence[str],
    k: int = 10,
    *,
    score_threshold: float | None = None,
    **options: Any,
) -> list[list[Hit]]:
    """Top-``k`` hits per query (:func:`anygrain.search.search_index`: ``unit``,
    ``threads``, ``runtime`` and the kind's search options), less those whose
    :attr:`Hit.relevance <anygrain.hits.hit.Hit.relevance>` (in [0, 1]: an answer's
    calibrated confidence, else a fixed monotone map of the score) is below
    ``score_threshold``."""
    try:
        threshold = check_threshold(score_threshold)
    except ValueError as e:
        raise UsageError(str(e)) from None
    results = _search_index(index, queries, k, **options)
    return [above_threshold(hits, threshold) for hits in results]


def load_index(path: str | Path, *, verify: Verify | str = Verify.SMALL, **options: Any) -> Index:
    """Open the index at ``path``, whatever its kind, after checking its files (``verify``:
    sizes | small | full).  ``options`` are what the kind's ``open`` takes (``model``: a
    question-side model, ``device``: where questions are encoded); None is no option, and
    one the kind does not take raises :class:`~anygrain.errors.UsageError` naming it."""
    return Index.load(path, verify=verify, **options)


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
    load_options: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Score an index on a question set; index and questions may be given as paths
    (``load_options``: :func:`load_index`'s, for an index given as a path).

    Passage indexes (BM25, dense, hybrid) default to ``PASSAGE_METRICS``
    (:mod:`anygrain.index.base`); with
    ``scope="gold-passage"`` they are judged by each question's gold passage id instead
    of by answer strings (the whole corpus is still searched). Phrase
    indexes search at the grain ``unit``, over the whole index or
    (``scope="gold-passage"``) each question's own passage; at ``unit="phrase"`` they
    default to EM/F1 of the top phrase plus top@1 and top@k (``k``: 10), at a sentence,
    passage or document to ``PASSAGE_METRICS`` as every other kind.  ``k`` (hits per
    question) defaults to the largest cutoff the metrics ask for. ``errors`` collects records skipped under
    ``ErrorPolicy.SKIP``; the report counts them. Qrels that name no unit of the index
    raise an error; some missing ones are logged and counted (``n_qrels_ids_missing``).
    The report names the ``scope``, and the ``unit`` of an index with several.
    """
    from anygrain.eval.runs import check_run_path

    check_eval_unit(unit)  # the answer grain is evaluate_reader's
    set_threads(threads)
    if run_out is not None:
        # before loading anything, not after the whole evaluation: never over its inputs
        check_run_path(
            run_out,
            [
                questions.source if isinstance(questions, Questions) else questions,
                index.path if isinstance(index, Index) else index,
            ],
        )
    idx = index if isinstance(index, Index) else load_index(index, **(load_options or {}))
    errors = errors if errors is not None else ErrorLog()
    if isinstance(questions, Questions):
        qs = questions.first(limit)
    else:
        qs = read_questions(questions, errors=errors, limit=limit)
    # each kind knows its units, scopes and default metrics (IndexKind-free here)
    u = idx.check_unit(unit)
    sc = idx.check_scope(scope)
    search_options = idx.check_search_options(search_options or {}) or None
    report = idx.evaluate_questions(
        qs,
        unit=u,
        scope=sc,
        k=k,
        metrics=list(metrics) if metrics is not None else idx.default_metrics(k, u, sc),
        run_out=run_out,
        drop_empty=drop_empty,
        progress=progress,
        search_options=search_options,
    )
    return annotate_report(
        report, idx, errors=errors, unit=u, scope=sc, search_options=search_options,
        questions=qs.source, limit=limit, run_out=run_out,
    )  # fmt: skip


def evaluate_domains(root: str | Path, index: str | Path, **options: Any) -> DomainTable:
    """Multi-CPR's table: each domain of ``root`` (a subdirectory holding
    ``SPLIT.query.txt`` and its qrels; default every one with the split) scored on its own.

    ``index`` with ``{domain}`` in it names one index per domain (``idx/{domain}``, the
    paper's setting); without, one merged index whose ids are prefixed ``DOMAIN-`` (built
    from ``multicpr:ROOT``).  ``run_out``: a TREC run file (per-domain indexes:
    ``FILE.DOMAIN`` each), never over a query or qrels file.  ``limit``: the first N
    questions of each domain.  ``options``: :func:`~anygrain.eval.domains.evaluate_domain_dirs`'s
    (``split``, default dev; ``domains``; ``metrics``, default Multi-CPR's; ``drop_empty``;
    ``run_out``; ``limit``; ``progress``)."""
    from anygrain.eval.domains import evaluate_domain_dirs

    return evaluate_domain_dirs(root, index, Index.load, **options)


def evaluate_reader(
    questions: str | Path | Questions,
    reader: str | Path | None,
    index: str | Path | Index | None = None,
    *,
    k: int = 5,
    gold_passage: bool = False,
    corpus: str | Path | None = None,
    limit: int | None = None,
    bf16: bool | None = None,
    threads: int | None = None,
    progress: bool = True,
    retriever_weight: float | None = None,
    at: Sequence[int] = (),
    runtime: str | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    read_window: int | None = None,
    read_sure: float | None = None,
) -> dict[str, Any]:
    """SQuAD EM/F1 of the reader at ``reader``: end to end, reading the top ``k`` passages
    ``index`` retrieves, or (``gold_passage``) each question with its gold passage alone,
    from ``corpus`` (a corpus directory, or any source, built into a temporary store) or
    the index's corpus.  ``threads`` sets torch's and FAISS's thread count; ``runtime``
    runs the reader (and the index's question encoder, where its kind has one);
    ``on_progress(stage, done, total)`` hears of each batch of questions retrieved or read.
    The report names the reader, its runtime and precision, and the index."""
    from anygrain.reader.evaluate import evaluate_reader_at

    check_reader_counts(k, at, gold_passage)  # before anything loads
    set_threads(threads)
    qs = questions if isinstance(questions, Questions) else read_questions(questions)
    qs = qs.first(limit)
    idx = (
        index
        if isinstance(index, Index) or index is None
        else _load_for_reading(index, runtime, bf16)
    )
    return evaluate_reader_at(
        idx,
        reader,
        list(qs),
        k=k,
        gold_passage=gold_passage,
        corpus=corpus,
        bf16=bf16,
        progress=progress,
        retriever_weight=retriever_weight,
        at=at,
        runtime=runtime,
        on_progress=on_progress,
        read_window=read_window,
        read_sure=read_sure,
    )


def check_reader_counts(k: int, at: Sequence[int], gold_passage: bool = False) -> None:
    """Refuse a ``k`` (passages read) outside 1..100 and an ``at`` cutoff outside 1..k, as
    :func:`evaluate_reader` does, before anything loads."""
    from anygrain.reader.evaluate import check_counts

    check_counts(k, at, gold_passage)


def _load_for_reading(path: str | Path, runtime: str | None, bf16: bool | None = None) -> Index:
    """The index at ``path``, its question encoder on ``runtime`` where its kind has one;
    elsewhere ``runtime`` runs the reader only.  Under ``auto`` the question encoder runs
    where the reader will (torch on a CPU with native bfloat16): a process that has paid
    for torch does not load ONNX Runtime beside it for the questions."""
    if takes_load_option(path, "runtime"):
        return Index.load(path, runtime=_reading_runtime(runtime, bf16))
    return Index.load(path)


def _reading_runtime(runtime: str | None, bf16: bool | None) -> str | None:
    from anygrain.encode.runtime import Runtime, parse_runtime, torch_installed
    from anygrain.models.runtime import Role, choose_runtime

    if parse_runtime(runtime) is not Runtime.AUTO or not torch_installed():
        return runtime  # without torch, the reader's own check names what needs it
    reader = choose_runtime(runtime, None, role=Role.READER, bf16=bf16)
    return Runtime.TORCH.value if reader.runtime is Runtime.TORCH else runtime


def ask(
    index: str | Path | Index, question: str, reader: str | Path, *, k: int = 5
) -> tuple[Answer, list[Hit]]:
    """Retrieve ``k`` passages for ``question``, read them with the reader at ``reader``:
    the answer with its evidence, and the passages read."""
    from anygrain.reader import read
    from anygrain.reader.answering import load_reader_for
    from anygrain.utils.precision import native_bf16

    if k < 1:
        raise UsageError(f"k must be at least 1, got {k}")
    idx = index if isinstance(index, Index) else Index.load(index)
    model = load_reader_for(idx, reader)  # refused for a corpus of another language
    hits = idx.search_one(question, k)
    return read(model, question, hits, bf16=native_bf16()), hits


def build_index(
    source: Any,
    *,
    kind: IndexKind | str,
    out: str | Path,
    threads: int | None = None,
    executor: Executor | ExecutorKind | str | None = None,
    shards: int = 1,
    **settings: Any,
) -> Index:
    """Build an index of ``kind`` from ``source`` (``FORMAT:PATH``, a path, a corpus
    directory or store); ``settings`` are the shared build options (split, progress,
    overwrite, ...) and the kind's own (model, lang, fusion, ...: its ``settings_type``),
    and one the kind does not take raises :class:`~anygrain.errors.UsageError`.
    ``threads`` sets torch's and FAISS's thread count (default: theirs).
    ``executor`` runs the corpus encode of a dense, hybrid or phrase index (default: in
    this process; e.g. ``RayExecutor(RayConfig(workers=4))``, see docs/scale.md).
    ``shards`` > 1 builds that many indexes of ``kind`` over row ranges of the corpus,
    searched as one and merged exactly (:mod:`anygrain.composite.sharded`)."""
    set_threads(threads)
    if executor is not None:
        settings["executor"] = executor
    k = parse_enum(IndexKind, kind)
    if k is IndexKind.SHARDED:
        raise AnygrainError(
            "give the kind of the shards and their number: kind=dense, shards=4 "
            "(--kind dense --shards 4)"
        )
    if shards != 1:
        return Index.build(source, kind=IndexKind.SHARDED, of=k, shards=shards, out=out, **settings)
    return Index.build(source, kind=k, out=out, **settings)


def combine_hybrid(
    first: str | Path,
    second: str | Path,
    out: str | Path,
    *,
    threads: int | None = None,
    **options: Any,
) -> Index:
    """A hybrid index reusing an existing BM25 index and dense index over the same corpus,
    given in either order; ``options``: :meth:`HybridIndex.combine
    <anygrain.composite.hybrid.HybridIndex.combine>`'s (``fusion``, ``weight``, ``depth``,
    ``overwrite``).  ``threads`` sets torch's and FAISS's thread count."""
    from anygrain.composite.hybrid import HybridIndex

    set_threads(threads)
    return HybridIndex.combine(first, second, out, **options)


def ray_executor(
    kind: IndexKind | str,
    address: str,
    *,
    workers: int | None = None,
    retries: int | None = None,
    timeout: float | None = None,
) -> Executor:
    """The Ray executor for a build of ``kind`` (``build_index(executor=...)``):
    ``address`` is local (start one for this build), auto (join the cluster on this
    machine) or ``HOST:PORT``; None takes :class:`RayConfig`'s default.  A ``HOST:PORT``
    that accepts no connection within the timeout fails here, before the build reads
    anything.  Importable without Ray, which running it needs."""
    from anygrain.encode.ray_executor import RayConfig, RayExecutor, check_reachable

    k = parse_enum(IndexKind, kind)
    if k not in ENCODING_KINDS:
        raise AnygrainError(f"--ray encodes dense, hybrid and phrase indexes, not {k.value}")
    defaults = RayConfig()
    config = RayConfig(
        address=address,
        workers=defaults.workers if workers is None else workers,
        retries=defaults.retries if retries is None else retries,
        timeout=defaults.timeout if timeout is None else timeout,
    )
    check_reachable(config)
    return RayExecutor(config)


@dataclass
class IndexCheck:
    """What :func:`verify_index` found: the files that differ from their recorded
    checksums (none: the index also opened), out of ``n_files`` checked."""

    problems: list[Problem]
    n_files: int


def verify_index(path: str | Path) -> IndexCheck:
    """Check every file of the index at ``path`` (and of a corpus kept outside it) against
    the checksums recorded when it was built, listing damaged, missing and unexpected
    files; when none differs, open it as a search does (kind, version, corpus, models,
    tombstones) without hashing the files again, raising what the open raises."""
    m = read_manifest(Path(path))
    problems = check_index_files(path, m, extra=True)
    n = len(m["files"]) + len(m.get("corpus_files") or {})
    if not problems:
        Index.load(path, verify=Verify.SIZES)  # every checksum was just compared
    return IndexCheck(problems, n)


def refilter_index(
    index: str | Path,
    out: str | Path,
    threshold: float | None = None,
    *,
    compress: Compress | str | None = None,
    **options: Any,
) -> Index:
    """A smaller phrase index at a higher filter ``threshold`` (or keeping about the
    fraction ``keep`` of the vectors), from the stored vectors of the phrase index at
    ``index`` (no re-encoding; ``compress`` None: none); ``options``:
    :func:`anygrain.phrase.refilter.refilter`'s (``keep``, ``factory``, ``pq_m``,
    ``keep_dump``, the ``rescore`` settings, ``progress``, ``overwrite``)."""
    from anygrain.phrase.compress import Compress
    from anygrain.phrase.refilter import refilter

    return refilter(
        index, out, threshold, compress=Compress.NONE if compress is None else compress, **options
    )


def source_formats() -> list[Format]:
    """Every source format anygrain reads (documents, questions or both), by name."""
    from anygrain.corpus.formats import FORMATS, ensure_loaded

    ensure_loaded()
    return sorted(FORMATS.values(), key=lambda f: f.name)


def convert_script(source: str | Path, target: str | Path, to: Script | str) -> ConversionReport:
    """Convert a Chinese SQuAD-format file to Simplified or Traditional characters (OpenCC),
    keeping answer offsets valid."""
    from anygrain.corpus.script import convert_squad_file

    return convert_squad_file(source, target, parse_enum(Script, to))


def pack_phrase_model(
    model: str | Path,
    out: str | Path,
    *,
    bits: int = 4,
    group: int = 64,
    card: str | Path | None = None,
) -> PackedInfo | PackedReaderInfo:
    """Store the phrase model or reader at ``model`` as quantised differences from its backbone
    (``bits`` per difference, ``group`` values sharing a scale), with the Markdown model
    ``card`` beside the weights when given; what was written."""
    require_torch("packing a model (anygrain pack)")
    from anygrain.models.base import ModelType, detect_model_type
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.packed import PackedInfo, PackSettings
    from anygrain.phrase.packed import pack_phrase_model as pack

    settings = PackSettings(bits=bits, group=group)
    text = Path(card).read_text(encoding="utf-8") if card else None
    if detect_model_type(model) is ModelType.READER:
        from anygrain.reader.model import Reader
        from anygrain.reader.packed import PackedReaderInfo, pack_reader

        out_path = pack_reader(
            Reader.load(model), out, settings=settings, card=text, source=model, inputs=(card,)
        )
        return PackedReaderInfo.read(out_path)
    path = pack(
        PhraseEncoder.load(model),
        out,
        settings=settings,
        card=text,
        source=model,
        inputs=[card],
    )
    return PackedInfo.read(path)


def attach_sparse(index: str | Path, **options: Any) -> dict[str, Any]:
    """Fuse BM25 into the phrase index at ``index`` (its phrase vectors stay as they are),
    built anew or copied from the BM25 index ``bm25_from`` over the same corpus; the
    fusion saved.  ``options``: :func:`anygrain.phrase.lexical.attach_sparse`'s
    (``bm25_from``, ``weight``, ``lang``, ``progress``)."""
    from anygrain.phrase.lexical import attach_sparse as attach

    return attach(index, **options)


def training_recipes() -> list[tuple[str, Recipe]]:
    """The saved DPR training recipes (``recipes/*.json``), by name."""
    from anygrain.train.dpr.recipe import builtin_recipes, load_recipe

    return [(name, load_recipe(name)) for name in builtin_recipes()]


def recipe_config(
    recipe: str,
    variables: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
) -> DprTrainConfig:
    """The DPR training config of a saved ``recipe`` (a name or a JSON file), its
    ``${NAME}`` slots filled from ``variables`` (``NAME=VALUE`` each) and the fields in
    ``overrides`` replacing the recipe's."""
    from anygrain.train.dpr.recipe import load_recipe, parse_vars
    from anygrain.train.dpr.recipe import recipe_config as config_of

    return config_of(
        load_recipe(recipe), parse_vars(list(variables)), overrides=dict(overrides or {})
    )


def train_dpr(
    config: DprTrainConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
) -> Path:
    """Train a DPR bi-encoder; the model's directory (``config.out``)."""
    require_torch("training (anygrain train dpr)")
    from anygrain.train import dpr

    return dpr.train(config, progress=progress, resume=resume, errors=errors)


def train_phrase(
    config: PhraseTrainConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
) -> Path:
    """Train a DensePhrases model; the model's directory."""
    require_torch("training (anygrain train phrase)")
    from anygrain.train import phrase

    return phrase.train(config, progress=progress, resume=resume, errors=errors)


def train_phrase_query_side(
    config: PhraseQuerySideConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
) -> Path:
    """Fine-tune a phrase model's question encoder against a built phrase index; the
    model's directory (``load_index(index, model=...)`` searches with it)."""
    require_torch("training (anygrain train phrase-query-side)")
    from anygrain.train import phrase

    return phrase.train_query_side(config, progress=progress, resume=resume, errors=errors)


def train_reader(
    config: ReaderTrainConfig,
    *,
    retriever: str | Path | None = None,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
) -> Path:
    """Train an extractive reader (negatives drawn from the index ``retriever`` when
    given); the model's directory."""
    require_torch("training (anygrain train reader)")
    from anygrain.train import reader

    return reader.train(
        config, retriever_index=retriever, progress=progress, resume=resume, errors=errors
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
    device: str | None = None,
    runtime: str | None = None,
    **fields: Any,
) -> Index:
    """Add the documents of ``source`` (``FORMAT:PATH``, a path, or SourceDocuments) to the
    index at ``index``, encoding only the new passages; returns the index reopened.  Ids it
    holds already are refused; ``model`` must be the index's own (the default).  A folder
    (or file) adds only its new and changed files, the old version of a changed one
    deleted.  See :mod:`anygrain.index.updater` for what each kind recomputes.
    ``device``: where the new passages are encoded (auto | cpu | cuda; None: auto);
    ``runtime``: what encodes them (auto | onnx | torch; None: auto); ``fields``:
    ``text_field``, ``id_field``, ``title_field``, ``meta_fields`` of a CSV/TSV/JSONL."""
    from anygrain.corpus.fields import FieldMap
    from anygrain.index.updater import add_documents as add

    set_threads(threads)
    return add(
        index,
        source,
        split=split,
        model=model,
        errors=errors,
        progress=progress,
        device=device,
        runtime=runtime,
        fields=FieldMap.only(fields),
    )


def delete_documents(
    index: str | Path, doc_ids: Sequence[str] = (), *, files: Sequence[str] = ()
) -> dict[str, Any]:
    """Mark documents of the index at ``index`` deleted (by document id, or every document
    read from each of ``files``, as their ``source`` names them): searches stop returning
    them at once; :func:`compact_index` removes them from the files."""
    from anygrain.index.updater import delete_documents as delete

    return delete(index, doc_ids, files)


def compact_index(index: str | Path, *, progress: bool = True, threads: int | None = None) -> Index:
    """Rebuild the index at ``index`` without its deleted documents, reusing stored vectors;
    returns it reopened."""
    from anygrain.index.updater import compact_index as compact

    set_threads(threads)
    return compact(index, progress=progress)
