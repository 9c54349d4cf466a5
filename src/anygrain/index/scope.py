"""Where a question is searched: the whole index, or only its own gold passage."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError

if TYPE_CHECKING:
    from anygrain.corpus.store import CorpusStore


class Scope(str, enum.Enum):
    """Search scope of an evaluation."""

    CORPUS = "corpus"  # open retrieval over the whole index
    # Phrase indexes: D = {p}, each question searched in its own gold passage only.
    # Passage indexes: the whole corpus is searched, and a hit is relevant when it *is* the
    # question's gold passage (by id), not when it merely contains an answer string.
    GOLD_PASSAGE = "gold-passage"


def gold_rows(corpus: CorpusStore, question: Question, *, source: str = "") -> list[int]:
    """Rows of ``question``'s gold passages in ``corpus`` (those present), for D = {p}.

    An error names the question file when none of its gold passages is stored, or when
    the file's passage text differs from the stored passage of that id: ids such as
    ``Title_0`` are positional, so another file can reuse them for other text, and
    searching there would score the question against the wrong passage.
    """
    where = f"{source}: " if source else ""
    if not question.gold:
        raise AnygrainError(f"{where}question {question.id!r} has no gold passage")
    rows: list[int] = []
    for pid in question.gold:
        try:
            rows.append(corpus.row_of(pid))
        except KeyError:
            continue
    if not rows:
        raise AnygrainError(
            f"{where}question {question.id!r}: gold passage {question.gold[0]!r} is not in the "
            "index's corpus; build the index on the questions' own passages"
        )
    if question.context is not None and len(question.gold) == 1:
        stored = corpus.texts(rows)[0]
        if stored != question.context:
            raise AnygrainError(
                f"{where}question {question.id!r}: passage {question.gold[0]!r} in the index has "
                f"other text than in this file ({stored[:40]!r}… vs "
                f"{question.context[:40]!r}…); build the index from the same file"
            )
    return rows
