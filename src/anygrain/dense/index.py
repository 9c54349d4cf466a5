"""Dense passage index: a bi-encoder's passage vectors in FAISS, searched with its question encoder.

Layout (``subdir`` is ``dense`` unless a hybrid index nests it elsewhere)::

    index.json              manifest: corpus checksum, model fingerprint, factory, dim, timings
    corpus/                 the passage store (unless an existing store was reused)
    dense/dense.json        the dense settings, so a hybrid index can open this part alone
    dense/model/            the bi-encoder (BiEncoder.save), when the index carries a copy
    dense/vectors/          passage vectors in .npy shards (exact scores for reranking)
    dense/faiss.index       the FAISS index, memory-mapped on open

The index records the passage encoder's weight fingerprint: a question encoder
fine-tuned on its own (passage side frozen) can be passed at open time, while a
model whose passage side differs is refused, since its questions would live in a
different vector space from the stored passages.

A model given by name (an alias such as ``minilm``, a shipped model, a hub name) is not
copied: the index records the name (``model.ref`` in ``dense.json``) and the fingerprint,
and opening resolves the name again and hashes the weights it finds, refusing other
weights behind the same name.  A model given as a directory or an instance is copied
into ``dense/model/`` (``model.path``); ``DenseSettings.copy_model`` overrides the rule.

Questions, and passages of builds and ``add``, are encoded by the model or by its graphs on
ONNX Runtime (``runtime``: auto, onnx, torch; :mod:`anygrain.dense.onnx`), the same vectors
either way, so the runtime is recorded nowhere.  A model whose files are unchanged since its
graphs were exported is not loaded to search (the torch model loads on first use of
:attr:`DenseIndex.model`); its recorded fingerprint then stands for hashing the weights.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.lang import Lang, detect_lang
from anygrain.corpus.source import corpus_ref, open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.dense.onnx import BIENCODER_CONFIG as MODEL_CONFIG
from anygrain.dense.onnx import is_biencoder
from anygrain.dense.shards import DTYPES, ShardSet, encode_corpus
from anygrain.encode.onnx_runtime import require_torch, wants_onnx
from anygrain.encode.runtime import Runtime, runs_on_onnx
from anygrain.errors import (
    AnygrainError,
    IndexMismatchError,
    ModelNotFoundError,
    parse_enum,
)
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.base import Index
from anygrain.index.encoded import EncodedQueries
from anygrain.index.manifest import write_manifest
from anygrain.index.model_ref import model_location
from anygrain.index.model_ref import model_reference as shared_model_reference
from anygrain.index.registry import IndexKind, register_index
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.models.resolve import ALIASES, default_model, resolve_model
from anygrain.models.shipped import SHIPPED, shipped_model_dir
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.device import place
from anygrain.vectors.factory import plan_training
from anygrain.vectors.faiss_index import FaissIndex

if TYPE_CHECKING:
    from anygrain.dense.onnx import OnnxBiEncoder
    from anygrain.models.biencoder import BiEncoder

# torch is imported where a model is loaded, never at the top: a dense index whose graphs
# are cached opens and searches on ONNX Runtime without it (anygrain.dense.onnx)

SETTINGS_FILE = "dense.json"
#: questions encoded at once by ``search`` (and hybrid search): measured on a 2-core CPU,
#: one thread, minilm, 512 SQuAD questions: 16: 238, 32: 243, 64: 232, 128: 199,
#: 256: 152 questions/s (longer batches pad every question to the longest)
QUESTION_BATCH = 32


def as_biencoder(model: str | Path | BiEncoder) -> BiEncoder:
    """A BiEncoder from an instance, an anygrain model dir, a shipped model's name, or an
    alias / hub name / HF dir."""
    # no dense model ships an ONNX graph: loading one (to encode, or to export its graph)
    # is torch's, refused in one line where it is missing
    if isinstance(model, str | Path):
        require_torch(f"loading the dense model {model}")
    from anygrain.models.biencoder import BiEncoder

    if isinstance(model, BiEncoder):
        return model
    if str(model) in SHIPPED and not Path(str(model)).expanduser().exists():
        return BiEncoder.load(str(model))  # refuses a shipped model of another type
    return BiEncoder.from_pretrained(model)


def given_by_name(model: str | Path) -> bool:
    """Whether ``model`` names a model (an alias, a shipped model, a hub name) rather than
    a local directory, decided as :func:`as_biencoder` loads it: an anygrain model
    directory first, then an alias, then any existing path."""
    p = Path(str(model)).expanduser()
    if (p / MODEL_CONFIG).exists():
        return False
    return str(model) in ALIASES or not p.exists()


def model_reference(model: str | Path | BiEncoder, copy_model: bool | None = None) -> str:
    """What a dense index records to find ``model`` again instead of copying it ("": copy
    it): :func:`anygrain.index.model_ref.model_reference`, a name being what
    :func:`given_by_name` says is one (an alias, a shipped model, a hub name)."""
    return shared_model_reference(model, copy_model, by_name=given_by_name)


def find_model(model: str | Path | BiEncoder | None) -> None:
    """Refuse a model :func:`as_biencoder` would not find, without loading its weights, so
    that a build refuses a wrong name before it reads the corpus (None: the default), and
    any model where torch is missing (a build loads its model with torch)."""
    require_torch("building a dense index (no dense model ships an ONNX graph)")
    if model is None or is_biencoder(model):
        return
    p = Path(str(model)).expanduser()
    if (p / MODEL_CONFIG).exists():
        from anygrain.models.hf import check_weight_files

        check_weight_files(p)  # damaged weights fail here too, not after the corpus is read
        return
    if str(model) in SHIPPED and not p.exists():
        shipped_model_dir(str(model))
    else:
        resolve_model(model)  # an alias, a hub name (fetched once) or a plain directory


def encoder_name(
    model: str | Path | BiEncoder | None, store: CorpusStore, lang: str | None = None
) -> str:
    """The name to record for ``model``; without one, the default encoder for the corpus
    language (``lang``, or detected from the passages)."""
    if model is None:
        return default_model(Lang(lang) if lang else detect_lang(store))
    return "" if is_biencoder(model) else str(model)


@dataclass(frozen=True)
class DenseSettings(IndexSettings):
    """What ``Index.build(kind="dense")`` takes besides the shared options."""

    model: str | Path | BiEncoder | None = None  # default: the corpus language's encoder
    factory: str | None = None  # FAISS factory string (default: chosen from corpus size)
    lang: str | None = None  # en | zh: picks the default model (detected when None)
    dtype: str = "float32"  # of the stored passage vectors
    batch_size: int = 64
    bf16: bool = False
    shard_size: int = 50_000
    # the model's weights in the index: None copies a directory or an in-memory model and
    # records a name (alias, shipped, hub) instead; True always copies, False never
    copy_model: bool | None = None

    def __post_init__(self) -> None:
        if self.copy_model is False and is_biencoder(self.model):
            model_reference(self.model, False)  # refused, before anything is read
        if self.lang is not None:
            parse_enum(Lang, self.lang)
        if self.dtype not in DTYPES:
            raise AnygrainError(
                f"unknown vector dtype {self.dtype!r}: use one of {', '.join(DTYPES)}"
            )
        if self.batch_size < 1 or self.shard_size < 1:
            raise AnygrainError(
                "batch_size and shard_size must be at least 1, got "
                f"{self.batch_size}, {self.shard_size}"
            )


def build_model(settings: DenseSettings, store: CorpusStore) -> tuple[BiEncoder, str]:
    """The model a build with ``settings`` encodes ``store`` with, loaded, and the name to
    record: the named one, or the default encoder for the corpus language."""
    name = encoder_name(settings.model, store, settings.lang)
    return as_biencoder(settings.model if settings.model is not None else name), name


def write_dense_index(
    out: Path,
    store: CorpusStore,
    model: str | Path | BiEncoder,
    settings: DenseSettings,
    options: BuildOptions,
    *,
    subdir: str = "dense",
    vectors_dir: Path | None = None,
    model_name: str = "",
    build: DenseSettings | None = None,
) -> dict[str, Any]:
    """Write ``model``, the vectors of ``store`` and their FAISS index under ``out/subdir``,
    and ``out/index.json``; returns the dense settings recorded there.

    ``settings`` says how (factory, dtype, batch and shard size, bf16; its ``model`` and
    ``lang`` are the caller's to resolve into ``model``), ``options`` where and how the
    encode runs (progress, executor, device: not recorded, every executor and device
    writes the same vectors).  ``vectors_dir`` is where shards are encoded before being
    moved under ``out``: point it outside a temporary build directory to make the encoding
    resumable.  ``model_name`` is recorded as the model's name (default: ``model`` when it
    is a name); ``build`` (the settings the index was asked for) as ``settings.build``.

    The model is copied into ``out/subdir/model`` or, when it was given by name (as
    ``settings.model``, else as ``model``), only referenced: :func:`model_reference`,
    with ``settings.copy_model`` deciding.
    """
    s = settings
    out = Path(out)
    if not model_name and not is_biencoder(model):
        model_name = str(model)
    given = s.model if s.model is not None else (model_name or model)
    ref = model_reference(given, s.copy_model)
    enc = as_biencoder(model)
    base = out / subdir
    base.mkdir(parents=True, exist_ok=True)
    plan_training(len(store), enc.dim, s.factory)  # fail now, not after encoding
    t0 = time.time()
    fingerprint = enc.passage_fingerprint()
    if not ref:
        enc.save(base / "model")
    t_model = time.time()
    fx, t_encode = _encode_and_index(
        store, enc, base, s, options, vectors_dir, model_name, fingerprint
    )
    timings = {
        "save_model_seconds": round(t_model - t0, 3),
        "encode_seconds": round(t_encode - t_model, 3),
        "faiss_seconds": round(time.time() - t_encode, 3),
    }
    recorded = {
        "subdir": subdir,
        "model": {
            # where the model is found again: its copy in the index, or the name it was given by
            **({"ref": ref} if ref else {"path": "model"}),
            "name": model_name or enc.config.base_model,
            "base_model": enc.config.base_model,
            "fingerprint": fingerprint,
            "passage": enc.config.passage.to_dict(),
            "question": enc.config.question.to_dict(),
        },
        "factory": fx.factory,
        "dim": fx.dim,
        "dtype": s.dtype,
        "n_vectors": fx.ntotal,
        "nprobe": fx.nprobe,
        "ef_search": fx.ef_search,
        "bf16": s.bf16,
        "timings": timings,
    }
    atomic_write_text(base / SETTINGS_FILE, json.dumps(recorded, indent=2))
    write_manifest(
        out,
        IndexKind.DENSE,
        DenseIndex.format_version,
        corpus={
            "path": corpus_ref(out, store),
            "checksum": store.checksum,
            "n_passages": len(store),
        },
        model=model_location(
            fingerprint, enc.config.base_model, ref=ref, copy=str(Path(subdir) / "model")
        ),
        settings={"dense": recorded} | ({"build": build.to_dict()} if build is not None else {}),
    )
    return recorded


def _encode_and_index(
    store: CorpusStore,
    enc: BiEncoder,
    base: Path,
    s: DenseSettings,
    options: BuildOptions,
    vectors_dir: Path | None,
    label: str,
    fingerprint: str,
) -> tuple[FaissIndex, float]:
    """Encode ``store`` into ``base/vectors`` (by way of ``vectors_dir`` when given: on the
    runtime :func:`passage_encoder` picks) and write its FAISS index ``base/faiss.index``;
    returns the index and when encoding ended."""
    target = base / "vectors"
    shards = encode_corpus(
        store,
        passage_encoder(
            enc,
            options.runtime,
            options.device,
            bf16=s.bf16,
            executor=options.executor,
            fingerprint=fingerprint,
        ),
        vectors_dir or target,
        shard_size=s.shard_size,
        dtype=s.dtype,
        batch_size=s.batch_size,
        progress=options.progress,
        bf16=s.bf16,
        label=label,
        executor=options.executor,
        device=options.device,
    )
    t_encode = time.time()
    fx = FaissIndex.build(shards, s.factory, progress=options.progress)
    fx.save(base / "faiss.index")
    if vectors_dir is not None and Path(vectors_dir).resolve() != target.resolve():
        # Moved only once FAISS is built, so a failure there keeps the encoded vectors.
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(vectors_dir), str(target))  # a rename on the same filesystem
    return fx, t_encode


def passage_encoder(
    model: BiEncoder,
    runtime: Runtime | str | None,
    device: str | None,
    *,
    bf16: bool = False,
    executor: Any = None,
    fingerprint: str = "",
) -> BiEncoder | OnnxBiEncoder:
    """What encodes passages for a build or ``add`` with ``model``: the model itself, or its
    passage side on ONNX Runtime (:func:`anygrain.dense.onnx.passage_runtime` decides; both
    write the same float32 vectors, to ~1e-6).  A graph that cannot be made falls back to
    torch with a warning, unless ``runtime`` is ``onnx``."""
    from anygrain.dense.onnx import onnx_biencoder, passage_runtime
    from anygrain.encode.onnx_runtime import GraphCache

    if passage_runtime(runtime, device, bf16=bf16, executor=executor) is Runtime.TORCH:
        return model
    try:
        return onnx_biencoder(model, GraphCache.default(), passage_fingerprint=fingerprint)
    except (AnygrainError, ImportError, OSError, RuntimeError, ValueError) as e:
        if parse_enum(Runtime, runtime or "auto") is Runtime.ONNX:
            raise AnygrainError(
                f"cannot run the passage encoder on ONNX Runtime ({type(e).__name__}: {e}); "
                "use --runtime torch"
            ) from e
        warnings.warn(
            f"passage encoder not exported to ONNX ({type(e).__name__}: {e}); encoding "
            "passages with torch",
            stacklevel=2,
        )
        return model


def referenced_model(path: Path, record: dict[str, Any]) -> BiEncoder:
    """The model a dense index at ``path`` refers to by name (``record``: the ``model`` of
    its ``dense.json``), loaded as the build loaded it, with the question and passage
    settings recorded there; its fingerprint is the caller's to check."""
    ref = record.get("ref")
    if not ref:
        raise AnygrainError(
            f"{path}: its dense settings record neither a copy of the model ('path') nor a "
            "model to load ('ref'); rebuild the index"
        )
    try:
        enc = as_biencoder(ref)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(
            f"{path}: the index refers to the model {ref!r} (fingerprint "
            f"{record['fingerprint']}) instead of holding a copy, and it cannot be loaded "
            f"here: {e} Pass that model's directory with --model DIR (Index.load(path, "
            "model=DIR)), or rebuild the index with --copy-model to carry the model in it."
        ) from None
    # the alias's defaults may have changed since: the recorded settings are the index's
    apply_sides(enc, recorded_sides(path, "", record, own_sides(enc), None))
    return enc


