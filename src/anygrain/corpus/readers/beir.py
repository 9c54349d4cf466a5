"""A BEIR dataset directory: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{split}.tsv``.

Documents come from ``corpus.jsonl`` (``_id``, ``title``, ``text``; other
fields such as ``metadata`` kept in ``meta``), each document one passage whose
id is ``_id``.  Questions are the queries named in one qrels split, in
``queries.jsonl`` order, with their graded ``qrels`` (``gold`` = ids with score
> 0).  ``beir:DIR`` takes ``qrels/test.tsv``, else ``dev.tsv``, else
``train.tsv``; to choose a split, pass the qrels file itself
(``beir:DIR/qrels/dev.tsv``).  Qrels lines are ``query-id corpus-id score``
(a TREC ``qid 0 docid score`` line is accepted too), tab- or whitespace-separated; the
header is optional.
Compressed files are not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.readers._io import (
    iter_jsonl,
    no_records,
    require_id,
    require_text,
)
from anygrain.corpus.readers.jsonl import iter_documents
from anygrain.corpus.readers.qrels import QrelsLayout, read_judgements
from anygrain.corpus.records import SourceDocument
from anygrain.errors import ErrorLog, InputError

SPLITS = ("test", "dev", "train")


def _root(path: Path) -> Path:
    """The dataset directory for ``path`` (the directory, or a file inside it or its qrels/)."""
    if path.is_dir():
        return path
    if path.parent.name == "qrels":
        return path.parent.parent
    return path.parent


def _is_root(d: Path) -> bool:
    return (d / "corpus.jsonl").is_file() or (
        (d / "queries.jsonl").is_file() and (d / "qrels").is_dir()
    )


def sniff(path: Path) -> bool:
    """A directory with corpus.jsonl (or queries.jsonl and qrels/), or such a file inside one."""
    if path.is_dir():
        return _is_root(path)
    if path.name in ("corpus.jsonl", "queries.jsonl"):
        return (path.parent / "qrels").is_dir()
    return path.suffix == ".tsv" and path.parent.name == "qrels" and _is_root(path.parent.parent)


def qrels_file(path: Path) -> Path:
    """The qrels file ``path`` names or implies: an explicit file, else test, dev, train."""
    if path.is_file() and path.suffix == ".tsv":
        return path
    root = _root(path)
    for split in SPLITS:
        candidate = root / "qrels" / f"{split}.tsv"
        if candidate.is_file():
            return candidate
    raise InputError(
        "no qrels file: looked for qrels/test.tsv, qrels/dev.tsv, qrels/train.tsv",
        path=str(root),
    )


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """``corpus.jsonl`` of the dataset ``path`` is in (or names)."""
    corpus = _root(path) / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError("no corpus.jsonl in this BEIR directory", path=str(_root(path)))
    return iter_documents(corpus, errors, passages=True)


def read_questions(path: Path, errors: ErrorLog) -> Questions:
    """The queries judged in one qrels split (see the module doc for which)."""
    root = _root(path)
    queries_path = root / "queries.jsonl"
    if not queries_path.is_file():
        raise InputError("no queries.jsonl in this BEIR directory", path=str(root))
    qrels_path = qrels_file(path)
    qrels = read_judgements(qrels_path, QrelsLayout.BEIR, errors)
    found: dict[str, Question] = {}
    for line, obj in iter_jsonl(queries_path, errors):
        try:
            qid = require_id(obj, "_id", path=queries_path, line=line)
            text = require_text(obj, "text", path=queries_path, line=line)
        except InputError as e:
            errors.handle(e)
            continue
        if qid in found:
            errors.handle(
                InputError(
                    f"duplicate query id {qid!r}", path=str(queries_path), line=line, field="_id"
                )
            )
            continue
        meta = {k: v for k, v in obj.items() if k not in ("_id", "text")}
        found[qid] = Question(id=qid, text=text, meta=meta)
    for qid, judged in qrels.items():
        if qid not in found:
            errors.handle(
                InputError(
                    f"query id {qid!r} is not in queries.jsonl",
                    path=str(qrels_path),
                    line=judged.line,
                    field="query-id",
                )
            )
    out: list[Question] = []
    for qid, q in found.items():
        if qid not in qrels:
            continue  # a query of another split
        q.qrels = qrels[qid].grades
        q.gold = [d for d, s in q.qrels.items() if s > 0]
        out.append(q)
    if not out:
        raise no_records(qrels_path, "judged queries")
    return Questions(out, source=str(qrels_path), format="beir")


register(
    Format(
        name="beir",
        description="BEIR directory: corpus.jsonl, queries.jsonl, qrels/{test,dev,train}.tsv",
        sniff=sniff,
        read_documents=read_documents,
        read_questions=read_questions,
        priority=40,
    )
)
