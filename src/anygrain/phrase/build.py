"""Building a phrase index: its settings, the model it encodes with, the dump and both MIPS indexes.

:func:`write_index` dumps the corpus and calls :func:`finish_index` (the MIPS indexes and
``index.json``), which refiltering and updates call over dumps of their own, so all write
one layout (:mod:`anygrain.phrase.index`).  A shipped model given by name is recorded by
name, any other copied into the index (:mod:`anygrain.index.model_ref`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from anygrain.corpus.source import corpus_ref
from anygrain.corpus.store import CorpusStore
from anygrain.encode.runtime import runs_on_onnx
from anygrain.errors import AnygrainError, parse_enum
from anygrain.index.manifest import write_manifest
from anygrain.index.model_ref import model_location
from anygrain.index.model_ref import model_reference as shared_model_reference
from anygrain.index.registry import IndexKind
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.phrase.budget import BuildBudget, parse_bytes
from anygrain.phrase.compress import PHRASE_POLICY, Compress, compressed_factory
from anygrain.phrase.dump import (
    END_OK,
    START_OK,
    DumpStats,
    dump_encoding,
    dump_phrases,
    resolve_int8,
)
from anygrain.phrase.filtering import dump_filter, fraction_threshold, refiltered_flags, subset_dump
from anygrain.phrase.lexical import SparseFusion, copy_sparse, write_sparse
from anygrain.phrase.record import DUMP_FILES, PhraseCounts, PhraseIndexRecord
from anygrain.phrase.rescore_settings import Rescoring
from anygrain.utils.device import resolve_device
from anygrain.utils.ranges import Range
from anygrain.vectors.factory import default_nprobe, parse_factory, plan_training
from anygrain.vectors.faiss_index import FaissIndex
from anygrain.vectors.sources import StoredVectors

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from anygrain.phrase.model import PhraseEncoder


def is_phrase_encoder(model: object) -> TypeIs[PhraseEncoder]:
    """Whether ``model`` is a loaded :class:`~anygrain.phrase.model.PhraseEncoder`, asked
    without importing torch (none exists before its module is imported): opening an index
    with the ONNX question encoder imports neither torch nor transformers."""
    mod = sys.modules.get("anygrain.phrase.model")
    return mod is not None and isinstance(model, mod.PhraseEncoder)


SUBDIR = "phrase"
#: the layout version :class:`~anygrain.phrase.index.PhraseIndex` reads
FORMAT_VERSION = 1


#: The defaults of a phrase index: the size/quality point that also serves fast
#: (docs/benchmarks.md, "What compression costs").  PQ codes with a low keep are far smaller
#: but re-encode passages for every request (the re-scoring they record), so they are asked
#: for; ``compress="none", keep=1`` is the uncompressed research index.
DEFAULT_COMPRESS = Compress.SQ8
DEFAULT_KEEP = 0.5
#: the filter threshold tau is a logit: finite, and beyond +-1000 it keeps all or nothing
THRESHOLD_RANGE = Range("phrase filter threshold", -1000.0, 1000.0)


@dataclass(frozen=True)
class PhraseSettings(IndexSettings):
    """What ``Index.build(kind="phrase")`` takes besides the shared options."""

    model: str | Path | PhraseEncoder | None = None  # default: the shipped model for ``lang``
    threshold: float | None = None  # filter tau (a logit); default: the model's recorded one
    # or instead: keep about this fraction of the start and end vectors (the tau is found
    # from the dump's own filter logits, so it follows the corpus)
    keep: float | None = None  # default: DEFAULT_KEEP, unless a threshold is given
    factory: str | None = None  # FAISS factory string (default: from size and ``compress``)
    lang: str | None = None  # en | zh: picks the default model (detected when None)
    batch_size: int | None = None  # encoder batch (windows); default: the budget's
    # passages encoded in bfloat16 autocast; None: where torch encodes them on a CPU with
    # native bfloat16 (resolve_bf16; the index records the resolved value)
    bf16: bool | None = None
    # passages on ONNX Runtime's int8 passage graph; None: as phrase.dump.resolve_int8
    # decides (utils.precision.auto_int8); the index records the resolved value
    int8: bool | None = None
    shard_size: int | None = None  # passages per dump shard; default: the budget's
    # resident memory the build may use (bytes, or "1.5G"): sets the defaults of the
    # shard and batch sizes, the FAISS training sample and blocks (anygrain.phrase.budget)
    memory_budget: str | int | None = None
    max_phrase_words: int | None = None  # default: the model's
    compress: Compress = DEFAULT_COMPRESS
    pq_m: int | None = None  # pq, opq-pq: bytes per vector (default dim/8)
    keep_dump: bool | None = None  # keep the float16 vectors (default: only uncompressed)
    # the lexical part (BM25 of each phrase's passage, fused into its score): built with
    # the index unless ``sparse`` is off; ``sparse_from`` copies an existing BM25 index
    sparse: bool = True
    sparse_from: str | None = None
    sparse_weight: float | None = None  # default: DEFAULT_SPARSE_WEIGHT
    # the model's weights in the index: None copies a directory or an in-memory model and
    # records a shipped model's name instead; True always copies, False never
    copy_model: bool | None = None
    # how each search re-scores passages exactly by default, read as one group
    # (``rescoring``: anygrain.phrase.rescore_settings; None: the PQ defaults, or none)
    rescore: int | None = None
    rescore_margin: float | None = None
    rescore_tokens: str | None = None
    rescore_context: int | None = None

    def __post_init__(self) -> None:
        if self.copy_model is False and is_phrase_encoder(self.model):
            model_reference(self.model, False)  # refused, before anything is read
        if self.lang is not None:
            from anygrain.corpus.lang import Lang

            parse_enum(Lang, self.lang)
        # a name from JSON or the command line becomes the enum (frozen: set it directly)
        object.__setattr__(self, "compress", parse_enum(Compress, self.compress))
        for name in ("batch_size", "shard_size", "max_phrase_words", "pq_m"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise AnygrainError(f"phrase index {name} must be at least 1, got {v}")
        if self.threshold is not None:
            THRESHOLD_RANGE.check(self.threshold)
        if self.int8 and self.bf16:
            raise AnygrainError("--int8 and --bf16 are two precisions of the passages: give one")
        # checked as a group; the tokens' name becomes the member's value
        object.__setattr__(self, "rescore_tokens", self.rescoring.to_options()["rescore_tokens"])
        if self.keep is not None:
            if not 0 < self.keep <= 1:
                raise AnygrainError(f"phrase index keep must be in (0, 1], got {self.keep}")
            if self.threshold is not None:
                raise AnygrainError("give one of threshold and keep, not both")
        if self.sparse_from is not None and not self.sparse:
            raise AnygrainError("sparse_from needs the lexical part on (sparse=True)")
        if self.sparse_weight is not None and not self.sparse:
            # it would be recorded and never used: a weight for a part the index lacks
            raise AnygrainError(
                "sparse_weight (--sparse-weight) needs the lexical part on: an index built "
                "with sparse=False (--no-sparse) has no BM25 part to weigh"
            )
        self.fusion()  # checks the weight
        _ = self.budget  # checks the memory budget

    @property
    def rescoring(self) -> Rescoring:
        """The re-scoring asked for (each None where not given)."""
        return Rescoring.given(
            self.rescore, self.rescore_margin, self.rescore_tokens, self.rescore_context
        )

    @property
    def budget(self) -> BuildBudget:
        """The build's memory budget (default ``DEFAULT_MEMORY_BUDGET``)."""
        if self.memory_budget is None:
            return BuildBudget()
        return BuildBudget(parse_bytes(self.memory_budget))

    @property
    def keep_fraction(self) -> float | None:
        """The fraction of vectors the filter keeps: ``keep``, or DEFAULT_KEEP when neither
        it nor a threshold is given (None: the threshold alone decides)."""
        if self.keep is not None:
            return self.keep
        return DEFAULT_KEEP if self.threshold is None else None

    def fusion(self) -> SparseFusion | None:
        """The lexical fusion these settings ask for (None: a pure dense index)."""
        if not self.sparse:
            return None
        return SparseFusion().with_weight(self.sparse_weight)