#: what of a side's encoding changes its vectors' scale or contents besides the weights
#: (the fingerprint): part of the model reference an index records, checked with it
SCORING_FIELDS = ("pooling", "normalize", "prefix")
SIDES = ("question", "passage")


def states_its_settings(model: str | Path | BiEncoder) -> bool:
    """Whether ``model`` carries its own encoding settings (an instance, an anygrain model
    directory, a shipped model) rather than an alias's or the defaults of a plain Hugging
    Face directory, which say nothing about how an index used the weights."""
    if is_biencoder(model):
        return True
    p = Path(str(model)).expanduser()
    return (p / MODEL_CONFIG).exists() or (str(model) in SHIPPED and not p.exists())


def own_sides(enc: BiEncoder) -> dict[str, dict[str, Any]]:
    """Each side's settings as ``enc`` states them (:meth:`EncoderConfig.to_dict`)."""
    return {side: getattr(enc.config, side).to_dict() for side in SIDES}


def recorded_sides(
    path: Path,
    subdir: str,
    record: Mapping[str, Any],
    own: Mapping[str, Mapping[str, Any]],
    given: str | Path | BiEncoder | None,
) -> dict[str, dict[str, Any]]:
    """The settings each side encodes with for the index at ``path`` (``record``: the
    ``model`` of its dense settings) when its model states ``own`` and was ``given`` (None:
    the name the index refers to): the recorded ones, except that a model stating its own
    (:func:`states_its_settings`) keeps them and is refused when pooling, normalisation or
    a prefix differ, since its scores would be on another scale.  Plain settings (dicts),
    so that an index whose graphs are cached opens without torch."""
    out = {side: dict(own[side]) for side in SIDES}
    for side in SIDES:
        if side not in record:  # an index from before the settings were recorded
            continue
        want, have = dict(record[side]), out[side]
        if have == want:
            continue
        if given is not None and states_its_settings(given):
            label = given.config.base_model if is_biencoder(given) else given  # type: ignore[union-attr]
            for name in SCORING_FIELDS:
                a, b = have.get(name), want.get(name)
                if a != b:
                    raise IndexMismatchError(
                        f"{path}: the model {label} encodes "
                        f"{side}s with {name}={a!r}, but this index was built with "
                        f"{name}={b!r} ({subdir}/{SETTINGS_FILE}, field model.{side}.{name}): "
                        "its scores would be on another scale. Pass the model the index was "
                        "built with (or its plain weights directory, which takes the index's "
                        "settings), or rebuild the index with this model."
                    )
            continue  # only lengths differ: the model's own are kept
        out[side] = want
    return out


