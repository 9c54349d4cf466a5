"""Where a question is searched: the whole index, or only its own gold passage."""

from __future__ import annotations

import enum


class Scope(str, enum.Enum):
    """Search scope of an evaluation."""

    CORPUS = "corpus"  # open retrieval over the whole index
    GOLD_PASSAGE = "gold-passage"  # D = {p}: only the question's gold passage (phrase indexes)
