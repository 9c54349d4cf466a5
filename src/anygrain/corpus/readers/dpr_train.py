"""DPR retriever training data: ``question``, ``answers``, ``positive_ctxs``, ``negative_ctxs``,
``hard_negative_ctxs``; each context ``{"title", "text", "passage_id" | "psg_id"?}``.

Either DPR's JSON list (``biencoder-nq-train.json``; loaded whole, one record
decoded at a time) or JSONL, one record per line (streamed).
:func:`read_dpr_training` gives training examples with every context;
as a question set (format ``dpr-train``) each record is a question whose
``gold`` is its distinct positive passage ids, with positive titles in
``meta["positive_titles"]`` (contexts without an id count only there).
Ids are line numbers (1-based) of where each record starts.
``positive_ctxs`` is required; the negative lists are optional.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.readers._io import (
    converted,
    dedupe,
    dict_elements,
    first_json_object,
    head,
    iter_json_array,
    iter_jsonl,
    no_records,
    require,
    require_text,
    string_list,
)
from anygrain.errors import ErrorLog, InputError

Context = tuple[str | None, str, str]  # (passage id or None, title, text)
CTX_LISTS = ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs")
ID_KEYS = ("passage_id", "psg_id", "id")


@dataclass
class DprExample:
    """One training record; contexts are ``(id, title, text)`` with ``id`` None when absent."""

    question: str
    answers: list[str]
    positives: list[Context]
    negatives: list[Context] = field(default_factory=list)
    hard_negatives: list[Context] = field(default_factory=list)
    line: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _is_json_list(path: Path) -> bool:
    return head(path, 64).lstrip("\ufeff \t\r\n").startswith("[")


def sniff(path: Path) -> bool:
    """A JSON list whose first record has ``positive_ctxs``, or JSONL whose first line does."""
    if not path.is_file():
        return False
    if _is_json_list(path):
        start = head(path, 65536)
        return '"positive_ctxs"' in start and '"question"' in start
    obj = first_json_object(path)
    return obj is not None and "positive_ctxs" in obj and "question" in obj


def _contexts(obj: dict[str, Any], key: str, *, path: Path, line: int) -> list[Context]:
    if key not in obj:
        if key == "positive_ctxs":
            raise InputError("missing field", path=str(path), line=line, field=key)
        return []
    items = require(obj, key, list, path=path, line=line)
    out: list[Context] = []
    for where, ctx in dict_elements(items, key, path=path, line=line):
        text = require(ctx, "text", str, path=path, line=line, where=where)
        title = require(ctx, "title", str, path=path, line=line, where=where)
        id_key = next((k for k in ID_KEYS if ctx.get(k) not in (None, "")), None)
        pid = None
        if id_key is not None:
            pid = str(require(ctx, id_key, (str, int), path=path, line=line, where=where))
        out.append((pid, title, text))
    return out


def example_from_record(obj: Any, *, path: Path, line: int) -> DprExample:
    """One decoded record, checked field by field."""
    if not isinstance(obj, dict):
        raise InputError(
            f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=line
        )
    question = require_text(obj, "question", path=path, line=line)
    answers = string_list(
        require(obj, "answers", list, path=path, line=line), path=path, line=line, field="answers"
    )
    pos, neg, hard = (_contexts(obj, k, path=path, line=line) for k in CTX_LISTS)
    meta = {k: v for k, v in obj.items() if k not in ("question", "answers", *CTX_LISTS)}
    return DprExample(question.strip(), answers, pos, neg, hard, line=line, meta=meta)


def iter_dpr_training(path: Path, errors: ErrorLog) -> Iterator[DprExample]:
    """Training examples one at a time; bad records go to ``errors``; raises when none."""
    records: Iterator[tuple[int, Any]] = (
        iter_json_array(path) if _is_json_list(path) else iter_jsonl(path, errors)
    )
    n = 0
    for _, _, ex in converted(
        records, lambda obj, line: example_from_record(obj, path=path, line=line), errors
    ):
        n += 1
        yield ex
    if not n:
        raise no_records(path, "training examples")


def read_dpr_training(path: Path, errors: ErrorLog) -> list[DprExample]:
    """All training examples of a DPR JSON or JSONL file."""
    return list(iter_dpr_training(path, errors))


def read_questions(path: Path, errors: ErrorLog) -> Questions:
    """Training records as questions: gold = distinct positive passage ids."""
    out = [
        Question(
            id=str(ex.line),
            text=ex.question,
            answers=dedupe(ex.answers),
            gold=dedupe([pid for pid, _, _ in ex.positives if pid is not None]),
            meta={**ex.meta, "positive_titles": dedupe([t for _, t, _ in ex.positives])},
        )
        for ex in iter_dpr_training(path, errors)
    ]
    return Questions(out, source=str(path), format="dpr-train")


register(
    Format(
        name="dpr-train",
        description="DPR retriever training JSON list or JSONL (question, answers, *_ctxs)",
        sniff=sniff,
        read_questions=read_questions,
        priority=30,
    )
)
