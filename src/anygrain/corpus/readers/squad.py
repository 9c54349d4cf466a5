"""SQuAD-format JSON (v1.1, v2.0, and CMRC 2018 / DRCD / XQuAD / SQuAD-Shifts, which share it).

Articles become documents titled by the article; each paragraph is a passage
(id ``{article_id}_{paragraph_index}``, or the paragraph's own ``id`` when it has
one, as CMRC does).  The document text is the paragraphs joined by blank lines,
so passage offsets point into it.  Questions carry answers, answer offsets, and
the gold passage.  Unanswerable v2 questions are kept with no answers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.readers._io import head, load_json, require
from anygrain.corpus.records import SourceDocument, Span
from anygrain.errors import ErrorLog, InputError

PARAGRAPH_SEP = "\n\n"

log = logging.getLogger(__name__)

#: what ``ErrorLog.note`` counts for an answer whose text is not at its ``answer_start``
MISPLACED_ANSWERS = "answers do not occur at their answer_start; matched by text"


def _sniff(path: Path) -> bool:
    if path.suffix.lower() != ".json":
        return False
    start = head(path, 65536)
    return '"data"' in start and '"paragraphs"' in start


class _Locator:
    """Maps a needle in the file back to a line number, for errors in nested JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._text: str | None = None

    def line_of(self, *needles: str) -> int | None:
        if self._text is None:
            self._text = self.path.read_text(encoding="utf-8-sig", errors="replace")
        for needle in needles:
            if not needle:
                continue
            pos = self._text.find(json.dumps(needle, ensure_ascii=False)[1:-1][:80])
            if pos < 0:
                pos = self._text.find(json.dumps(needle)[1:-1][:80])
            if pos >= 0:
                return self._text.count("\n", 0, pos) + 1
        return None


def _articles(path: Path) -> list[Any]:
    data = load_json(path)
    return require(data, "data", list, path=path, line=1)


def _article_ids(
    articles: list[Any], path: Path, errors: ErrorLog
) -> Iterator[tuple[int, dict[str, Any], str, str]]:
    seen: set[str] = set()
    for ai, art in enumerate(articles):
        if not isinstance(art, dict):
            errors.handle(InputError("expected an object", path=str(path), field=f"data[{ai}]"))
            continue
        title = str(art.get("title") or art.get("id") or f"article-{ai}")
        doc_id = str(art.get("id") or title)
        if doc_id in seen:
            doc_id = f"{doc_id}#{ai}"
        seen.add(doc_id)
        yield ai, art, doc_id, title


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    loc = _Locator(path)
    n_docs = 0
    for ai, art, doc_id, title in _article_ids(_articles(path), path, errors):
        paras = art.get("paragraphs")
        if not isinstance(paras, list):
            errors.handle(
                InputError(
                    "missing or not a list",
                    path=str(path),
                    line=loc.line_of(title),
                    field=f"data[{ai}].paragraphs",
                )
            )
            continue
        parts: list[str] = []
        spans: list[Span] = []
        pos = 0
        for pi, para in enumerate(paras):
            where = f"data[{ai}].paragraphs[{pi}].context"
            ctx = para.get("context") if isinstance(para, dict) else None
            if not isinstance(ctx, str) or not ctx.strip():
                problem = (
                    "missing field"
                    if ctx is None
                    else ("empty text" if isinstance(ctx, str) else "expected a string")
                )
                errors.handle(
                    InputError(problem, path=str(path), line=loc.line_of(title), field=where)
                )
                continue
            if parts:
                pos += len(PARAGRAPH_SEP)
            pid = str(para.get("id") or f"{doc_id}_{pi}")
            spans.append(Span(pos, pos + len(ctx), id=pid))
            parts.append(ctx)
            pos += len(ctx)
        if not spans:
            continue
        n_docs += 1
        yield SourceDocument(
            doc_id=doc_id,
            title=title,
            text=PARAGRAPH_SEP.join(parts),
            passages=spans,
            origin=f"{path}:{loc.line_of(title) or 1}",
        )
    if not n_docs:
        raise InputError("no documents found", path=str(path))