def recorded_settings(record: PhraseIndexRecord, *, lang: str | None = None) -> PhraseSettings:
    """The settings that write an index again as ``record`` (an ``index.json``'s
    ``settings``) says it was written: its threshold, factory, words per phrase, bf16,
    compression, dump and lexical part (``lang``: the language of its BM25 part)."""
    r = record
    return PhraseSettings(
        threshold=r.threshold,
        # the recorded threshold already holds the keep fraction's effect; without one the
        # index kept every vector its model's filter passed
        keep=None if r.threshold is not None else 1.0,
        factory=r.factory,
        bf16=bool(r.bf16),
        int8=bool(r.int8),
        max_phrase_words=r.max_phrase_words,
        compress=parse_enum(Compress, r.compress or Compress.NONE),
        pq_m=r.pq_m,
        keep_dump=r.dump,
        sparse=bool(r.sparse),
        sparse_weight=SparseFusion.from_dict(r.sparse).weight if r.sparse else None,
        lang=lang,
        **r.rescoring.to_options(),
    )


def resolve_bf16(bf16: bool | None, model: PhraseEncoder, options: BuildOptions) -> bool:
    """Whether a build with ``options`` encodes its passages with ``model`` in bfloat16:
    ``bf16`` when given, else (auto) where torch encodes them on a CPU with native bfloat16
    (AVX-512 BF16, AMX: :func:`~anygrain.utils.precision.native_bf16`), where it is much
    faster at the same quality (docs/benchmarks.md).  Elsewhere float32: ONNX Runtime's passage graph (``--runtime onnx``, or the shipped
    graph of a base install) computes in float32, a CPU without native bfloat16 emulates it
    several times slower, a GPU is left as it was, and Ray actors' CPUs are not this one's.
    ``bf16=True`` where the graph would encode is refused before anything is written: the
    index would record bfloat16 for float32 vectors."""
    from anygrain.encode.executor import is_remote
    from anygrain.encode.onnx_runtime import TRAIN_EXTRA, parse_runtime
    from anygrain.encode.runtime import Runtime

    on_graph = runs_on_onnx(model)  # a base install's model
    if bf16 and on_graph:
        raise AnygrainError(f"a bf16 dump encodes with torch, not installed: {TRAIN_EXTRA}")
    if bf16 and parse_runtime(options.runtime) is Runtime.ONNX:
        raise AnygrainError("--runtime onnx encodes passages in float32; bf16 needs torch")
    if bf16 is not None:
        return bool(bf16)
    if on_graph or parse_runtime(options.runtime) is Runtime.ONNX:
        return False
    if is_remote(options.executor):
        return False
    if resolve_device(options.device).type != "cpu":
        return False
    from anygrain.utils.precision import native_bf16

    return native_bf16()


