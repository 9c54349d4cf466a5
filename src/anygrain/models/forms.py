"""The saved forms of every model type and the config file that marks each: plain names,
importable without torch or transformers, so that finding, checking or reading a saved
model's settings (a search on ONNX Runtime, ``anygrain verify``) never imports a model's
runtime.  The model base (:mod:`anygrain.models.base`) and each model's module import their
names from here, never the reverse (``tests/test_layering.py`` checks that this module,
and every config module, imports neither torch nor transformers)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "BIENCODER_CONFIG",
    "MODEL_CONFIG_FILES",
    "MODEL_FORMS",
    "PACKED_FILE",
    "PACKED_PHRASE_CONFIG",
    "PACKED_READER_CONFIG",
    "PHRASE_CONFIG",
    "READER_CONFIG",
    "ModelForm",
    "ModelType",
    "config_file",
]


class ModelType(str, enum.Enum):
    """What a saved model directory holds.  Detection tries the members in this order: a
    packed phrase model's directory holds a phrase config too, so it comes first."""

    PACKED_PHRASE = "packed-phrase"
    PHRASE = "phrase"
    BIENCODER = "biencoder"
    PACKED_READER = "packed-reader"  # before READER: its directory holds a reader config too
    READER = "reader"


@dataclass(frozen=True)
class ModelForm:
    """Where a type is defined and the config file that marks its saved directories."""

    module: str  # imported on first use; it registers the type
    config_file: str


PACKED_PHRASE_CONFIG = "anygrain_packed.json"
PHRASE_CONFIG = "anygrain_phrase.json"
BIENCODER_CONFIG = "anygrain_model.json"
PACKED_READER_CONFIG = "anygrain_packed_reader.json"
READER_CONFIG = "anygrain_reader.json"
#: the quantised differences of a packed model (phrase model or reader)
PACKED_FILE = "packed.safetensors"

MODEL_FORMS: dict[ModelType, ModelForm] = {
    ModelType.PACKED_PHRASE: ModelForm("anygrain.phrase.packed", PACKED_PHRASE_CONFIG),
    ModelType.PHRASE: ModelForm("anygrain.phrase.model", PHRASE_CONFIG),
    ModelType.BIENCODER: ModelForm("anygrain.models.biencoder", BIENCODER_CONFIG),
    ModelType.PACKED_READER: ModelForm("anygrain.reader.packed", PACKED_READER_CONFIG),
    ModelType.READER: ModelForm("anygrain.reader.model", READER_CONFIG),
}

#: every config file that marks a saved model directory
MODEL_CONFIG_FILES = tuple(form.config_file for form in MODEL_FORMS.values())


def config_file(kind: ModelType) -> str:
    """The name of the JSON file a saved model of ``kind`` is marked by."""
    return MODEL_FORMS[kind].config_file
