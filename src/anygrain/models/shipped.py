"""Models that ship inside the anygrain package, so they work on a fresh install, offline.

Each is a small packed model (:mod:`anygrain.phrase.packed`) over a backbone that an
offline alias provides; its directory holds a ``MODEL_CARD.md`` saying how it was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