def as_phrase_model(
    model: str | Path | PhraseEncoder | None,
    *,
    lang: str | None = None,
    on_graph: bool = False,
) -> PhraseEncoder:
    """A phrase model from an instance, a shipped model's name (``phrase-minilm``) or a saved
    directory; ``None`` is the shipped default for ``lang``.  An untrained encoder is refused.
    ``on_graph``: the caller encodes passages on ONNX Runtime only, so a model whose passage
    graph is shipped or cached comes on that graph (:class:`GraphPhraseModel`) even where
    torch is installed: torch is not imported nor the weights loaded for nothing."""
    from anygrain.encode.onnx_runtime import torch_installed
    from anygrain.models.shipped import default_phrase_model
    from anygrain.phrase.graph_model import GraphPhraseModel

    if is_phrase_encoder(model) or isinstance(model, GraphPhraseModel):
        return cast("PhraseEncoder", model)
    path = phrase_model_dir(default_phrase_model(lang) if model is None else model)
    if not torch_installed():
        # a base install: a shipped model on its shipped graphs (what a build asks of a model)
        return cast("PhraseEncoder", GraphPhraseModel(path))
    if on_graph:
        try:
            return cast("PhraseEncoder", GraphPhraseModel(path))
        except AnygrainError:  # no graph of these files yet: torch exports one
            pass
    from anygrain.phrase.model import PhraseEncoder

    return PhraseEncoder.load(path)


