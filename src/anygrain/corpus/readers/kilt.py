"""KILT task files (JSONL): ``{"id", "input", "output": [{"answer", "provenance": [...]}]}``.

``input`` is the question; answers are the distinct ``output[].answer``
strings; ``gold`` is the distinct provenance ``wikipedia_id`` s (KILT scores
retrieval by page), with their titles in ``meta["titles"]`` and the record's
own ``meta`` in ``meta["kilt"]``.  ``output`` may be absent (KILT test sets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question
from anygrain.corpus.readers._io import (
    dedupe,
    dict_elements,
    first_json_object,
    iter_jsonl,
    question_reader,
    require,
    require_id,
    require_text,
)


def sniff(path: Path) -> bool:
    """First line has an ``id`` and an ``input`` string or an ``output`` list."""
    obj = first_json_object(path)
    return (
        obj is not None
        and "id" in obj
        and (isinstance(obj.get("input"), str) or isinstance(obj.get("output"), list))
        and "question" not in obj
    )


def question_from_kilt(obj: dict[str, Any], *, path: Path, line: int) -> Question:
    """One KILT record; answers and page ids deduplicated in order."""
    qid = require_id(obj, "id", path=path, line=line)
    text = require_text(obj, "input", path=path, line=line)
    outputs = require(obj, "output", list, path=path, line=line) if "output" in obj else []
    answers: list[str] = []
    gold: list[str] = []
    titles: list[str] = []
    # KILT's R-precision is the max over provenance sets, one set per output.
    gold_sets: list[list[str]] = []
    for where, out in dict_elements(outputs, "output", path=path, line=line):
        if "answer" in out:
            answers.append(require(out, "answer", str, path=path, line=line, where=where))
        provenance = (
            require(out, "provenance", list, path=path, line=line, where=where)
            if "provenance" in out
            else []
        )
        out_ids: list[str] = []
        for p_where, prov in dict_elements(provenance, f"{where}.provenance", path=path, line=line):
            pid = require_id(prov, "wikipedia_id", path=path, line=line, where=p_where)
            gold.append(pid)
            out_ids.append(pid)
            if "title" in prov:
                titles.append(require(prov, "title", str, path=path, line=line, where=p_where))
        if out_ids:
            gold_sets.append(dedupe(out_ids))
    meta: dict[str, object] = {}
    if gold_sets:
        meta["gold_sets"] = gold_sets
    if titles:
        meta["titles"] = dedupe(titles)
    if "meta" in obj:
        meta["kilt"] = obj["meta"]
    return Question(
        id=qid, text=text.strip(), answers=dedupe(answers), gold=dedupe(gold), meta=meta
    )


# All records of a KILT file, ids unique.
read_questions = question_reader(iter_jsonl, question_from_kilt, format="kilt")


register(
    Format(
        name="kilt",
        description="KILT JSONL: id, input, output[].answer / provenance[].wikipedia_id",
        sniff=sniff,
        read_questions=read_questions,
        priority=30,
    )
)