def apply_sides(enc: BiEncoder, sides: Mapping[str, Mapping[str, Any]]) -> None:
    """Make ``enc`` encode each side with ``sides`` (:func:`recorded_sides`)."""
    from anygrain.models.encoder_config import EncoderConfig

    for side in SIDES:
        cfg = EncoderConfig.from_dict(dict(sides[side]))
        if getattr(enc.config, side) != cfg:
            setattr(enc.config, side, cfg)
            getattr(enc, side).config = cfg


def match_recorded_sides(
    path: Path, subdir: str, record: dict[str, Any], enc: BiEncoder, given: str | Path | BiEncoder
) -> None:
    """Make ``enc`` (loaded from ``given``) encode as the index at ``path`` recorded
    (``record``: the ``model`` of its dense settings): :func:`recorded_sides`."""
    apply_sides(enc, recorded_sides(path, subdir, record, own_sides(enc), given))


def model_source(
    base: Path, record: Mapping[str, Any], model: str | Path | BiEncoder | None
) -> Path | None:
    """The directory the model of the dense index under ``base`` is loaded from (``model``
    given by name or directory, else the copy in the index or the name it refers to), found
    without loading it; None when there is none (a model object, a name not here)."""
    if is_biencoder(model):
        return None
    if model is None and record.get("path"):
        return base / str(record["path"])
    name = model if model is not None else record.get("ref")
    if not name:
        return None
    p = Path(str(name)).expanduser()
    try:
        if (p / MODEL_CONFIG).exists():
            return p
        if str(name) in SHIPPED and not p.exists():
            return shipped_model_dir(str(name))
        if str(name) in ALIASES or p.is_dir():
            return resolve_model(name)[0]
    except (AnygrainError, OSError):
        return None  # loading the model says why
    return None  # a hub name: found by loading it


