"""Qrels files, read in one place: TREC (``anygrain.eval.read_qrels``), BEIR and Multi-CPR.

Every layout is ``query, [iteration,] unit, grade`` per line, tab- or whitespace-separated
(:func:`~anygrain.corpus.readers._io.split_qrels`); they differ only in which column counts
they take, whether the first line may name the columns, whether a judgement may be repeated
and what error messages call the columns (the names the files' own documentation uses).
Bad lines go to an :class:`~anygrain.errors.ErrorLog` (without one, the first raises).
"""

from __future__ import annotations

import enum
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from anygrain.corpus.readers._io import iter_rows, split_qrels
from anygrain.errors import ErrorLog, InputError

__all__ = ["Judged", "QrelsLayout", "read_judgements"]


class QrelsLayout(enum.Enum):
    """How a qrels file lays out its lines."""

    TREC = "trec"  # qid iter docid rel, as trec_eval reads it
    BEIR = "beir"  # query-id corpus-id score, a header line allowed
    MULTICPR = "multicpr"  # qid 0 pid relevance, or without the 0 column


@dataclass(frozen=True)
class _Shape:
    names: tuple[str, ...]  # the columns, as errors name them
    columns: tuple[int, ...]  # the column counts taken: 4 is TREC's (with the iteration)
    header: bool  # the first line may name the columns
    repeats: bool  # an identical repeated judgement is accepted (trec_eval does)


_SHAPES = {
    QrelsLayout.TREC: _Shape(("qid", "iter", "docid", "rel"), (4,), header=False, repeats=True),
    QrelsLayout.BEIR: _Shape(
        ("query-id", "corpus-id", "score"), (3, 4), header=True, repeats=False
    ),
    QrelsLayout.MULTICPR: _Shape(
        ("qid", "0", "pid", "relevance"), (4, 3), header=False, repeats=False
    ),
}
_HEADER_IDS = ("query-id", "query_id", "qid")


@dataclass
class Judged:
    """One query's judgements: unit id -> integer grade, in file order."""

    line: int  # the first line judging the query (where an error about the query points)
    grades: dict[str, int] = field(default_factory=dict)


def read_judgements(
    path: Path,
    layout: QrelsLayout,
    errors: ErrorLog | None = None,
    *,
    queries: Container[str] | None = None,
    queries_name: str = "",
) -> dict[str, Judged]:
    """Query id -> its judgements, in file order.  With ``queries``, a line judging a query
    not in it is an error (``queries_name``, the file they came from, says where)."""
    shape = _SHAPES[layout]
    errors = errors if errors is not None else ErrorLog()
    q_name, u_name, g_name = shape.names[0], shape.names[-2], shape.names[-1]
    out: dict[str, Judged] = {}

    def header(fields: list[str]) -> bool:
        return shape.header and bool(fields) and fields[0].lower() in _HEADER_IDS

    for line, fields in iter_rows(path, errors, split_qrels, header):
        if len(fields) not in shape.columns:
            names = ", ".join(shape.names)
            message = f"expected {len(shape.names)} columns ({names}), got {len(fields)}"
            errors.handle(InputError(message, path=str(path), line=line))
            continue
        qid, uid, grade = (fields[0], fields[2], fields[3]) if len(fields) == 4 else fields
        judged = out.get(qid)
        problem: tuple[str, str] | None = None  # (message, field)
        if not qid:
            problem = "empty id", q_name
        elif queries is not None and qid not in queries:
            problem = f"query id {qid!r} is not in {queries_name}", q_name
        elif not uid:
            problem = "empty id", u_name
        elif not (grade.lstrip("-").isdigit() and grade.isascii()):
            problem = f"expected an integer, got {grade!r}", g_name
        elif judged is not None and uid in judged.grades:
            old = judged.grades[uid]
            if old == int(grade):
                if shape.repeats:
                    continue  # the same judgement again
                problem = f"duplicate judgement for ({qid!r}, {uid!r})", u_name
            else:
                problem = f"duplicate judgement for ({qid!r}, {uid!r}): {old} and {grade}", g_name
        if problem is not None:
            errors.handle(InputError(problem[0], path=str(path), line=line, field=problem[1]))
            continue
        out.setdefault(qid, Judged(line)).grades[uid] = int(grade)
    return out
