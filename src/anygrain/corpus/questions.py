"""Question sets: what evaluation and training read, whatever the source format."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


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
