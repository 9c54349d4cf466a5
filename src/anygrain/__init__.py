"""anygrain: dense retrieval at any grain (phrase, sentence, passage, document), English and Chinese.

The nouns: a :class:`CorpusStore` of passages, an :class:`Index` over it,
:class:`Hit` s that every search returns, and :class:`Questions` to evaluate with.
"""

from anygrain.api import evaluate_index, load_questions, run_demo, search_index
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorPolicy, InputError
from anygrain.index.base import Index, IndexKind
from anygrain.search.hit import Hit, Unit

__version__ = "0.1.0"


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
