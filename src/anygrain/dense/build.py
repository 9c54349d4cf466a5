"""Building a dense index: its settings (:class:`DenseSettings`), the bi-encoder a build
loads (a name found without loading it first, :func:`find_model`), what it records to find
the model again (:func:`model_reference`), and the write itself (:func:`write_dense_index`:
the model or its reference, the passage vectors in shards, the FAISS index, ``dense.json``
and ``index.json``).  Opening is :mod:`anygrain.dense.opening`, the index
:mod:`anygrain.dense.index`."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.lang import Lang, detect_lang
from anygrain.corpus.source import corpus_ref
from anygrain.corpus.store import CorpusStore
from anygrain.dense.onnx import is_biencoder
from anygrain.dense.shards import DTYPES, encode_corpus
from anygrain.encode.runtime import Runtime, require_torch
from anygrain.errors import AnygrainError, parse_enum
from anygrain.index.manifest import write_manifest
from anygrain.index.model_ref import model_location
from anygrain.index.model_ref import model_reference as shared_model_reference
from anygrain.index.registry import IndexKind
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.models.forms import BIENCODER_CONFIG as MODEL_CONFIG
from anygrain.models.resolve import ALIASES, default_model, resolve_model
from anygrain.models.shipped import SHIPPED, shipped_model_dir
from anygrain.utils.atomic import atomic_write_text
from anygrain.vectors.factory import plan_training
from anygrain.vectors.faiss_index import FaissIndex

if TYPE_CHECKING:
    from anygrain.dense.onnx import OnnxBiEncoder
    from anygrain.models.biencoder import BiEncoder

# torch is imported where a model is loaded, never at the top: a dense index whose graphs
# are cached opens and searches on ONNX Runtime without it (anygrain.dense.onnx)

FORMAT_VERSION = 1
SETTINGS_FILE = "dense.json"


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
        FORMAT_VERSION,
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
    passage side on ONNX Runtime (:func:`anygrain.models.runtime.choose_runtime` decides for
    passages; both write the same float32 vectors, to ~1e-6).  A graph that cannot be made
    falls back to torch with a warning, unless ``runtime`` is ``onnx``."""
    from anygrain.dense.onnx import onnx_biencoder
    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.models.runtime import Role, choose_runtime

    choice = choose_runtime(runtime, device, role=Role.PASSAGES, bf16=bf16, executor=executor)
    if not choice.onnx:
        return model
    try:
        return onnx_biencoder(model, GraphCache.default(), passage_fingerprint=fingerprint)
    except (AnygrainError, ImportError, OSError, RuntimeError, ValueError) as e:
        if choice.strict:
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