def phrase_model_dir(model: str | Path) -> Path:
    """The directory :func:`as_phrase_model` loads a phrase model given by name or
    directory from, found without loading it: an error for what holds none, so that a build
    refuses a wrong name before it reads the corpus."""
    from anygrain.models.shipped import SHIPPED, shipped_model_dir

    if str(model) in SHIPPED:
        return shipped_model_dir(str(model))
    p = Path(str(model)).expanduser()
    if not p.exists():
        raise AnygrainError(
            f"{model}: no such phrase model directory (shipped models: {', '.join(SHIPPED)})"
        )
    from anygrain.models.forms import PHRASE_CONFIG

    if not (p / PHRASE_CONFIG).exists():
        raise AnygrainError(
            f"{model}: not a phrase model; train one with `anygrain train phrase` and pass its "
            "directory as --model"
        )
    from anygrain.models.hf import check_weight_files

    check_weight_files(p)  # damaged weights fail here too, not after the corpus is read
    return p


def given_by_name(model: str | Path) -> bool:
    """Whether ``model`` names a shipped phrase model rather than a directory, decided as
    :func:`as_phrase_model` loads it (a shipped model's name first)."""
    from anygrain.models.shipped import SHIPPED

    return str(model) in SHIPPED


def model_reference(model: str | Path | PhraseEncoder, copy_model: bool | None = None) -> str:
    """What a phrase index records to find ``model`` again instead of copying it ("": copy
    it): :func:`anygrain.index.model_ref.model_reference`, a shipped model's name being a
    name."""
    return shared_model_reference(model, copy_model, by_name=given_by_name, noun="phrase model")


def build_model(
    settings: PhraseSettings, store: CorpusStore, options: BuildOptions | None = None
) -> tuple[PhraseEncoder, str | None]:
    """The model a build with ``settings`` encodes ``store`` with, loaded, and the name to
    record: the named one, or the shipped default for ``lang`` (detected from the passages).
    Where ``options`` encode on ONNX Runtime (``--runtime onnx``, or ``--int8``), the model
    comes on its passage graph when one is shipped or cached (:func:`as_phrase_model`)."""
    from anygrain.encode.onnx_runtime import parse_runtime
    from anygrain.encode.runtime import Runtime

    on_graph = not settings.bf16 and (
        bool(settings.int8)
        or (options is not None and parse_runtime(options.runtime) is Runtime.ONNX)
    )
    if settings.model is not None:
        name = str(settings.model) if isinstance(settings.model, str | Path) else None
        return as_phrase_model(settings.model, on_graph=on_graph), name
    from anygrain.corpus.lang import detect_lang
    from anygrain.models.shipped import default_phrase_model

    lang = settings.lang or detect_lang(store).value
    return as_phrase_model(None, lang=lang, on_graph=on_graph), default_phrase_model(lang)


