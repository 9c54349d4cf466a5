"""DensePhrases (Lee et al., 2021): phrase retrieval with start/end token vectors.

:class:`PhraseEncoder` is the model, :class:`PhraseIndex` the index kind
(``IndexKind.PHRASE``; evaluated, open corpus or D = {p}, by
:func:`anygrain.api.evaluate_index`); training lives in :mod:`anygrain.train.phrase.trainer`.
"""

from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.model import PhraseConfig, PhraseEncoder, QuestionEncoderKind

__all__ = ["PhraseConfig", "PhraseEncoder", "PhraseIndex", "QuestionEncoderKind"]
