"""DensePhrases (Lee et al., 2021): phrase retrieval with start/end token vectors.

:class:`PhraseEncoder` is the model, :class:`PhraseIndex` the index kind
(``IndexKind.PHRASE``; evaluated, open corpus or D = {p}, by
:func:`anygrain.api.evaluate_index`); training lives in :mod:`anygrain.train.phrase.trainer`.

Every name is imported on first use (PEP 562): the model needs torch and transformers, the
index FAISS, and the option types (:mod:`anygrain.phrase.options`) none of them, so
``import anygrain.phrase.options`` (the command line's ``--help``) starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anygrain.phrase.index import PhraseIndex
    from anygrain.phrase.model import PhraseConfig, PhraseEncoder
    from anygrain.phrase.options import QuestionEncoderKind

# each name and the module that defines it
_HOMES = {
    "PhraseConfig": "anygrain.phrase.model",
    "PhraseEncoder": "anygrain.phrase.model",
    "QuestionEncoderKind": "anygrain.phrase.options",
    "PhraseIndex": "anygrain.phrase.index",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'anygrain.phrase' has no attribute {name!r}")


__all__ = ["PhraseConfig", "PhraseEncoder", "PhraseIndex", "QuestionEncoderKind"]
