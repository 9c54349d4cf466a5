"""Hit: what every search returns, whatever the kind of index."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class Unit(str, enum.Enum):
    """The grain of a hit."""

    PHRASE = "phrase"
    SENTENCE = "sentence"
    PASSAGE = "passage"
    DOCUMENT = "document"


@dataclass(slots=True)
class Hit:
    """One retrieved unit.

    ``span`` is the character span of a phrase or sentence inside ``text``
    (the passage text); for passages and documents it is ``None``.
    """

    unit: Unit
    score: float
    passage_row: int
    passage_id: str
    doc_id: str
    title: str
    text: str
    span: tuple[int, int] | None = None

    @property
    def unit_id(self) -> str:
        """The id evaluation compares with qrels for this unit."""
        if self.unit is Unit.DOCUMENT:
            return self.doc_id
        return self.passage_id

    @property
    def answer_text(self) -> str:
        """The phrase for phrase hits; the passage text otherwise."""
        if self.span is not None:
            return self.text[self.span[0] : self.span[1]]
        return self.text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = self.unit.value
        if self.span is not None:
            d["answer"] = self.answer_text
        return d
