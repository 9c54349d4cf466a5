"""Opening a phrase index's parts: the model it was built with, and its arrays.

The model is the copy the index carries (``model.path`` in ``index.json``), the model it
refers to by name (``model.ref``: a shipped model such as ``phrase-minilm``, loaded by that
name), or one given at open time; each is checked against the phrase fingerprint the
vectors were made with (a different phrase encoder would put questions and phrases in
different spaces, so other weights behind a name are refused).  Its questions run on torch
or, as a graph exported once per version of its weights, on ONNX Runtime
(:mod:`anygrain.phrase.onnx`); a model whose files are unchanged since its graph was
exported is not loaded at all.

The arrays are the token table (``phrase/tokens.npy``, ``passage_ptr.npy``), both FAISS
indexes and their id maps, and the span vectors: the float16 dump, or the vectors decoded
from the FAISS codes of a compressed index (:class:`~anygrain.phrase.compress.DecodedVectors`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.encode.onnx_runtime import GraphCache, files_bytes
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, IndexMismatchError, ModelNotFoundError
from anygrain.index.model_ref import check_named_model
from anygrain.phrase.build import SUBDIR, as_phrase_model, given_by_name, is_phrase_encoder
from anygrain.phrase.compress import DecodedVectors
from anygrain.phrase.record import DUMP_FILES, PhraseIndexRecord
from anygrain.phrase.search import PhraseTable
from anygrain.utils.device import place
from anygrain.vectors.faiss_index import FaissIndex

if TYPE_CHECKING:
    from anygrain.phrase.model import PhraseEncoder


def referenced_model(path: Path, record: dict[str, Any]) -> PhraseEncoder:
    """The phrase model an index at ``path`` refers to by name (``record``: the ``model`` of
    its ``index.json``), loaded as the build loaded it (and checked against the fingerprint
    saved beside its weights); its phrase fingerprint is the caller's to check against the
    index's."""
    ref = record.get("ref")
    if not ref:
        raise AnygrainError(
            f"{path}: its index.json records neither a copy of the phrase model ('path') nor "
            "a model to load ('ref'); rebuild the index"
        )
    fix = (
        "Pass that model's directory with --model DIR (Index.load(path, model=DIR)), or "
        "rebuild the index with --copy-model to carry the model in it."
    )
    what = (
        f"{path}: the index refers to the phrase model {ref!r} (fingerprint "
        f"{record.get('fingerprint')}) instead of holding a copy"
    )
    if not given_by_name(ref) and not Path(ref).expanduser().exists():
        raise ModelNotFoundError(
            f"{what}, and no shipped model has that name nor is it a directory here. {fix}"
        )
    try:
        return as_phrase_model(ref)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"{what}, and it cannot be loaded here: {e} {fix}") from None


def model_dir_of(
    path: Path, manifest: dict[str, Any], model: str | Path | PhraseEncoder | None
) -> Path | None:
    """The directory the phrase model of the index at ``path`` is loaded from (``model``
    given by name or directory, else the copy in the index or the model it refers to), found
    without loading it; None when there is none to find."""
    from anygrain.models.shipped import shipped_model_dir

    if is_phrase_encoder(model):
        return None
    record = manifest.get("model") or {}
    if model is None and record.get("path"):
        return path / record["path"]
    name = model if model is not None else record.get("ref")
    if not name:
        return None
    if given_by_name(name):
        return shipped_model_dir(str(name))
    p = Path(str(name)).expanduser()
    return p if p.is_dir() else None


