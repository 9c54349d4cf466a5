"""DPR's question files: ``question<TAB>['answer', ...]`` (``nq-test.qa.csv``, ``topics.dpr.*``).

The answer column is a Python list literal, read with :func:`ast.literal_eval`.
Lines whose question is CSV-quoted (TriviaQA's, with doubled quotes) are
unquoted with the :mod:`csv` module as DPR's own reader does; most of them were
quoted twice upstream (the line starts with three quotes), so a question
that is still a well-formed quoted field after that is unquoted once more,
giving ``Who said, "How...`` rather than DPR's ``"Who said, ""How...``.
Pyserini ships some ``topics.dpr.*`` files as JSON lines (``curated``,
``squad``, ``wq``); such lines are read as NQ-open records, so every
``topics.dpr.*`` file reads with this format.

CuratedTREC's answers are regular expressions: ``answers_are_regex`` is set when
the file name contains ``curated``, or for every file read as ``dpr-qas-regex``.
Ids are line numbers (1-based) unless a JSON line has an ``id``.
"""

from __future__ import annotations

import ast
import json
from functools import partial
from pathlib import Path

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.readers._io import (
    collect_questions,
    dedupe,
    first_json_object,
    first_line,
    iter_text_lines,
    split_tsv,
    string_list,
)
from anygrain.corpus.readers.nq_open import is_question_record, question_from_json
from anygrain.errors import ErrorLog, InputError


def _looks_like_list(text: str) -> bool:
    text = text.strip()
    return text.startswith("[") and text.endswith("]")


def sniff(path: Path) -> bool:
    """``question<TAB>[...]`` lines, or question JSON lines in a ``topics.dpr.*``/curated file."""
    if not path.is_file():
        return False
    fields = split_tsv(first_line(path), 2)
    if len(fields) == 2 and fields[0].strip() and _looks_like_list(fields[1]):
        return True
    name = path.name.lower()
    return (name.startswith("topics.dpr.") or "curated" in name) and is_question_record(
        first_json_object(path)
    )


def is_regex_file(path: Path) -> bool:
    """CuratedTREC files hold regular expressions as answers."""
    return "curated" in path.name.lower()


def unquote_twice_quoted(text: str) -> str:
    """Remove a second CSV quoting layer: ``"a ""b"" c"`` -> ``a "b" c``; other text as is."""
    if len(text) >= 2 and text[0] == text[-1] == '"' and '"' not in text[1:-1].replace('""', ""):
        return text[1:-1].replace('""', '"')
    return text


def question_from_line(text: str, *, path: Path, line: int, regex: bool) -> Question:
    """One ``question<TAB>['a', 'b']`` line."""
    fields = split_tsv(text, 2)
    if len(fields) != 2:
        raise InputError(
            f"expected 2 tab-separated columns (question, answers), got {len(fields)}",
            path=str(path),
            line=line,
            field="answers" if len(fields) < 2 else None,
        )
    question, raw = fields
    if text.startswith('"'):
        question = unquote_twice_quoted(question)
    if not question.strip():
        raise InputError("empty text", path=str(path), line=line, field="question")
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(
            "answers are not a Python list literal", path=str(path), line=line, field="answers"
        ) from None
    answers = string_list(value, path=path, line=line, field="answers")
    return Question(
        id=str(line), text=question.strip(), answers=dedupe(answers), answers_are_regex=regex
    )


def read_questions(path: Path, errors: ErrorLog, *, regex: bool | None = None) -> Questions:
    """Read a DPR qas file; ``regex=None`` decides from the file name (``curated``)."""
    is_regex = is_regex_file(path) if regex is None else regex

    def convert(text: str, line: int) -> Question:
        if text.lstrip().startswith("{"):
            return question_from_json(_json(text, path, line), path=path, line=line, regex=is_regex)
        return question_from_line(text, path=path, line=line, regex=is_regex)

    lines = ((line, text) for line, text in iter_text_lines(path, errors) if text.strip())
    return collect_questions(lines, convert, path=path, errors=errors, format="dpr-qas")


def _json(text: str, path: Path, line: int) -> dict[str, object]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"invalid JSON: {e.msg} (column {e.colno})", path=str(path), line=line
        ) from None
    if not isinstance(obj, dict):
        raise InputError(
            f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=line
        )
    return obj


register(
    Format(
        name="dpr-qas",
        description="DPR questions: question<TAB>['answers'] lines (curated: regex answers)",
        sniff=sniff,
        read_questions=read_questions,
        priority=25,
    )
)

register(
    Format(
        name="dpr-qas-regex",
        description="DPR questions whose answers are regular expressions (force only)",
        sniff=lambda path: False,
        read_questions=partial(read_questions, regex=True),
        priority=-1000,
    )
)
