"""NQ-open style JSONL questions: ``{"question": ..., "answer": [...]}`` per line.

Used by NQ-open, EfficientQA, DensePhrases' ``*_orqa.jsonl`` and Pyserini's
JSON-lines ``topics.dpr.*`` files.  ``answers`` is accepted for ``answer``.
Ids are the record's ``id`` when it has one, else its line number (1-based)
so an id always leads back to the file.  Other fields are kept in ``meta``; repeated answers are dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question
from anygrain.corpus.readers._io import (
    dedupe,
    first_json_object,
    iter_jsonl,
    question_reader,
    require_id,
    require_text,
    string_list,
)
from anygrain.errors import InputError

ANSWER_KEYS = ("answer", "answers")


def is_question_record(obj: dict[str, Any] | None) -> bool:
    """An object with a question string and an answer list, and no DPR training contexts."""
    return (
        obj is not None
        and isinstance(obj.get("question"), str)
        and any(isinstance(obj.get(k), list) for k in ANSWER_KEYS)
        and "positive_ctxs" not in obj
    )


def sniff(path: Path) -> bool:
    """The first line is a question record."""
    return is_question_record(first_json_object(path))


def question_from_json(
    obj: dict[str, Any], *, path: Path, line: int, regex: bool = False
) -> Question:
    """One ``{"question", "answer"}`` record; the id defaults to the line number."""
    text = require_text(obj, "question", path=path, line=line)
    key = next((k for k in ANSWER_KEYS if k in obj), None)
    if key is None:
        raise InputError("missing field", path=str(path), line=line, field="answer")
    answers = dedupe(string_list(obj[key], path=path, line=line, field=key))
    qid = require_id(obj, "id", path=path, line=line) if "id" in obj else str(line)
    meta = {k: v for k, v in obj.items() if k not in ("id", "question", key)}
    return Question(id=qid, text=text.strip(), answers=answers, answers_are_regex=regex, meta=meta)


# All records, ids unique.
read_questions = question_reader(iter_jsonl, question_from_json, format="nq-open")


register(
    Format(
        name="nq-open",
        description='NQ-open JSONL questions: {"question": ..., "answer": [...]}',
        sniff=sniff,
        read_questions=read_questions,
        priority=10,
    )
)