def open_model(
    path: Path,
    manifest: dict[str, Any],
    model: str | Path | PhraseEncoder | None,
    device: str | None,
) -> PhraseEncoder:
    """The index's phrase model loaded, checked against the fingerprint the index records
    and the scoring it was built with, and placed on ``device`` (without torch: a shipped
    model on its graphs, :func:`graph_model_of`)."""
    from anygrain.encode.runtime import torch_installed

    if not torch_installed():  # a base install: a shipped model on its shipped graphs
        return graph_model_of(path, manifest, model, onnx=False)[0]  # type: ignore[no-any-return]
    from anygrain.phrase.model import PhraseEncoder

    record = manifest.get("model") or {}
    want = record.get("fingerprint")
    if model is not None:
        enc = as_phrase_model(model)
        got = enc.phrase_fingerprint()
    elif record.get("path"):
        # re-hashing the weights (a fraction of a second) catches a model swapped or
        # damaged inside the index directory, which the recorded fingerprint alone cannot
        enc = PhraseEncoder.load(path / record["path"])
        got = enc.config.phrase_fingerprint
    else:
        # a name loads whatever is installed now: its weights are re-hashed against the
        # fingerprint saved beside them on load, and that one must be the index's
        enc = referenced_model(path, record)
        got = enc.config.phrase_fingerprint or enc.phrase_fingerprint()
        check_named_model(path, record, got, noun="phrase model", has="phrase fingerprint")
    if got != want:
        raise IndexMismatchError(
            f"{path}: the model's phrase encoder (fingerprint {got}) is not the one this index "
            f"was built with ({want}); its questions would not match the stored phrase vectors. "
            "Use the index's own model or rebuild the index with this one."
        )
    check_model_scoring(path, manifest, model, enc.config)
    place(enc, device)
    return enc


def open_questions(
    path: Path,
    manifest: dict[str, Any],
    model: str | Path | PhraseEncoder | None,
    device: str | None,
    runtime: Runtime | str | None,
) -> tuple[PhraseEncoder | Callable[[], PhraseEncoder], Any]:
    """``(model, question encoder)`` of the phrase index at ``path``, the runtime decided
    once (:func:`~anygrain.models.runtime.choose_runtime`): on torch, the model loaded and
    checked (:func:`open_model`) encodes its questions; on ONNX Runtime, its question graph
    (:func:`~anygrain.models.graphs.graph_or_export`: found by the model's files, shipped,
    exported by a child for a large model, or exported here once the model is loaded), the
    model then a loader called on first use when it was not loaded."""
    from anygrain.encode.runtime import torch_installed
    from anygrain.models.graphs import Exported, GraphSource, graph_or_export
    from anygrain.models.runtime import Role, choose_runtime

    choice = choose_runtime(runtime, device, role=Role.QUESTIONS)

    def load() -> PhraseEncoder:
        return open_model(path, manifest, model, device)

    if not choice.onnx:
        loaded = load()
        return loaded, loaded
    if not torch_installed():  # a base install: the shipped graph, or what says it needs torch
        questions = cached_question_encoder(path, manifest, model)
        if questions is not None:
            return load, questions
        return graph_model_of(path, manifest, model, onnx=True)  # type: ignore[no-any-return]
    from anygrain.phrase.onnx import KIND, export_questions, model_files

    cache = GraphCache.default()
    src = model_dir_of(path, manifest, model)
    want = str((manifest.get("model") or {}).get("fingerprint") or "")

    def export(enc: PhraseEncoder) -> Exported[Any]:
        from anygrain.phrase.onnx import OnnxQuestionEncoder

        entry = export_questions(enc, cache)
        record = {"phrase_fingerprint": want, "config": enc.config.to_dict()}
        return Exported(entry.name, OnnxQuestionEncoder(entry), record)

    opened = graph_or_export(
        GraphSource(model_files(src), KIND, shipped=src) if src is not None else None,
        cache,
        use=lambda record: checked_questions(path, manifest, model, record, cache),
        load=load,
        export=export,
        elsewhere=lambda: exported_in_child(src) if src is not None else False,
        strict=choice.strict,
        refused=(
            f"{path}: cannot run the phrase model's question encoder on ONNX Runtime; "
            "search with --runtime torch"
        ),
        warned="question encoder not exported to ONNX; encoding questions with torch",
    )
    enc: PhraseEncoder | Callable[[], PhraseEncoder] = (
        opened.model if opened.model is not None else load
    )
    return enc, opened.runner if opened.runner is not None else opened.model


