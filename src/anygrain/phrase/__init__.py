"""DensePhrases (Lee et al., 2021): phrase retrieval with start/end token vectors.

:class:`PhraseEncoder` is the model, :class:`PhraseIndex` the index kind
(``IndexKind.PHRASE``; evaluated, open corpus or D = {p}, by
:func:`anygrain.api.evaluate_index`); training lives in :mod:`anygrain.train.phrase.trainer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anygrain.phrase.model import PhraseConfig, PhraseEncoder, QuestionEncoderKind

if TYPE_CHECKING:
    from anygrain.phrase.index import PhraseIndex


def __getattr__(name: str) -> Any:
    # the index kind needs FAISS; the model alone (training on a GPU machine) does not
    if name == "PhraseIndex":
        from anygrain.phrase.index import PhraseIndex

        return PhraseIndex
    raise AttributeError(f"module 'anygrain.phrase' has no attribute {name!r}")


__all__ = ["PhraseConfig", "PhraseEncoder", "PhraseIndex", "QuestionEncoderKind"]
