"""Question JSON as DensePhrases writes it: ``{"data": [{"id", "question", "answers"}]}``.

``question`` is required; ``id`` defaults to the record's line number and
``answers`` (a list of strings) to none.  Other fields are kept in ``meta``.
SQuAD files share the ``data`` key but nest ``paragraphs``; those are ``squad``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question
from anygrain.corpus.readers._io import (
    dedupe,
    head,
    iter_json_array,
    question_reader,
    require_id,
    require_text,
    string_list,
)
from anygrain.errors import ErrorLog, InputError

_DATA = re.compile(r'"data"\s*:\s*\[')
_QUESTION = re.compile(r'"question"\s*:')


def sniff(path: Path) -> bool:
    """A ``.json`` object whose ``data`` list holds ``question`` records (not SQuAD paragraphs)."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    start = head(path, 65536).lstrip("\ufeff \t\r\n")
    return (
        start.startswith("{")
        and _DATA.search(start) is not None
        and _QUESTION.search(start) is not None
        and '"paragraphs"' not in start
    )


def question_from_record(obj: Any, *, path: Path, line: int) -> Question:
    """One element of ``data``."""
    if not isinstance(obj, dict):
        raise InputError(
            f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=line
        )
    text = require_text(obj, "question", path=path, line=line)
    qid = require_id(obj, "id", path=path, line=line) if "id" in obj else str(line)
    answers = (
        string_list(obj["answers"], path=path, line=line, field="answers")
        if "answers" in obj
        else []
    )
    meta = {k: v for k, v in obj.items() if k not in ("id", "question", "answers")}
    return Question(id=qid, text=text.strip(), answers=dedupe(answers), meta=meta)


def _data_records(path: Path, errors: ErrorLog) -> Iterator[tuple[int, Any]]:
    """The elements of ``data`` (the file is one JSON document: nothing to skip by line)."""
    return iter_json_array(path, "data")


# All elements of ``data``, ids unique.
read_questions = question_reader(_data_records, question_from_record, format="qa-json")


register(
    Format(
        name="qa-json",
        description='question JSON: {"data": [{"id", "question", "answers"}]} (DensePhrases)',
        sniff=sniff,
        read_questions=read_questions,
        priority=10,
    )
)