def graph_model_of(
    path: Path, manifest: dict[str, Any], model: str | Path | PhraseEncoder | None, *, onnx: bool
) -> tuple[Any, Any]:
    """:func:`open_model` without torch: ``(GraphPhraseModel, question encoder)`` of a
    shipped model (its graphs rebuilt with NumPy), checked against the index as a loaded
    model is; an error naming ``anygrain[train]`` for any other model."""
    from anygrain.encode.onnx_runtime import TRAIN_EXTRA
    from anygrain.phrase.graph_model import GraphPhraseModel

    src = model_dir_of(path, manifest, model)
    if src is None:
        raise AnygrainError(
            f"{path}: opening its phrase model needs torch and transformers, not installed: "
            f"{TRAIN_EXTRA}"
        )
    enc = GraphPhraseModel(src)
    record = manifest.get("model") or {}
    if enc.phrase_fingerprint() != record.get("fingerprint"):
        raise IndexMismatchError(
            f"{path}: the phrase model {src} has phrase fingerprint {enc.phrase_fingerprint()}, "
            f"not the {record.get('fingerprint')} this index was built with; rebuild the index "
            "or pass the model it was built with (--model)"
        )
    check_model_scoring(path, manifest, model, enc.config)
    questions = cached_question_encoder(path, manifest, model) if onnx else enc
    if questions is None:
        raise AnygrainError(
            f"{src}: its question graph is neither shipped nor cached, and exporting it needs "
            f"torch and transformers, not installed: {TRAIN_EXTRA}"
        )
    return enc, questions


def cached_question_encoder(
    path: Path, manifest: dict[str, Any], model: str | Path | PhraseEncoder | None
) -> Any:
    """The question encoder on ONNX Runtime when the model's files are unchanged since
    its graph was exported (or its graph ships), the phrase fingerprint they had then
    checked against the index's, as loading would; else None: the model must be loaded."""
    from anygrain.models.graphs import GraphSource
    from anygrain.phrase.onnx import KIND, model_files

    src = model_dir_of(path, manifest, model)
    if src is None:
        return None
    cache = GraphCache.default()
    source = GraphSource(model_files(src), KIND, shipped=src)
    record = source.record(cache, source.signature())
    return None if record is None else checked_questions(path, manifest, model, record, cache)


def checked_questions(
    path: Path,
    manifest: dict[str, Any],
    model: str | Path | PhraseEncoder | None,
    record: dict[str, Any],
    cache: GraphCache,
) -> Any:
    """The question encoder of the files ``record`` (the graph cache's), when the phrase
    fingerprint it recorded is the index's and its config scores as the index was built
    (an error saying why when not); None when the fingerprint differs or is not recorded:
    loading the model says why, as without a graph."""
    from types import SimpleNamespace

    from anygrain.phrase.onnx import OnnxQuestionEncoder

    got = record.get("phrase_fingerprint")
    if not got or got != (manifest.get("model") or {}).get("fingerprint"):
        return None
    config = record.get("config")
    check_model_scoring(
        path, manifest, model, SimpleNamespace(**(config if isinstance(config, dict) else {}))
    )
    return OnnxQuestionEncoder(cache.entry(record["key"]))


def check_model_scoring(
    path: Path, manifest: dict[str, Any], model: str | Path | PhraseEncoder | None, config: Any
) -> None:
    """Refuse a phrase model whose scoring settings (``config``) differ from those the
    index at ``path`` recorded (:func:`~anygrain.phrase.reference.check_scoring`), calling
    it what it was given as, else by the name the index records."""
    from anygrain.phrase.reference import check_scoring

    record = manifest.get("model") or {}
    label = str(model) if isinstance(model, str | Path) else record.get("name", "given")
    check_scoring(path, manifest, config, label)


# A child costs a Python start and torch's import: it pays for a model as large as
# me5-small (its export's peak is several times its weights), not for minilm.
CHILD_EXPORT_BYTES = 200 * 2**20