def write_index(
    out: Path,
    store: CorpusStore,
    model: PhraseEncoder,
    settings: PhraseSettings,
    options: BuildOptions,
    *,
    work: Path,
    on_shard: Any = None,
    model_name: str | None = None,
    build: PhraseSettings | None = None,
    ref: str | None = None,
) -> PhraseIndexRecord:
    """Dump ``store`` with ``model``, build both MIPS indexes and write ``index.json`` under
    ``out``.

    ``settings`` says how (threshold, default: the model's; factory, batch and shard size,
    bf16, words per phrase, compression, the lexical part); its ``model`` is the caller's
    to resolve into ``model``.  ``options`` is how the dump runs (progress, executor,
    device, runtime: not recorded, the dump is the same).  ``work`` keeps the dump's shards,
    so an interrupted dump resumes (``on_shard(i)`` runs after shard ``i``: tests interrupt
    there).  ``model_name``: how the model was named (a shipped name or a directory),
    recorded beside its fingerprint; ``build``: the settings the index was asked for,
    recorded as ``settings.build``.  The lexical part (``settings.fusion()``) is a BM25
    index built here (language ``settings.lang``, default detected) or copied from
    ``settings.sparse_from``.

    The model is copied into ``out/phrase/model`` or, when it was given by a shipped
    model's name (as ``settings.model``, else as ``model_name``: the default's), only
    referenced: :func:`model_reference`, with ``settings.copy_model`` deciding.
    ``ref`` decides instead when given (an update keeps its index's: "" copies)."""
    # bf16 and int8 resolved (int8 asked turns bf16's auto off): the index records what ran
    bf16 = resolve_bf16(
        False if settings.int8 and settings.bf16 is None else settings.bf16, model, options
    )
    s = dataclasses.replace(settings, bf16=bf16, int8=resolve_int8(settings.int8, bf16, options))
    # what the model leaves of the memory budget (refused here when too little is left)
    budget = s.budget.for_model(model, str(model_name or model.config.base_model))
    out = Path(out)
    if ref is None:
        given = s.model if s.model is not None else model_name
        ref = model_reference(given if given is not None else model, s.copy_model)
    lexical = s.fusion()
    if lexical is not None:
        if s.sparse_from is not None:
            copy_sparse(Path(s.sparse_from), out, store)
        else:
            write_sparse(out, store, lang=s.lang, progress=options.progress)
    base = out / SUBDIR
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if ref:
        fingerprint = model.phrase_fingerprint()  # of the weights as they are now
    else:
        model.save(base / "model")  # records the fingerprint of the weights as they are now
        fingerprint = model.config.phrase_fingerprint
    threshold = s.threshold if s.threshold is not None else model.config.filter_threshold
    stats = dump_phrases(
        store,
        model,
        work,
        base,
        threshold=threshold,
        shard_size=s.shard_size or budget.shard_size(model.dim),
        batch_size=s.batch_size or budget.batch_size(resolve_device(options.device).type),
        bf16=bool(s.bf16),
        int8=bool(s.int8),
        progress=options.progress,
        on_shard=on_shard,
        executor=options.executor,
        device=options.device,
        runtime=options.runtime,
    )
    fraction = s.keep_fraction
    if fraction is not None and fraction < 1:
        threshold, stats = _keep_fraction(base, work, stats, fraction, threshold, options.progress)
    record = dump_record(model, s, threshold, fraction, build)
    from anygrain.phrase.reference import scoring_record

    # where the model is found again: its copy in the index, or the name it was given by
    model_info = model_location(
        fingerprint, model.config.base_model, ref=ref, copy=f"{SUBDIR}/model"
    )
    if model_name is not None:
        model_info["name"] = model_name
    model_info["scoring"] = scoring_record(model.config)  # checked with the fingerprint
    return finish_index(
        out,
        store,
        stats,
        s,
        record=record,
        model_info=model_info,
        progress=options.progress,
        timings={
            "dump_seconds": round(time.time() - t0, 3),
            "encoding": dump_encoding(model, bool(s.bf16), options, bool(s.int8)),
        },
        budget=budget,
    )


