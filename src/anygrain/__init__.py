"""anygrain: dense retrieval at any grain (phrase, sentence, passage, document), English and Chinese.

The nouns: a :class:`CorpusStore` of passages, an :class:`Index` over it,
:class:`Hit` s that every search returns, and :class:`Questions` to evaluate with.

The names below load on first use (PEP 562), so ``import anygrain.train.phrase`` on a
training machine needs neither FAISS nor the index kinds, and the CLI starts faster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "evaluate_index": "anygrain.api",
    "load_questions": "anygrain.api",
    "run_demo": "anygrain.api",
    "search_index": "anygrain.api",
    "Question": "anygrain.corpus.questions",
    "Questions": "anygrain.corpus.questions",
    "CorpusStore": "anygrain.corpus.store",
    "AnygrainError": "anygrain.errors",
    "ErrorPolicy": "anygrain.errors",
    "InputError": "anygrain.errors",
    "Index": "anygrain.index.base",
    "IndexKind": "anygrain.index.registry",
    "Hit": "anygrain.hits.hit",
    "Unit": "anygrain.hits.hit",
}

if TYPE_CHECKING:
    from anygrain.api import evaluate_index, load_questions, run_demo, search_index
    from anygrain.corpus.questions import Question, Questions
    from anygrain.corpus.store import CorpusStore
    from anygrain.errors import AnygrainError, ErrorPolicy, InputError
    from anygrain.hits.hit import Hit, Unit
    from anygrain.index.base import Index
    from anygrain.index.registry import IndexKind


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'anygrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "AnygrainError",
    "CorpusStore",
    "ErrorPolicy",
    "Hit",
    "Index",
    "IndexKind",
    "InputError",
    "Question",
    "Questions",
    "Unit",
    "evaluate_index",
    "load_questions",
    "run_demo",
    "search_index",
]
assert sorted(__all__) == sorted(_WHERE)
