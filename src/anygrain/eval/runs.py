"""TREC run files and qrels: the interchange formats of trec_eval and friends.

A run line is ``qid Q0 docid rank score tag``; a qrels line is ``qid 0 docid rel``
(whitespace- or tab-separated, so Multi-CPR's ``qid\\t0\\tpid\\t1`` reads as is).
Readers raise :class:`~anygrain.errors.InputError` naming the file, line and field
of the first bad record; blank lines are skipped.

Runs are written atomically (a crash leaves no half file), never over the command's
inputs nor inside an index, model or corpus directory (:func:`check_run_path`).  A unit id appears at
most once per query -- trec_eval rejects duplicate documents -- so when several
hits share an id (phrases or sentences of one passage) only the first, best
ranked, is written and ranks are renumbered.  ``read_run`` orders each query by the
rank column; trec_eval orders by score instead, which is the same for runs written
here because indexes return hits best first.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

from anygrain.errors import AnygrainError, InputError
from anygrain.hits.hit import Hit, Unit

__all__ = [
    "RunWriter",
    "check_run_tag",
    "dedupe_hits",
    "read_qrels",
    "read_run",
    "run_lines",
    "write_run",
]

_RUN_FIELDS = ("qid", "Q0", "docid", "rank", "score", "tag")
_N = TypeVar("_N", int, float)


def dedupe_hits(hits: Iterable[Hit]) -> list[Hit]:
    """Keep the first hit of each unit id, in rank order."""
    seen: set[str] = set()
    out = []
    for h in hits:
        uid = h.unit_id
        if uid not in seen:
            seen.add(uid)
            out.append(h)
    return out


def _check_id(kind: str, value: str) -> str:
    value = str(value)
    if not value or any(c.isspace() for c in value):
        raise AnygrainError(
            f"cannot write {kind} {value!r} to a TREC run: ids must be non-empty, without whitespace"
        )
    return value


def check_run_path(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None] = ()
) -> Path:
    """Fail now, not after a whole evaluation, when a run file cannot or must not be
    written at ``path``: a directory, an unwritable place, one of ``inputs`` (the question
    set, qrels, the index: paths or ``FORMAT:PATH``), or a file inside an anygrain index,
    model or corpus directory (:func:`anygrain.utils.targets.check_output_file`)."""
    from anygrain.utils.targets import check_output_file

    p = Path(path)
    if p.is_dir():
        raise AnygrainError(
            f"{p}: is a directory; give the run file's path (e.g. {p / 'run.trec'})"
        )
    check_output_file(p, inputs, what="the run")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # the directories RunWriter would create go here
    if not parent.is_dir():
        raise AnygrainError(f"{parent}: not a directory, so {p} cannot be written")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise AnygrainError(f"{parent}: not writable, so {p} cannot be written")
    return p


class RunWriter:
    """Streams a TREC run to a temporary file and renames it into place on close.

    Streaming keeps memory flat when evaluation writes 1000 hits for each of many
    thousands of queries.
    """

    def __init__(self, path: str | os.PathLike[str], tag: str = "anygrain") -> None:
        self.path = check_run_path(path)
        self.tag = _check_id("tag", tag)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        self._tmp = Path(tmp)
        self._f: IO[str] = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, qid: str, hits: Sequence[Hit]) -> None:
        self._f.writelines(run_lines(qid, hits, self.tag))

    def close(self, ok: bool = True) -> None:
        """Finish the file (``ok``) or throw the partial one away."""
        if self._f.closed:
            return
        try:
            if ok:
                self._f.flush()
                os.fsync(self._f.fileno())
            self._f.close()
            if ok:
                os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(ok=exc_type is None)


def check_run_tag(tag: str) -> str:
    """``tag`` if a run line can end with it: non-empty, without whitespace."""
    return _check_id("tag", tag)


def run_lines(qid: str, hits: Sequence[Hit], tag: str = "anygrain") -> list[str]:
    """The run lines of one query (``qid Q0 docid rank score tag``, newline-terminated):
    each unit id once, ranked from 1 (:func:`dedupe_hits`)."""
    qid = _check_id("query id", qid)
    tag = check_run_tag(tag)
    lines = []
    for rank, h in enumerate(dedupe_hits(hits), start=1):
        docid = _check_id("unit id", h.unit_id)
        lines.append(f"{qid} Q0 {docid} {rank} {float(h.score)!r} {tag}\n")
    return lines


def write_run(
    path: str | os.PathLike[str], run: Mapping[str, Sequence[Hit]], tag: str = "anygrain"
) -> None:
    """Write ``run`` (query id -> hits, best first) as a TREC run file, atomically."""
    with RunWriter(path, tag) as w:
        for qid, hits in run.items():
            w.write(qid, hits)


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, list[str]]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if parts:
                yield lineno, parts


def _number(
    kind: Callable[[str], _N], text: str, what: str, *, path: str, line: int, field: str
) -> _N:
    """``kind(text)``, or an error naming the file, line and field."""
    try:
        return kind(text)
    except ValueError:
        raise InputError(
            f"{field} {text!r} is not {what}", path=path, line=line, field=field
        ) from None


def read_run(path: str | os.PathLike[str], *, unit: Unit = Unit.PASSAGE) -> dict[str, list[Hit]]:
    """Read a TREC run into query id -> hits ordered by rank.

    The hits carry only ids and scores (no text), so they suit qrels- or
    gold-id-based metrics, not answer-string ones.
    """
    p = str(path)
    rows: dict[str, list[tuple[int, int, Hit]]] = {}
    seen: dict[str, set[str]] = {}
    for lineno, parts in _lines(path):
        if len(parts) != 6:
            raise InputError(
                f"expected 6 fields ({' '.join(_RUN_FIELDS)}), found {len(parts)}",
                path=p,
                line=lineno,
            )
        qid, _, docid, rank_s, score_s, _tag = parts
        rank = _number(int, rank_s, "an integer", path=p, line=lineno, field="rank")
        score = _number(float, score_s, "a number", path=p, line=lineno, field="score")
        if math.isnan(score):
            raise InputError("score is NaN", path=p, line=lineno, field="score")
        ids = seen.setdefault(qid, set())
        if docid in ids:
            raise InputError(
                f"unit {docid!r} appears twice for query {qid!r}",
                path=p,
                line=lineno,
                field="docid",
            )
        ids.add(docid)
        hit = Hit(
            unit=unit,
            score=score,
            passage_row=-1,
            passage_id=docid,
            doc_id=docid,
            title="",
            text="",
        )
        rows.setdefault(qid, []).append((rank, lineno, hit))
    return {
        qid: [h for _, _, h in sorted(r, key=lambda t: (t[0], t[1]))] for qid, r in rows.items()
    }


def read_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Read qrels into query id -> unit id -> graded relevance (integer); the first bad
    line raises.  Parsed by the one qrels reader, as BEIR's and Multi-CPR's are."""
    from anygrain.corpus.readers.qrels import QrelsLayout, read_judgements

    return {q: j.grades for q, j in read_judgements(Path(path), QrelsLayout.TREC).items()}
