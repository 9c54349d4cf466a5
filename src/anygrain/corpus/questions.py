"""Question sets: what evaluation and training read, whatever the source format."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anygrain.errors import AnygrainError

if TYPE_CHECKING:
    from anygrain.errors import ErrorLog


@dataclass
class Question:
    """One question.

    ``answers`` are strings (or regular expressions when ``answers_are_regex``);
    ``answer_starts`` are character offsets of each answer in its gold passage
    (SQuAD-style data, used for span training); ``gold`` lists relevant unit ids
    (passage ids, or document ids/titles for KILT); ``qrels`` maps unit ids to
    graded relevance. ``context`` is the gold passage's text where the source carries
    it (SQuAD-style), so a gold-passage lookup can check that an index holds the same
    text under that id.
    """

    id: str
    text: str
    answers: list[str] = field(default_factory=list)
    answer_starts: list[int] = field(default_factory=list)
    answers_are_regex: bool = False
    gold: list[str] = field(default_factory=list)
    qrels: dict[str, int] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)
    context: str | None = None

    @property
    def answerable(self) -> bool:
        return bool(self.answers) or bool(self.qrels)


@dataclass
class Questions(Sequence[Question]):
    """An ordered question set with the source it came from."""

    items: list[Question]
    source: str = ""
    format: str = ""

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        return self.items[i]

    def __iter__(self) -> Iterator[Question]:
        return iter(self.items)

    @property
    def has_qrels(self) -> bool:
        return any(q.qrels for q in self.items)

    @property
    def texts(self) -> list[str]:
        return [q.text for q in self.items]

    def first(self, limit: int | None) -> Questions:
        """The first ``limit`` questions (all of them when None), from the same source."""
        if limit is None:
            return self
        if limit < 1:
            raise AnygrainError(f"limit must be at least 1, got {limit}")
        return Questions(self.items[:limit], source=self.source, format=self.format)


def read_questions(
    spec: str | Path, *, errors: ErrorLog | None = None, limit: int | None = None
) -> Questions:
    """A question set from ``FORMAT:PATH`` or ``PATH`` (format detected); ``limit``: its
    first N questions."""
    from anygrain.corpus.formats import parse_source  # the formats read this module's type

    return parse_source(str(spec), want="questions").questions(errors).first(limit)


def read_text_file(path: str | Path, holding: str) -> tuple[str, str]:
    """The text of the UTF-8 file ``path`` (``-``: stdin) and where it came from (the path,
    or ``stdin``); a missing file, a directory (``holding``: what to give instead, as in
    "a file of questions") or bytes that are not UTF-8 refused in one line."""
    import sys

    if str(path) == "-":
        return sys.stdin.read(), "stdin"
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8"), str(p)
    except FileNotFoundError:
        raise AnygrainError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise AnygrainError(f"{p}: is a directory; give {holding}") from None
    except UnicodeDecodeError as e:
        raise AnygrainError(f"{p}: not UTF-8 text (byte {e.start})") from None


def read_question_lines(path: str | Path) -> Questions:
    """Questions one per line of a UTF-8 text file (``-``: stdin); blank lines are skipped,
    and each question's id is its line number."""
    text, where = read_text_file(path, "a file of questions")
    items = [
        Question(id=str(n), text=line.strip())
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]
    if not items:
        raise AnygrainError(f"{where}: holds no question (one question per line)")
    return Questions(items, source=where, format="lines")


def batch_questions(spec: str | Path, *, errors: ErrorLog | None = None) -> Questions:
    """The questions of a batch search: ``FORMAT:PATH`` (any question format), else a text
    file with one question per line (``-``: stdin)."""
    # the formats read question sets of this module's type: imported when asked
    from anygrain.corpus.formats import names_format, parse_source

    if names_format(str(spec)):
        return parse_source(str(spec), want="questions").questions(errors)
    return read_question_lines(spec)