def read_questions(path: Path, errors: ErrorLog) -> Questions:
    loc = _Locator(path)
    out: list[Question] = []
    seen: set[str] = set()
    misplaced = 0  # answers whose text is not at their answer_start (spans cut mid-word)
    for ai, art, doc_id, _title in _article_ids(_articles(path), path, errors):
        paras = art.get("paragraphs")
        if not isinstance(paras, list):
            errors.handle(
                InputError("missing or not a list", path=str(path), field=f"data[{ai}].paragraphs")
            )
            continue
        for pi, para in enumerate(paras):
            if not isinstance(para, dict):
                errors.handle(
                    InputError(
                        "expected an object", path=str(path), field=f"data[{ai}].paragraphs[{pi}]"
                    )
                )
                continue
            pid = str(para.get("id") or f"{doc_id}_{pi}")
            raw_ctx = para.get("context")
            ctx = raw_ctx if isinstance(raw_ctx, str) else ""
            qas = para.get("qas", [])
            if not isinstance(qas, list):
                errors.handle(
                    InputError(
                        "expected a list", path=str(path), field=f"data[{ai}].paragraphs[{pi}].qas"
                    )
                )
                continue
            for qi, qa in enumerate(qas):
                where = f"data[{ai}].paragraphs[{pi}].qas[{qi}]"
                try:
                    q = _question(qa, pid, ctx, where, path)
                except InputError as e:
                    # Finding the line scans the file, so it is done only for bad records.
                    qid = qa.get("id") if isinstance(qa, dict) else None
                    e.line = loc.line_of(
                        str(qid), str(qa.get("question", "")) if isinstance(qa, dict) else ""
                    )
                    errors.handle(e)
                    continue
                if q.id in seen:
                    errors.handle(
                        InputError(
                            f"duplicate question id {q.id!r}",
                            path=str(path),
                            line=loc.line_of(q.id),
                            field=f"{where}.id",
                        )
                    )
                    continue
                seen.add(q.id)
                out.append(q)
                misplaced += _misplaced(qa, ctx)
    if not out:
        raise InputError("no questions found", path=str(path))
    if misplaced:
        # kept as they are (evaluation matches answers by text), but never silently
        errors.note(MISPLACED_ANSWERS, misplaced)
        log.warning("%s: %d %s", path, misplaced, MISPLACED_ANSWERS)
    return Questions(out, source=str(path), format="squad")


def _misplaced(qa: dict[str, Any], ctx: str) -> int:
    """How many of a (valid) question's answers have an ``answer_start`` where their text
    does not occur (annotator spans cut mid-word, offsets of another version of the text);
    none without a context or an offset to check."""
    if not ctx:
        return 0
    n = 0
    for ans in qa.get("answers", []):
        text, start = ans["text"], ans.get("answer_start", -1)
        if start >= 0 and ctx[start : start + len(text)] != text:
            n += 1
    return n


def _question(qa: Any, pid: str, ctx: str, where: str, path: Path) -> Question:
    if not isinstance(qa, dict):
        raise InputError("expected an object", path=str(path), field=where)
    line = None  # filled in by the caller when a check fails
    qid = require(qa, "id", (str, int), path=path, line=line, where=where)
    text = require(qa, "question", str, path=path, line=line, where=where)
    if not text.strip():
        raise InputError("empty text", path=str(path), line=line, field=f"{where}.question")
    answers: list[str] = []
    starts: list[int] = []
    impossible = bool(qa.get("is_impossible", False))
    raw_answers = qa.get("answers", [])
    if not isinstance(raw_answers, list):
        raise InputError("expected a list", path=str(path), line=line, field=f"{where}.answers")
    if not raw_answers and not impossible:
        # only SQuAD 2.0 marks a question unanswerable; anything else lost its answers
        problem = (
            "no answers (and not marked is_impossible)" if "answers" in qa else "missing field"
        )
        raise InputError(problem, path=str(path), line=line, field=f"{where}.answers")
    for k, ans in enumerate(raw_answers):
        a_where = f"{where}.answers[{k}]"
        a_text = require(ans, "text", str, path=path, line=line, where=a_where)
        start = ans.get("answer_start", -1)
        if not isinstance(start, int):
            raise InputError(
                "expected an integer", path=str(path), line=line, field=f"{a_where}.answer_start"
            )
        if a_text in answers:
            continue
        answers.append(a_text)
        starts.append(start)
    return Question(
        id=str(qid),
        text=text.strip(),
        answers=answers,
        answer_starts=starts,
        gold=[pid],
        meta={"is_impossible": impossible} if impossible else {},
        context=ctx
        or None,  # shared by the paragraph's questions, so it costs no memory per question
    )


register(
    Format(
        name="squad",
        description="SQuAD-format JSON (v1.1/v2.0; CMRC 2018, DRCD, XQuAD, SQuAD-Shifts)",
        sniff=_sniff,
        read_documents=read_documents,
        read_questions=read_questions,
        priority=10,
    )
)
