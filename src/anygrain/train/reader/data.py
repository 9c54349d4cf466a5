"""Reader training data: SQuAD-format questions, their positive paragraphs and the
same-file paragraphs negatives are drawn from."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from anygrain.corpus.formats import parse_source
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.reader.spans import is_boundary


@dataclass
class ReaderExample:
    """A question, its positive passage and the character spans of its gold answers there."""

    qid: str
    question: str
    answers: list[str]
    spans: list[tuple[int, int]]  # the annotated span(s) first, then other occurrences
    positive: int  # passage index
    file: int
    article: int
    retrieved: list[int] = field(default_factory=list)  # retrieved negatives, best first


@dataclass
class ReaderData:
    """Training passages (by index), their files and articles, and the examples."""

    titles: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    files: list[list[int]] = field(default_factory=list)  # passage indices of each file
    articles: list[list[int]] = field(default_factory=list)  # passage indices of each article
    examples: list[ReaderExample] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    _by_content: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    def add_passage(self, title: str, text: str) -> int:
        key = (title, text)
        if key not in self._by_content:
            self._by_content[key] = len(self.texts)
            self.titles.append(title)
            self.texts.append(text)
        return self._by_content[key]

    def fingerprint(self) -> str:
        """Identifies the examples, passages and negatives: a checkpoint resumes only on the same."""
        h = hashlib.sha256()
        for t, x in zip(self.titles, self.texts, strict=True):
            h.update(f"{t}\x00{x}\x01".encode())
        for ex in self.examples:
            h.update(
                json.dumps(
                    [
                        ex.qid,
                        ex.question,
                        ex.answers,
                        ex.spans,
                        ex.positive,
                        ex.file,
                        ex.article,
                        ex.retrieved,
                    ],
                    ensure_ascii=False,
                ).encode()
            )
        return h.hexdigest()[:16]


def gold_char_spans(
    text: str, answers: Sequence[str], starts: Sequence[int]
) -> list[tuple[int, int]]:
    """Character spans of the gold answers in ``text``: the annotated offsets first
    (when the text there matches), then every other case-insensitive occurrence of
    an answer that starts and ends on word boundaries."""
    spans: list[tuple[int, int]] = []

    def add(s: int, e: int) -> None:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if s < e and (s, e) not in spans:
            spans.append((s, e))

    for i, a in enumerate(answers):
        s = starts[i] if i < len(starts) else -1
        if s >= 0 and a and text[s : s + len(a)] == a:
            add(s, s + len(a))
    for a in answers:
        needle = a.strip()
        if not needle:
            continue
        for m in re.finditer(re.escape(needle), text, flags=re.IGNORECASE):
            if is_boundary(text, m.start()) and is_boundary(text, m.end()):
                add(m.start(), m.end())
    return spans


def load_reader_data(
    specs: Sequence[str],
    *,
    errors: ErrorLog | None = None,
    max_examples: int | None = None,
    seed: int = 12345,
) -> ReaderData:
    """Examples from SQuAD-format sources (anything with documents and gold-passage questions)."""
    errors = errors or ErrorLog()
    data = ReaderData()
    dropped = {"unanswerable": 0, "no_gold_passage": 0, "answer_not_found": 0}
    for fi, spec in enumerate(specs):
        src = parse_source(spec, want="questions")
        if src.format.read_documents is None:
            raise AnygrainError(
                f"{src.path}: format '{src.format.name}' has no passages to read; the reader "
                "trains on SQuAD-format data (questions with their paragraphs)"
            )
        by_pid: dict[str, tuple[int, int]] = {}
        file_passages: list[int] = []
        for doc in src.documents(errors):
            article = len(data.articles)
            members: list[int] = []
            for sp in doc.passages or []:
                text = doc.text[sp.start : sp.end]
                idx = data.add_passage(sp.title if sp.title is not None else doc.title, text)
                members.append(idx)
                if sp.id is not None:
                    by_pid[str(sp.id)] = (idx, article)
            data.articles.append(members)
            file_passages.extend(members)
        data.files.append(file_passages)
        for q in src.questions(errors):
            if not q.answers or q.answers_are_regex:
                dropped["unanswerable"] += 1
                continue
            if not q.gold or q.gold[0] not in by_pid:
                dropped["no_gold_passage"] += 1
                continue
            idx, article = by_pid[q.gold[0]]
            spans = gold_char_spans(data.texts[idx], q.answers, q.answer_starts)
            if not spans:
                dropped["answer_not_found"] += 1
                continue
            data.examples.append(
                ReaderExample(q.id, q.text, list(q.answers), spans, idx, fi, article)
            )
    if max_examples is not None and max_examples < len(data.examples):
        keep = np.sort(
            np.random.default_rng(seed).choice(len(data.examples), max_examples, replace=False)
        )
        data.examples = [data.examples[i] for i in keep]
    data.dropped = dropped
    if not data.examples:
        raise AnygrainError(
            f"no usable training questions in {', '.join(specs)} (dropped: {dropped})"
        )
    return data