def open_model(
    path: Path,
    subdir: str,
    settings: dict[str, Any],
    model: str | Path | BiEncoder | None,
    device: str | None,
    *,
    onnx: bool,
    strict: bool = False,
) -> tuple[BiEncoder, BiEncoder | OnnxBiEncoder]:
    """``(model, question encoder)``: the index's bi-encoder loaded and checked against the
    passage fingerprint and settings the index records (``settings``: its dense settings),
    and what encodes its questions (the model, or with ``onnx`` its graphs, exported once
    per version of its weights; a graph that cannot be made falls back to torch with a
    warning, unless ``strict``)."""
    base = path / subdir
    record = settings["model"]
    want = record["fingerprint"]
    src = model_source(base, record, model) if onnx else None
    files = dense_files_key(src) if src is not None else None  # before loading: what is checked
    if model is not None:
        enc = as_biencoder(model)
        got = enc.passage_fingerprint()
    elif record.get("path"):
        from anygrain.models.biencoder import BiEncoder

        enc = BiEncoder.load(base / record["path"])
        # Recorded by save(); hashing the weights again would cost a second per open
        # (Index.load checked the copy's files against the index's checksums).
        got = enc.config.passage_fingerprint
    else:
        # a name resolves to whatever is installed or downloaded now: hashed every time
        enc = referenced_model(path, record)
        got = enc.passage_fingerprint()
        if got != want:
            raise IndexMismatchError(
                f"{path}: the model {record['ref']!r} now has a passage encoder with "
                f"fingerprint {got}, not the {want} this index was built with (base "
                f"{record['base_model']!r}); another model behind the same name is never "
                "used in its place. Pass the model the index was built with (--model DIR, "
                "or Index.load(path, model=DIR)), or rebuild the index."
            )
    if got != want:
        raise IndexMismatchError(
            f"{path}: the model's passage encoder (fingerprint {got}) is not the one this index "
            f"was built with ({want}, base {record['base_model']!r}); its questions would "
            "not match the stored passage vectors. Use the index's own model, a model fine-tuned "
            "on the question side only, or rebuild the index with this model."
        )
    own = own_sides(enc)  # before the index's settings: what the files record keeps
    if model is not None:
        match_recorded_sides(path, subdir, record, enc, model)
    if enc.dim != settings["dim"]:
        raise IndexMismatchError(
            f"{path}: model vectors have {enc.dim} dimensions, the index {settings['dim']}"
        )
    place(enc, device)
    if not onnx:
        return enc, enc
    from anygrain.dense.onnx import onnx_biencoder
    from anygrain.encode.onnx_runtime import GraphCache

    try:
        questions = onnx_biencoder(
            enc, GraphCache.default(), files=files, passage_fingerprint=got, own_sides=own
        )
    except (AnygrainError, ImportError, OSError, RuntimeError, ValueError) as e:
        if strict:
            raise AnygrainError(
                f"{path}: cannot run the dense question encoder on ONNX Runtime "
                f"({type(e).__name__}: {e}); search with --runtime torch"
            ) from e
        warnings.warn(
            f"question encoder not exported to ONNX ({type(e).__name__}: {e}); "
            "encoding questions with torch",
            stacklevel=2,
        )
        return enc, enc
    return enc, questions


