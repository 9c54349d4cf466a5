"""Multi-CPR (Chinese passage retrieval: ecom, video, medical).

Questions: ``multicpr:FILE.query.txt`` reads ``qid<TAB>query`` lines and the
qrels beside it (``dev.query.txt`` -> ``qrels.dev.tsv`` or ``qrels.dev.txt``, lines
``qid<TAB>0<TAB>pid<TAB>relevance``, or TREC's whitespace-separated ``qid 0 pid rel`` as
Anserini and Pyserini distribute them); ``multicpr:DOMAIN_DIR`` reads the dev
split.  Ids stay strings as in the files.  Queries without judgements are kept
(not answerable).

Documents: the corpus ``corpus.tsv`` (``pid<TAB>passage``, also MS MARCO's
``collection.tsv``), each row a document and passage with ``doc_id`` = pid;
a domain directory reads its ``corpus.tsv``.  The corpus is streamed.

Merging domains: every domain numbers its queries and passages on its own (pid 260
of ecom is not pid 260 of video), so a merged set puts the domain in front of every
id, the same way in the corpus, the queries and the qrels: ``prefix="ecom-"`` gives
query ``ecom-200000`` judged against passage ``ecom-260``.
:func:`read_multicpr_questions` and :func:`read_multicpr_documents` take that
``prefix``; ``multicpr:ROOT``, a directory whose subdirectories are domains (``ecom/``,
``video/``, ``medical/``), reads them all merged, each prefixed with its name and a
dash (dev split; the corpora from each domain's ``corpus.tsv``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from anygrain.corpus.formats import Format, register
from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.readers._io import iter_text_lines, no_records, split_tsv
from anygrain.corpus.readers.dpr_tsv import read_pair_documents, sniff_pairs
from anygrain.corpus.readers.qrels import QrelsLayout, read_judgements
from anygrain.corpus.records import SourceDocument
from anygrain.errors import ErrorLog, InputError

QUERY_SUFFIX = ".query.txt"
DEFAULT_SPLIT = "dev"
CORPUS_NAME = "corpus.tsv"
# Multi-CPR names its qrels .tsv; Anserini and Pyserini distribute them as .txt
QRELS_SUFFIXES = (".tsv", ".txt")


def _is_domain_dir(path: Path) -> bool:
    return path.is_dir() and (any(path.glob(f"*{QUERY_SUFFIX}")) or any(path.glob("qrels.*.tsv")))


def domain_dirs(root: Path) -> list[Path]:
    """The domain subdirectories of a Multi-CPR root, by name."""
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if _is_domain_dir(d))


def _is_root(path: Path) -> bool:
    return path.is_dir() and not _is_domain_dir(path) and bool(domain_dirs(path))


def domain_prefix(domain_dir: Path) -> str:
    """The id prefix of a domain in a merged set: its directory name and a dash."""
    return f"{domain_dir.name}-"


def sniff(path: Path) -> bool:
    """A domain directory (or a root of them), a ``*.query.txt`` file, or a two-column
    ``pid<TAB>passage`` file."""
    if path.is_dir():
        return _is_domain_dir(path) or _is_root(path)
    return path.name.endswith(QUERY_SUFFIX) or sniff_pairs(path)


def locate(path: Path) -> tuple[Path, Path]:
    """``(query_file, qrels_file)`` for a query file or a domain directory (dev split)."""
    if path.is_dir():
        query = path / f"{DEFAULT_SPLIT}{QUERY_SUFFIX}"
        if not query.is_file():
            raise InputError(f"no {query.name} in this Multi-CPR directory", path=str(path))
    else:
        query = path
    if not query.name.endswith(QUERY_SUFFIX):
        raise InputError(
            f"expected a Multi-CPR query file named SPLIT{QUERY_SUFFIX} or a domain directory",
            path=str(path),
        )
    split = query.name[: -len(QUERY_SUFFIX)]
    names = [f"qrels.{split}{suffix}" for suffix in QRELS_SUFFIXES]
    for name in names:
        if (query.parent / name).is_file():
            return query, query.parent / name
    raise InputError(f"no qrels file {' or '.join(names)} beside the queries", path=str(query))


def read_multicpr_questions(path: Path, errors: ErrorLog, prefix: str = "") -> Questions:
    """Queries and their qrels; question ids are ``prefix + qid`` and judged passage ids
    ``prefix + pid`` (to match a corpus read with the same prefix)."""
    query_path, qrels_path = locate(path)
    found: dict[str, Question] = {}
    for line, text in iter_text_lines(query_path, errors):
        if not text.strip():
            continue
        fields = split_tsv(text, 2)
        problem = None
        if len(fields) != 2:
            problem = InputError(
                f"expected 2 tab-separated columns (qid, query), got {len(fields)}",
                path=str(query_path),
                line=line,
                field="query" if len(fields) < 2 else None,
            )
        elif not fields[0].strip():
            problem = InputError("empty id", path=str(query_path), line=line, field="qid")
        elif not fields[1].strip():
            problem = InputError("empty text", path=str(query_path), line=line, field="query")
        elif fields[0].strip() in found:
            problem = InputError(
                f"duplicate query id {fields[0].strip()!r}",
                path=str(query_path),
                line=line,
                field="qid",
            )
        if problem is not None:
            errors.handle(problem)
            continue
        qid = fields[0].strip()
        found[qid] = Question(id=prefix + qid, text=fields[1].strip())
    judgements = read_judgements(
        qrels_path, QrelsLayout.MULTICPR, errors, queries=found, queries_name=query_path.name
    )
    for qid, judged in judgements.items():
        q = found[qid]
        for pid, rel in judged.grades.items():
            q.qrels[prefix + pid] = rel
            if rel > 0:
                q.gold.append(prefix + pid)
    if not found:
        raise no_records(query_path, "queries")
    return Questions(list(found.values()), source=str(query_path), format="multicpr")


def read_questions(path: Path, errors: ErrorLog) -> Questions:
    """Registered reader: no id prefix; a root of domains is merged with prefixes."""
    if _is_root(path):
        items = []
        for d in domain_dirs(path):
            items.extend(read_multicpr_questions(d, errors, prefix=domain_prefix(d)).items)
        return Questions(items, source=str(path), format="multicpr")
    return read_multicpr_questions(path, errors)


def read_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    """The corpus file, ``corpus.tsv`` in a domain directory, or every domain's
    ``corpus.tsv`` of a root, merged with prefixes."""
    if _is_root(path):
        return _merged_documents(path, errors)
    return read_multicpr_documents(path, errors)


def _merged_documents(root: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    for d in domain_dirs(root):
        yield from read_multicpr_documents(d, errors, prefix=domain_prefix(d))


def read_multicpr_documents(
    path: Path, errors: ErrorLog, prefix: str = ""
) -> Iterator[SourceDocument]:
    """The corpus file, or ``corpus.tsv`` in a domain directory; ids are ``prefix + pid``."""
    docs = _corpus_documents(path, errors)
    if not prefix:
        return docs
    return (_prefixed(doc, prefix) for doc in docs)


def _prefixed(doc: SourceDocument, prefix: str) -> SourceDocument:
    doc.doc_id = prefix + doc.doc_id
    for sp in doc.passages or []:
        if sp.id is not None:
            sp.id = prefix + sp.id
    return doc


def _corpus_documents(path: Path, errors: ErrorLog) -> Iterator[SourceDocument]:
    if path.is_dir():
        corpus = path / CORPUS_NAME
        if not corpus.is_file():
            raise InputError(
                f"no {CORPUS_NAME} in this Multi-CPR directory (the corpus is downloaded "
                "separately); pass the corpus file",
                path=str(path),
            )
        path = corpus
    return read_pair_documents(path, errors)


register(
    Format(
        name="multicpr",
        description="Multi-CPR: SPLIT.query.txt + qrels.SPLIT.tsv (or a domain dir); corpus.tsv",
        sniff=sniff,
        read_documents=read_documents,
        read_questions=read_questions,
        priority=30,
    )
)