def dump_record(
    model: PhraseEncoder,
    settings: PhraseSettings,
    threshold: float | None,
    fraction: float | None,
    build: PhraseSettings | None,
) -> PhraseIndexRecord:
    """What a dump by ``model`` with ``settings`` at ``threshold`` records (``fraction``:
    the keep fraction asked for; ``build``: the settings the index was asked for)."""
    cfg = model.config
    lexical = settings.fusion()
    return PhraseIndexRecord(
        max_phrase_words=cfg.max_phrase_words
        if settings.max_phrase_words is None
        else int(settings.max_phrase_words),
        threshold=threshold,
        keep=fraction,
        dim=model.dim,
        include_title=cfg.include_title,
        max_passage_length=cfg.max_passage_length,
        doc_stride=cfg.doc_stride,
        bf16=bool(settings.bf16),
        int8=bool(settings.int8),
        sparse=lexical.to_dict() if lexical is not None else None,
        build=build.to_dict() if build is not None else None,
    )


def _keep_fraction(
    base: Path, work: Path, stats: DumpStats, keep: float, threshold: float | None, progress: bool
) -> tuple[float | None, DumpStats]:
    """Raise the filter threshold of the dump in ``base`` to the tau keeping about ``keep`` of
    its vectors (never lower it: tokens below ``threshold`` were never stored); the dump's
    arrays are replaced by the kept tokens'.  Returns the threshold and the new counts."""
    old_flags, logits = dump_filter(base)
    tau = fraction_threshold(old_flags, logits, keep)
    if threshold is not None and tau <= threshold:
        return threshold, stats
    flags = refiltered_flags(old_flags, logits, tau)
    del old_flags, logits
    kept_dir = work / "kept"
    shutil.rmtree(kept_dir, ignore_errors=True)
    n_kept, n_start, n_end = subset_dump(base, kept_dir, flags, stats.n_passages, progress=progress)
    for f in sorted(kept_dir.iterdir()):
        os.replace(f, base / f.name)
    kept_dir.rmdir()
    return tau, dataclasses.replace(stats, n_kept=n_kept, n_start=n_start, n_end=n_end)


def finish_index(
    out: Path,
    store: CorpusStore,
    stats: DumpStats,
    settings: PhraseSettings,
    *,
    record: PhraseIndexRecord,
    model_info: dict[str, Any],
    progress: bool,
    timings: dict[str, Any],
    budget: BuildBudget | None = None,
) -> PhraseIndexRecord:
    """Build both MIPS indexes over the token arrays in ``out/phrase`` and write ``index.json``.

    Shared by a fresh build (after the dump), :func:`anygrain.phrase.refilter.refilter`
    (after subsetting an existing dump) and the updates, so all write the same layout and
    manifest.  Of ``settings``, the FAISS ones count here: ``compress`` picks the factory
    when ``factory`` is not given; span scoring reads the float16 dump only when the index
    is uncompressed and the dump is kept (``keep_dump``, default: kept for ``none``),
    otherwise the vectors decoded from the FAISS codes.  ``record`` is what the dump made
    (its ``threshold`` and ``dim`` are read here), completed with the FAISS part and
    written as ``index.json``'s ``settings``; it is returned.
    """
    comp = settings.compress
    keep_dump = (comp is Compress.NONE) if settings.keep_dump is None else bool(settings.keep_dump)
    base = out / SUBDIR
    t0 = time.time()
    start_ids, end_ids = _side_ids(base, record.threshold)
    assert record.dim is not None
    dim = int(record.dim)
    # Both sides use one factory, checked for each before building: chosen for the larger
    # side, or, compressed, for the smaller (its training points bound the PQ bits).
    spec = (
        settings.factory
        or compressed_factory(comp, min(len(start_ids), len(end_ids)), dim, pq_m=settings.pq_m)
        or PHRASE_POLICY.factory(max(len(start_ids), len(end_ids)), dim)
    )
    budget = budget or settings.budget  # a build's: what its model leaves of the budget
    blocks = _build_sides(base, spec, dim, start_ids, end_ids, budget, progress)
    if not keep_dump:
        for name in DUMP_FILES:
            (base / name).unlink(missing_ok=True)
    nlist = parse_factory(spec).nlist
    record = dataclasses.replace(
        record,
        factory=spec,
        # as both build paths set it (FaissIndex.build, build_blocks): reopening the index
        # only to read it back would map its codes
        nprobe=default_nprobe(nlist) if nlist else None,
        # FAISS blocks beside start.faiss/end.faiss (a build larger than its memory budget)
        faiss_blocks=blocks if any(blocks.values()) else None,
        compress=comp.value,
        pq_m=settings.pq_m,
        dump=keep_dump,
        # where span scoring reads vectors: the float16 dump, or the FAISS codes decoded
        span_vectors="dump" if keep_dump and comp is Compress.NONE else "codes",
        rescoring=settings.rescoring.recorded(
            record.rescoring, pq=comp in (Compress.PQ, Compress.OPQ_PQ)
        ),
    )
    write_manifest(
        out,
        IndexKind.PHRASE,
        FORMAT_VERSION,
        corpus={
            "path": corpus_ref(out, store),
            "checksum": store.checksum,
            "n_passages": len(store),
        },
        model=model_info,
        settings=record.to_manifest(),
        counts=PhraseCounts.of_dump(stats).to_manifest(base),
        timings={
            **timings,
            "faiss_seconds": round(time.time() - t0, 3),
            "shards_resumed": stats.shards_done_before,
        },
    )
    return record