def dense_files_key(src: Path) -> str:
    """The files-table key of a bi-encoder loaded from ``src`` (its files as they are now,
    :func:`~anygrain.encode.onnx_runtime.files_signature`, apart from other kinds' records
    of the same files)."""
    from anygrain.dense.onnx import KIND
    from anygrain.encode.onnx_runtime import digest, files_signature

    return f"{KIND}-{digest(files_signature([src]))}"


def cached_questions(
    path: Path,
    subdir: str,
    settings: dict[str, Any],
    model: str | Path | BiEncoder | None,
) -> OnnxBiEncoder | None:
    """The bi-encoder on ONNX Runtime when its files are unchanged since its graphs were
    exported (the passage fingerprint they had then checked against the index's, and the
    settings the index applies), else None: the model must be loaded (which says why)."""
    from anygrain.dense.onnx import cached_biencoder, cached_model
    from anygrain.encode.onnx_runtime import GraphCache

    record = settings["model"]
    src = model_source(path / subdir, record, model)
    if src is None:
        return None
    cache = GraphCache.default()
    found = cached_model(dense_files_key(src), cache)
    if found is None or found.passage_fingerprint != record["fingerprint"]:
        return None
    if found.dim != settings["dim"]:
        return None
    if model is None and record.get("path"):
        sides = found.sides  # the index's own copy: its settings are the index's
    else:
        sides = recorded_sides(path, subdir, record, found.sides, model)
    return cached_biencoder(found, sides, cache)


