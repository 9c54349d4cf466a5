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


@dataclass(frozen=True, slots=True)
class UnitSearchStats:
    """How one query's unit search went (phrase indexes, sentence/passage/document grain).

    ``rounds`` of MIPS at doubling depth, the last at ``depth`` per side; ``units`` found;
    ``exhausted``: it stopped at the depth bound before its stopping rule held; ``exact``:
    its top units are provably those of an exhaustive search.
    """

    rounds: int
    depth: int
    units: int
    exhausted: bool
    exact: bool

    @staticmethod
    def summary(stats: list[UnitSearchStats]) -> dict[str, Any]:
        """Counts over queries, JSON-ready (eval reports)."""
        rounds: dict[str, int] = {}
        for s in stats:
            rounds[str(s.rounds)] = rounds.get(str(s.rounds), 0) + 1
        n = len(stats)
        return {
            "queries": n,
            "mean_rounds": round(sum(s.rounds for s in stats) / n, 4) if n else 0.0,
            "max_rounds": max((s.rounds for s in stats), default=0),
            "rounds": dict(sorted(rounds.items(), key=lambda kv: int(kv[0]))),
            "exhausted": sum(s.exhausted for s in stats),
            "exact": sum(s.exact for s in stats),
            "max_depth": max((s.depth for s in stats), default=0),
        }


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
