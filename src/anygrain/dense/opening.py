"""Opening a dense index's model: the copy the index carries (``model.path`` in
``dense.json``), the model it refers to by name (``model.ref``), or one given at open time,
checked against the passage fingerprint the vectors were made with and the settings each
side encodes with (a model stating other pooling, normalisation or prefix is refused: its
scores would be on another scale).  Its questions run on torch or, as graphs exported once
per version of its weights, on ONNX Runtime (:mod:`anygrain.dense.onnx`); a model whose
files are unchanged since its graphs were exported is not loaded at all
(:func:`open_questions`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.dense.build import MODEL_CONFIG, SETTINGS_FILE, as_biencoder
from anygrain.dense.onnx import is_biencoder
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, IndexMismatchError, ModelNotFoundError
from anygrain.index.model_ref import check_named_model
from anygrain.models.resolve import ALIASES, resolve_model
from anygrain.models.shipped import SHIPPED, shipped_model_dir
from anygrain.utils.device import place

if TYPE_CHECKING:
    from anygrain.dense.onnx import OnnxBiEncoder
    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.models.biencoder import BiEncoder


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
) -> tuple[BiEncoder, dict[str, dict[str, Any]]]:
    """``(model, its own settings)``: the index's bi-encoder loaded and checked against the
    passage fingerprint and settings the index records (``settings``: its dense settings),
    encoding as the index does, on ``device``; and each side's settings as the model stated
    them before the index's were applied (what a graph's files record keeps)."""
    base = path / subdir
    record = settings["model"]
    want = record["fingerprint"]
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
        check_named_model(path, record, got, noun="model", has="a passage encoder with fingerprint")
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
    return enc, own


def open_questions(
    path: Path,
    subdir: str,
    settings: dict[str, Any],
    model: str | Path | BiEncoder | None,
    device: str | None,
    runtime: Runtime | str | None,
) -> tuple[BiEncoder | Callable[[], BiEncoder], BiEncoder | OnnxBiEncoder]:
    """``(model, question encoder)`` of the dense index at ``path``, the runtime decided
    once (:func:`~anygrain.models.runtime.choose_runtime`): on torch, the model loaded and
    checked (:func:`open_model`); on ONNX Runtime, its graphs
    (:func:`~anygrain.models.graphs.graph_or_export`: found by the model's files, the
    fingerprint and settings they recorded checked against the index's, or exported once the
    model is loaded), the model then a loader called on first use when it was not loaded."""
    from anygrain.dense.onnx import KIND, export_onnx
    from anygrain.encode.onnx_runtime import GraphCache
    from anygrain.models.graphs import Exported, GraphSource, graph_or_export
    from anygrain.models.runtime import Role, choose_runtime

    choice = choose_runtime(runtime, device, role=Role.QUESTIONS)

    def load() -> BiEncoder:
        return open_model(path, subdir, settings, model, device)[0]

    if not choice.onnx:
        enc = load()
        return enc, enc
    record = settings["model"]
    src = model_source(path / subdir, record, model)
    cache = GraphCache.default()
    own: dict[str, dict[str, Any]] = {}

    def load_own() -> BiEncoder:
        enc, sides = open_model(path, subdir, settings, model, device)
        own.update(sides)
        return enc

    def export(enc: BiEncoder) -> Exported[OnnxBiEncoder]:
        return export_onnx(enc, cache, passage_fingerprint=record["fingerprint"], own_sides=own)

    opened = graph_or_export(
        GraphSource([src], KIND, namespaced=True) if src is not None else None,
        cache,
        use=lambda found: cached_questions(path, subdir, settings, model, found, cache),
        load=load_own,
        export=export,
        strict=choice.strict,
        refused=(
            f"{path}: cannot run the dense question encoder on ONNX Runtime; "
            "search with --runtime torch"
        ),
        warned="question encoder not exported to ONNX; encoding questions with torch",
    )
    if opened.runner is None:
        assert opened.model is not None
        return opened.model, opened.model
    return (opened.model if opened.model is not None else load), opened.runner


def cached_questions(
    path: Path,
    subdir: str,
    settings: dict[str, Any],
    model: str | Path | BiEncoder | None,
    found: dict[str, Any],
    cache: GraphCache,
) -> OnnxBiEncoder | None:
    """The bi-encoder on ONNX Runtime from what its files recorded (``found``, the graph
    cache's files table), when the passage fingerprint is the index's, its dimension too,
    and the graph of each side, with the settings the index applies, is cached; else None:
    the model must be loaded (which says why)."""
    from anygrain.dense.onnx import cached_biencoder, cached_model

    record = settings["model"]
    cached = cached_model(found)
    if cached is None or cached.passage_fingerprint != record["fingerprint"]:
        return None
    if cached.dim != settings["dim"]:
        return None
    if model is None and record.get("path"):
        sides = cached.sides  # the index's own copy: its settings are the index's
    else:
        sides = recorded_sides(path, subdir, record, cached.sides, model)
    return cached_biencoder(cached, sides, cache)