@register_index(IndexKind.DENSE)
class DenseIndex(Index):
    """Dense passage retrieval; ``search`` returns passage hits scored by inner product."""

    takes_query_model = True
    load_options = frozenset({"model", "device", "store", "mmap", "runtime"})
    settings_type = DenseSettings
    update_module = "anygrain.dense.update"

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        model: BiEncoder | Callable[[], BiEncoder],
        faiss_index: FaissIndex,
        settings: dict[str, Any],
        subdir: str = "dense",
        *,
        questions: BiEncoder | OnnxBiEncoder | None = None,
    ) -> None:
        """``model``: the bi-encoder, or what loads it on first use (questions on ONNX
        Runtime need it only to encode passages with torch); ``questions``: what encodes
        questions (default: the model)."""
        super().__init__(path, manifest)
        self.store = store
        self._model: BiEncoder | None = None
        self._load_model: Callable[[], BiEncoder] | None = None
        if is_biencoder(model):  # a module is callable too: asked first
            self._model = model  # type: ignore[assignment]
        else:
            self._load_model = model  # type: ignore[assignment]
        self.questions: BiEncoder | OnnxBiEncoder = questions or self.model
        self.faiss = faiss_index
        self.settings = settings
        self.subdir = subdir
        self._vectors: ShardSet | None = None

    @property
    def model(self) -> BiEncoder:
        """The bi-encoder (torch), loaded on first use when questions run on ONNX Runtime."""
        if self._model is None:
            assert self._load_model is not None
            self._model = self._load_model()
        return self._model

    @model.setter
    def model(self, value: BiEncoder) -> None:
        self._model = value
        self.questions = value

    @property
    def runtime(self) -> Runtime:
        """What encodes this index's questions now."""
        return Runtime.ONNX if runs_on_onnx(self.questions) else Runtime.TORCH

    def passage_encoder(
        self, *, runtime: Runtime | str | None = None, device: str | None = None
    ) -> BiEncoder | OnnxBiEncoder:
        """What encodes new passages (``add``): the questions' runner when it is ONNX
        Runtime's and passages run there too (:func:`anygrain.dense.onnx.passage_runtime`,
        with the index's recorded ``bf16``), else the torch model (exported as needed)."""
        from anygrain.dense.onnx import passage_runtime

        bf16 = bool(self.settings.get("bf16", False))
        onnx = passage_runtime(runtime, device, bf16=bf16) is Runtime.ONNX
        if onnx and self.runtime is Runtime.ONNX:
            return self.questions
        fp = str(self.settings["model"]["fingerprint"])
        return passage_encoder(self.model, runtime, device, bf16=bf16, fingerprint=fp)

    @property
    def corpus(self) -> CorpusStore:
        return self.store

    @property
    def dim(self) -> int:
        return self.faiss.dim

    @property
    def vectors(self) -> ShardSet:
        """The stored passage vectors (memory-mapped; opened on first use)."""
        if self._vectors is None:
            self._vectors = ShardSet.open(self.path / self.subdir / "vectors")
        return self._vectors

    # --- building ------------------------------------------------------------------------
    #: an interrupted build's encoded shards wait in ``.OUT.vectors.partial`` to be resumed
    scratch_name = "vectors"

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        assert isinstance(settings, DenseSettings)
        find_model(settings.model)  # a wrong name fails before the corpus is read

    @classmethod
    def write(
        cls,
        out: Path,
        corpus: CorpusStore,
        settings: IndexSettings,
        options: BuildOptions,
        work: Path,
    ) -> None:
        """Encode ``corpus`` (resumably: shards wait in ``work``) and write the dense index.

        Without ``model`` the encoder is the default for the corpus language (``lang``, or
        detected): ``minilm`` for English, the multilingual ``me5-small`` for Chinese.
        """
        assert isinstance(settings, DenseSettings)
        model, name = build_model(settings, corpus)
        write_dense_index(
            out,
            corpus,
            model,
            settings,
            options,
            model_name=name,
            vectors_dir=work,
            build=settings,
        )

    # --- opening -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path,
        manifest: dict[str, Any],
        *,
        store: CorpusStore | None = None,
        model: str | Path | BiEncoder | None = None,
        subdir: str = "dense",
        mmap: bool = True,
        device: str | None = None,
        runtime: Runtime | str | None = None,
        **options: Any,
    ) -> DenseIndex:
        """Open the index; ``model`` replaces the saved encoder (e.g. a fine-tuned question
        side) or the one the index refers to by name; ``device`` is where questions are
        encoded (None: auto); ``runtime`` what encodes them (``auto``, ``onnx``, ``torch``:
        :mod:`anygrain.dense.onnx`).  On ONNX Runtime, a model whose files are unchanged
        since its graphs were exported is not loaded at all (no torch)."""
        path = Path(path)
        base = path / subdir
        f = base / SETTINGS_FILE
        if not f.exists():
            raise AnygrainError(
                f"{path}: no dense index under '{subdir}/' (missing {SETTINGS_FILE})"
            )
        settings = json.loads(f.read_text(encoding="utf-8"))
        store = store or open_corpus_of(path, manifest)
        use_onnx = wants_onnx(runtime, device)
        questions: BiEncoder | OnnxBiEncoder | None = (
            cached_questions(path, subdir, settings, model) if use_onnx else None
        )

        def load() -> BiEncoder:
            return open_model(path, subdir, settings, model, device, onnx=False)[0]

        enc: BiEncoder | Callable[[], BiEncoder] = load
        if questions is None:
            strict = parse_enum(Runtime, runtime or "auto") is Runtime.ONNX
            enc, questions = open_model(
                path, subdir, settings, model, device, onnx=use_onnx, strict=strict
            )
        fx = FaissIndex.load(base / "faiss.index", factory=settings["factory"], mmap=mmap)
        if fx.ntotal != len(store):
            raise IndexMismatchError(
                f"{path}: FAISS index holds {fx.ntotal} vectors but the corpus {len(store)} passages; rebuild the index"
            )
        return cls(path, manifest, store, enc, fx, settings, subdir, questions=questions)

    # --- search --------------------------------------------------------------------------
    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int = QUESTION_BATCH
    ) -> np.ndarray:
        """Question vectors (float32, input order; from the model, or its ONNX graph)."""
        return self.questions.encode_questions(list(queries), batch_size=batch_size)

    def encode(self, queries: Sequence[str], *, batch_size: int = QUESTION_BATCH) -> EncodedQueries:
        """The question encoder's stage of :meth:`search`: one vector per query."""
        return EncodedQueries(list(queries), (self.encode_queries(queries, batch_size=batch_size),))

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        batch_size: int = QUESTION_BATCH,
        **options: Any,
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows(
            queries, k, nprobe=nprobe, ef_search=ef_search, batch_size=batch_size
        )
        return hits_from_rows(self.store, rows, scores)

    def search_encoded(
        self,
        encoded: EncodedQueries,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        **options: Any,
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows_encoded(encoded, k, nprobe=nprobe, ef_search=ef_search)
        return hits_from_rows(self.store, rows, scores)

    def search_rows_encoded(
        self,
        encoded: EncodedQueries,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        **options: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_encoded`'s ``(rows, scores)`` before hits are made of them (what a
        filtered search reads: :mod:`anygrain.index.filters`)."""
        (qvecs,) = encoded.vectors
        return self.search_vectors(qvecs, k, nprobe=nprobe, ef_search=ef_search)

    def search_rows(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        batch_size: int = QUESTION_BATCH,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw ``(rows, scores)`` of shape (n_queries, k); rows are -1 where fewer than ``k`` exist.

        Questions are encoded and searched ``batch_size`` at a time, so memory stays
        bounded for large question sets.
        """
        n = len(queries)
        rows = np.full((n, k), -1, dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float32)
        for i in range(0, n, batch_size):
            q = self.encode_queries(queries[i : i + batch_size], batch_size=batch_size)
            r, s = self.search_vectors(q, k, nprobe=nprobe, ef_search=ef_search)
            rows[i : i + len(q)], scores[i : i + len(q)] = r, s
        return rows, scores

    def search_vectors(
        self,
        qvecs: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search with ready-made question vectors: ``(rows, scores)``, best first."""
        return self.faiss.search(qvecs, k, nprobe=nprobe, ef_search=ef_search)

    def score_rows(self, qvecs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Exact inner products of each question with its candidate ``rows`` (n, m) from the stored
        vectors, whatever the FAISS compression; 0 where a row is -1 (as BM25's ``score_rows``)."""
        q = np.asarray(qvecs, dtype=np.float32)
        r = np.asarray(rows, dtype=np.int64)
        valid = r >= 0
        out = np.zeros(r.shape, dtype=np.float32)
        if valid.any():
            vecs = self.vectors.rows(r[valid])
            qi = np.nonzero(valid)[0]
            out[valid] = np.einsum("ij,ij->i", q[qi], vecs)
        return out

    def summary(self) -> dict[str, Any]:
        d = super().summary()
        model = self.settings["model"]  # the name the encoder was given (an alias, a hub name)
        d["model"] = {
            "name": model.get("name") or model["base_model"],
            "base_model": model["base_model"],
            "fingerprint": model["fingerprint"],
        }
        return d

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "faiss": {
                "ntotal": self.faiss.ntotal,
                "nprobe": self.faiss.nprobe,
                "ef_search": self.faiss.ef_search,
            },
            "faiss_index_bytes": os.path.getsize(self.path / self.subdir / "faiss.index"),
        }