def _side_ids(base: Path, threshold: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The token indices of the start- and end-capable tokens of the dump in ``base``,
    saved there as each side's FAISS id -> token map."""
    flags = np.load(base / "tokens.npy", mmap_mode="r")[:, 3]
    start_ids = np.flatnonzero(flags & START_OK).astype(np.int64)
    end_ids = np.flatnonzero(flags & END_OK).astype(np.int64)
    if not len(start_ids) or not len(end_ids):
        raise AnygrainError(
            f"no phrase vectors passed the filter (threshold {threshold}); lower --threshold"
        )
    np.save(base / "start_ids.npy", start_ids)
    np.save(base / "end_ids.npy", end_ids)
    return start_ids, end_ids


def _build_sides(
    base: Path,
    spec: str,
    dim: int,
    start_ids: np.ndarray,
    end_ids: np.ndarray,
    budget: BuildBudget,
    progress: bool,
) -> dict[str, int]:
    """Build ``start.faiss`` and ``end.faiss`` with factory ``spec`` over the dump's vectors,
    one side in memory at a time; returns the blocks each side was written in (0: whole)."""
    train_size = budget.train_vectors(dim)
    for n_side in (len(start_ids), len(end_ids)):
        plan_training(n_side, dim, spec, min(train_size, n_side))
    blocks: dict[str, int] = {}
    for side, ids in (("start", start_ids), ("end", end_ids)):
        vectors = StoredVectors(np.load(base / f"{side}.npy", mmap_mode="r"), ids)
        n_train = min(train_size, len(ids))
        if parse_factory(spec).nlist:  # codes in blocks of bounded size, freed one by one
            blocks[side] = FaissIndex.build_blocks(
                vectors,
                base / f"{side}.faiss",
                spec,
                block_bytes=budget.faiss_block_bytes,
                train_size=n_train,
                add_batch=budget.add_vectors(dim),
                progress=progress,
            )
        else:
            fx = FaissIndex.build(
                vectors,
                spec,
                train_size=n_train,
                add_batch=budget.add_vectors(dim),
                progress=progress,
            )
            fx.save(base / f"{side}.faiss")
            del fx  # one side's index in memory at a time
        del vectors
    return blocks