def exported_in_child(src: Path) -> bool:
    """Whether a child process exported the question graph of the saved model at ``src``
    (:func:`~anygrain.phrase.onnx.export_in_child`: the memory of loading the model and
    exporting goes back to the system) and recorded its files; False when that is not worth
    it (model files under :data:`CHILD_EXPORT_BYTES`: the model is loaded here) or the child
    failed."""
    from anygrain.phrase.onnx import export_in_child, model_files
    from anygrain.utils.threads import requested_threads

    if files_bytes(model_files(src)) < CHILD_EXPORT_BYTES:
        return False
    return export_in_child(src, GraphCache.default(), threads=requested_threads())


@dataclass(frozen=True)
class PhraseArrays:
    """A phrase index's arrays, opened and checked against each other and the corpus."""

    table: PhraseTable
    start_index: FaissIndex
    end_index: FaissIndex
    start_ids: np.ndarray
    end_ids: np.ndarray


def open_arrays(
    path: Path, record: PhraseIndexRecord, store: CorpusStore, *, mmap: bool
) -> PhraseArrays:
    """The arrays of the phrase index at ``path`` (``record``: its settings) over ``store``;
    with ``mmap`` the FAISS codes and the float16 dump stay on disk, memory-mapped."""
    base = path / SUBDIR
    decoded = record.codes
    for name in (
        *(() if decoded else DUMP_FILES),
        "tokens.npy",
        "passage_ptr.npy",
        "start.faiss",
        "end.faiss",
        "start_ids.npy",
        "end_ids.npy",
    ):
        if not (base / name).exists():
            raise AnygrainError(f"{path}: incomplete phrase index (missing {SUBDIR}/{name})")
    mode: Literal["r"] | None = "r" if mmap else None
    tokens = load_array(base / "tokens.npy", None)
    ptr = load_array(base / "passage_ptr.npy", None)
    n = len(tokens)
    factory = record.factory or ""
    fs = FaissIndex.load(
        base / "start.faiss", factory=factory, mmap=mmap, blocks=record.blocks("start")
    )
    fe = FaissIndex.load(
        base / "end.faiss", factory=factory, mmap=mmap, blocks=record.blocks("end")
    )
    start_ids = load_array(base / "start_ids.npy", None)
    end_ids = load_array(base / "end_ids.npy", None)
    if fs.ntotal != len(start_ids) or fe.ntotal != len(end_ids):
        raise IndexMismatchError(f"{path}: FAISS indexes do not match the stored tokens")
    start: Any
    end: Any
    if decoded:
        if (len(start_ids) and int(start_ids.max()) >= n) or (
            len(end_ids) and int(end_ids.max()) >= n
        ):
            raise IndexMismatchError(f"{path}: FAISS ids point past the stored tokens")
        start, end = DecodedVectors(fs, start_ids, n), DecodedVectors(fe, end_ids, n)
    else:
        start = load_array(base / "start.npy", mode)
        end = load_array(base / "end.npy", mode)
    if (
        tokens.ndim != 2
        or tokens.shape[1] < 6
        or len(start) != n
        or len(end) != n
        or len(ptr) == 0
        or int(ptr[-1]) != n
    ):
        raise AnygrainError(
            f"{path}: phrase arrays disagree (tokens {tokens.shape}, start {start.shape}, "
            f"end {end.shape}, passage_ptr ending at {int(ptr[-1]) if len(ptr) else None}); "
            "rebuild the index"
        )
    table = PhraseTable(start, end, tokens, ptr)
    if len(table.passage_ptr) != len(store) + 1:
        raise IndexMismatchError(
            f"{path}: phrase dump covers {len(table.passage_ptr) - 1} passages, "
            f"the corpus has {len(store)}; rebuild the index"
        )
    return PhraseArrays(table, fs, fe, start_ids, end_ids)


def load_array(path: Path, mode: Literal["r"] | None) -> np.ndarray:
    """``np.load`` with an error naming the file when it is truncated or not an array."""
    try:
        return np.load(path, mmap_mode=mode)  # type: ignore[no-any-return]
    except (ValueError, OSError, EOFError) as e:
        raise AnygrainError(f"{path}: unreadable ({e}); rebuild the index") from None
