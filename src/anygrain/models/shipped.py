"""Models that ship inside the anygrain package, so they work on a fresh install, offline.

Each is a small packed model (:mod:`anygrain.phrase.packed`) over a backbone that an
offline alias provides; its directory holds a ``MODEL_CARD.md`` saying how it was made, and
under ``graphs/`` the ONNX graphs its runtime uses, without their weights
(:mod:`anygrain.encode.shipped_graphs`; :func:`shipped_graph_record` rebuilds one with NumPy,
so the base install runs the model without torch; ``python -m anygrain.tools.ship_graphs``
regenerates them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.errors import ModelNotFoundError

DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class ShippedModel:
    name: str
    lang: str
    description: str

    @property
    def path(self) -> Path:
        return DATA_DIR / self.name


SHIPPED: dict[str, ShippedModel] = {
    m.name: m
    for m in (
        ShippedModel(
            "phrase-minilm",
            "en",
            "English DensePhrases model over all-MiniLM-L6-v2, trained on SQuAD-Shifts "
            "(4-bit packed differences from the backbone)",
        ),
        ShippedModel(
            "phrase-me5-zh",
            "zh",
            "Chinese (and cross-lingual) DensePhrases model over multilingual-e5-small, trained "
            "on SQuAD v1.1 train, then CMRC 2018 trial and DRCD dev "
            "(4-bit packed differences from the backbone)",
        ),
        ShippedModel(
            "reader-minilm",
            "en",
            "English extractive reader over all-MiniLM-L6-v2, trained on SQuAD v1.1 train "
            "(4-bit packed differences from the backbone)",
        ),
        ShippedModel(
            "reader-me5-zh",
            "zh",
            "Chinese (and cross-lingual) extractive reader over multilingual-e5-small, trained "
            "on SQuAD v1.1 train, then CMRC 2018 trial and DRCD dev (4-bit packed differences "
            "from the backbone)",
        ),
    )
}

#: The reader that reads retrieved passages when none is named, by corpus language.
DEFAULT_READER = {"en": "reader-minilm", "zh": "reader-me5-zh"}

#: The phrase model a phrase index uses when none is named, by corpus language.
DEFAULT_PHRASE_MODEL = {"en": "phrase-minilm", "zh": "phrase-me5-zh"}


def shipped_model_dir(name: str) -> Path:
    """The directory of a shipped model; an error if it is missing from this install."""
    m = SHIPPED[name]
    if not m.path.is_dir():
        raise ModelNotFoundError(
            f"the shipped model {name} is missing from this install ({m.path}); reinstall anygrain"
        )
    return m.path


def saved_model_dir(dir_or_name: str | Path) -> Path:
    """A saved model's directory: ``dir_or_name`` itself, or the shipped model so named."""
    p = Path(str(dir_or_name)).expanduser()
    if not p.exists() and str(dir_or_name) in SHIPPED:
        return shipped_model_dir(str(dir_or_name))
    return p


def default_phrase_model(lang: str | None) -> str:
    """The shipped phrase model for ``lang`` (English when unknown), or an error saying how
    to get one."""
    name = DEFAULT_PHRASE_MODEL.get(lang or "en")
    if name is None:
        raise ModelNotFoundError(
            f"no phrase model ships for language {lang!r}: train one with "
            "`anygrain train phrase --model me5-small ...` and pass it as --model"
        )
    return name


def default_reader(lang: str | None) -> str:
    """The shipped reader for ``lang`` (English when unknown), or an error saying how to
    get one."""
    name = DEFAULT_READER.get(lang or "en")
    if name is None or not SHIPPED[name].path.is_dir():
        raise ModelNotFoundError(
            f"no reader ships for language {lang!r}: train one with `anygrain train reader` "
            "and pass it as --reader"
        )
    return name


def reader_ships(lang: str | None) -> bool:
    """Whether this install has a shipped reader for ``lang``."""
    name = DEFAULT_READER.get(lang or "en")
    return name is not None and SHIPPED[name].path.is_dir()


# --- graphs shipped without weights (anygrain.encode.shipped_graphs) ---------------------

#: where a model directory keeps its stripped graphs, one directory per graph kind
GRAPHS_DIR = "graphs"
# files of a model directory its weights do not depend on (the card is edited freely)
_NOT_WEIGHTS = ("MODEL_CARD.md", "confidence.json")  # the calibration: fitted after


def graph_sources(model_dir: Path, backbone_dir: Path) -> dict[str, Path]:
    """The files a packed model's weights, and so its graphs, are made of: its own (but the
    card and the graphs) and its backbone's weights and tokenizer, by a name for each."""
    from anygrain.models.packed_state import BACKBONE_WEIGHTS

    files = {
        f"model/{f.name}": f
        for f in sorted(Path(model_dir).iterdir())
        if f.is_file() and f.name not in _NOT_WEIGHTS
    }
    files[f"backbone/{BACKBONE_WEIGHTS}"] = backbone_dir / BACKBONE_WEIGHTS
    if (backbone_dir / "tokenizer.json").is_file():
        files["backbone/tokenizer.json"] = backbone_dir / "tokenizer.json"
    return files


def shipped_graph_record(
    model_dir: Path, kind: str, cache: Any, signature: str, *, files_kind: str | None = None
) -> dict[str, Any] | None:
    """The files record (``cache.files_record``) of the graph of ``kind`` that the packed
    model at ``model_dir`` ships without weights, made with NumPy into ``cache`` (a
    :class:`~anygrain.encode.onnx_runtime.GraphCache`) and recorded under ``signature``
    (the model's files signature; ``files_kind``: the kind the caller looks it up by, see
    :meth:`~anygrain.encode.onnx_runtime.GraphCache.files_record`) when it was not; None when the model ships no such graph,
    or ships one made from other files than those installed (a warning says which: the
    caller then exports one, which needs torch)."""
    from anygrain.encode.shipped_graphs import (
        MANIFEST,
        check_sources,
        materialise,
        read_manifest,
    )
    from anygrain.models.packed_state import PackedState, packed_config

    shipped = Path(model_dir) / GRAPHS_DIR / kind
    if not (shipped / MANIFEST).is_file() or packed_config(Path(model_dir)) is None:
        return None
    state = PackedState.open(model_dir)
    why = check_sources(shipped, graph_sources(Path(model_dir), state.backbone_dir))
    if why is not None:
        import warnings

        warnings.warn(f"{shipped}: not used, {why}", stacklevel=2)
        return None
    entry = materialise(shipped, state, cache, backbone_dir=state.backbone_dir)
    extra = read_manifest(shipped).get("record", {})
    cache.remember_files(signature, entry.name, kind=files_kind, **extra)
    record: dict[str, Any] | None = cache.files_record(signature, files_kind)
    return record
