"""Training data for phrase models: passages as token windows, questions aligned to spans.

SQuAD-format sources (SQuAD, SQuAD-Shifts, CMRC 2018, DRCD, ...) give passages and
questions with character offsets of their answers.  Each passage is tokenized once
into windows; each answer is aligned to word-boundary tokens of the window where it
has most context.  Answers that cannot be aligned are counted by reason (see
:class:`~anygrain.phrase.tokens.AlignStats`) and a question with no aligned answer
is left out -- reported, never silently mislabelled.

Batches group questions by window, so a window is encoded once for all of its
questions in the batch (SQuAD has several questions per paragraph).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anygrain.corpus.formats import parse_source
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.phrase.model import PhraseEncoder
from anygrain.phrase.tokens import AlignStats, Window, align_answer


@dataclass
class SpanExample:
    """One training question: its gold span as token positions in one window."""

    qid: str
    question: str
    window: int
    start: int
    end: int


@dataclass
class PhraseTrainData:
    passages: list[tuple[str, str, str]]  # (key, title, text)
    windows: list[Window]
    examples: list[SpanExample]
    gold_starts: list[set[int]]  # per window: positions of every aligned answer start
    gold_ends: list[set[int]]
    align: AlignStats = field(default_factory=AlignStats)
    questions_seen: int = 0
    questions_dropped: int = 0  # no answer could be aligned
    questions_skipped: dict[str, int] = field(default_factory=dict)  # unanswerable, no passage
    # every question not trained on: {"source", "id", "reason"}, so none is lost unnamed
    not_used: list[dict[str, str]] = field(default_factory=list)
    # BM25 hard-negative windows per question id (empty unless mined: add_hard_negatives)
    hard_windows: dict[str, list[int]] = field(default_factory=dict)

    def answer_text(self, e: SpanExample) -> str:
        """The passage text of an example's gold span."""
        w = self.windows[e.window]
        return self.passages[w.passage][2][int(w.cs[e.start]) : int(w.ce[e.end])]

    def add_hard_negatives(self, n: int, *, lang: str = "en", progress: bool = False) -> int:
        """Mine ``n`` BM25 hard-negative passages per question (their first window is what
        training encodes); returns how many questions got at least one."""
        from anygrain.train.phrase.hard_negatives import mine_hard_passages

        first: dict[int, int] = {}
        for wi, w in enumerate(self.windows):
            first.setdefault(w.passage, wi)
        mined = mine_hard_passages(
            [(title, text) for _, title, text in self.passages],
            [
                (e.qid, self.windows[e.window].passage, e.question, self.answer_text(e))
                for e in self.examples
            ],
            n=n,
            lang=lang,
            progress=progress,
        )
        self.hard_windows = {q: [first[p] for p in ps] for q, ps in mined.items()}
        return len(self.hard_windows)

    def fingerprint(self) -> str:
        """Identifies the examples and their windows, so a checkpoint never resumes other data."""
        h = hashlib.sha256()
        for e in self.examples:
            w = self.windows[e.window]
            h.update(f"{e.qid}\x00{e.question}\x00{e.start}\x00{e.end}\x00".encode())
            h.update(w.input_ids.tobytes())
        return h.hexdigest()[:16]

    def report(self) -> dict[str, Any]:
        return {
            "passages": len(self.passages),
            "windows": len(self.windows),
            "questions": self.questions_seen,
            "examples": len(self.examples),
            "questions_dropped_unaligned": self.questions_dropped,
            "questions_skipped": dict(self.questions_skipped),
            "answers": self.align.to_dict(),
        }


#: a question read for training: (id, text, passage index, answers, answer starts)
RawQuestion = tuple[str, str, int, list[str], list[int]]


@dataclass
class _Read:
    """What the sources hold before alignment: passages, questions, and what was skipped."""

    passages: list[tuple[str, str, str]] = field(default_factory=list)
    raw: list[RawQuestion] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    not_used: list[dict[str, str]] = field(default_factory=list)

    def skip(self, spec: str, qid: str, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.not_used.append({"source": spec, "id": qid, "reason": reason})


def load_phrase_data(
    specs: Sequence[str],
    model: PhraseEncoder,
    *,
    errors: ErrorLog | None = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> PhraseTrainData:
    """Read SQuAD-format sources (``FORMAT:PATH`` or ``PATH``) into span examples."""
    read = _read_sources(specs, errors)
    if not read.raw:
        raise AnygrainError(
            "no training questions with answer offsets found; phrase training needs "
            "SQuAD-format data (squad:PATH)"
        )
    if max_examples is not None and max_examples < len(read.raw):
        _sample(read, max_examples, seed)
    passages, raw = read.passages, read.raw
    windows = model.windows([p[2] for p in passages], [p[1] for p in passages])
    data = PhraseTrainData(
        passages=passages,
        windows=windows,
        examples=[],
        gold_starts=[set() for _ in windows],
        gold_ends=[set() for _ in windows],
        questions_seen=len(raw),
        questions_skipped=read.skipped,
        not_used=read.not_used,
    )
    _align(data, raw, specs)
    if not data.examples:
        raise AnygrainError(f"no training answer could be aligned: {data.align.to_dict()}")
    return data


def _read_sources(specs: Sequence[str], errors: ErrorLog | None) -> _Read:
    """Every source's passages (once each, keyed ``FILE_INDEX:PASSAGE_ID``) and its
    questions with answer offsets in one of them; the others are skipped by reason."""
    read = _Read()
    pindex: dict[str, int] = {}
    for fi, spec in enumerate(specs):
        for doc in parse_source(spec).documents(errors):
            for sp in doc.passages or ():
                key = f"{fi}:{sp.id}"
                if key in pindex:
                    continue
                pindex[key] = len(read.passages)
                title = sp.title if sp.title is not None else doc.title
                read.passages.append((key, title, doc.text[sp.start : sp.end]))
        for q in parse_source(spec, want="questions").questions(errors):
            if not q.answers or not q.answer_starts:
                read.skip(spec, q.id, "no_answer_offsets")
                continue
            key = f"{fi}:{q.gold[0]}" if q.gold else ""
            if key not in pindex:
                read.skip(spec, q.id, "passage_not_found")
                continue
            read.raw.append(
                (f"{fi}:{q.id}", q.text, pindex[key], list(q.answers), list(q.answer_starts))
            )
    return read


def _sample(read: _Read, n: int, seed: int) -> None:
    """Keep ``n`` questions taken passage by passage, and only the passages they use."""
    raw = [read.raw[i] for i in sample_by_passage([r[2] for r in read.raw], n, seed)]
    used = sorted({r[2] for r in raw})
    remap = {old: new for new, old in enumerate(used)}
    read.passages = [read.passages[i] for i in used]
    read.raw = [(a, b, remap[c], d, e) for a, b, c, d, e in raw]


def _align(data: PhraseTrainData, raw: list[RawQuestion], specs: Sequence[str]) -> None:
    """Align each question's answers to its passage's windows: every aligned answer is a
    gold start and end, the first one the example; a question with none is dropped."""
    by_passage: list[list[int]] = [[] for _ in data.passages]
    for wi, w in enumerate(data.windows):
        by_passage[w.passage].append(wi)
    stats = data.align
    for qid, text, p, answers, starts in raw:
        first = None
        for a, s in zip(answers, starts, strict=False):
            al = align_answer(data.passages[p][2], data.windows, by_passage[p], a, s, stats)
            if al is None:
                continue
            data.gold_starts[al.window].add(al.start)
            data.gold_ends[al.window].add(al.end)
            if first is None:
                first = SpanExample(qid, text, al.window, al.start, al.end)
        if first is None:
            data.questions_dropped += 1
            file_no, orig = qid.split(":", 1)  # training ids are "FILE_INDEX:QUESTION_ID"
            data.not_used.append(
                {
                    "source": specs[int(file_no)],
                    "id": orig,
                    "reason": f"unaligned: {stats.last_failure}",
                }
            )
        else:
            data.examples.append(first)


def sample_by_passage(owner: list[int], n: int, seed: int) -> np.ndarray:
    """Indices of ``n`` questions taken passage by passage, passages in seeded random order.

    Whole passages rather than random questions: training encodes a passage once for
    all its questions, so a random question subset (few questions per passage instead of
    the several of SQuAD-style data) made a step dearer per question and
    a subset no longer looked like the full data.  Only the last passage is cut to make
    exactly ``n``.
    """
    by_passage: dict[int, list[int]] = {}
    for i, p in enumerate(owner):
        by_passage.setdefault(p, []).append(i)
    keys = sorted(by_passage)
    picked: list[int] = []
    for k in np.random.default_rng(seed).permutation(len(keys)):
        picked.extend(by_passage[keys[int(k)]])
        if len(picked) >= n:
            break
    return np.sort(np.asarray(picked[:n], dtype=np.int64))


def plan_epoch(
    data: PhraseTrainData, epoch: int, seed: int, batch_size: int, *, bucket: int = 64
) -> list[list[int]]:
    """Batches of example indices for one epoch.

    Windows come in a seeded random order; within chunks of ``bucket`` batches' worth
    of windows they are sorted by length, so a batch pads little (padding was much of
    the compute on SQuAD-style paragraphs); the batches are then shuffled.  A
    window's questions stay together (split only when more than a batch).
    """
    by_window: dict[int, list[int]] = {}
    for i, e in enumerate(data.examples):
        by_window.setdefault(e.window, []).append(i)
    keys = sorted(by_window)
    rng = np.random.default_rng([seed, epoch])
    order = [keys[int(o)] for o in rng.permutation(len(keys))]
    per_batch = max(1.0, batch_size / (len(data.examples) / max(len(keys), 1)))
    chunk = max(1, int(bucket * per_batch)) if bucket > 0 else len(order)
    batches: list[list[int]] = []
    for c in range(0, len(order), chunk):
        part = sorted(order[c : c + chunk], key=lambda w: -len(data.windows[w]))
        cur: list[int] = []
        for w in part:
            items = by_window[w]
            for j in range(0, len(items), batch_size):
                piece = items[j : j + batch_size]
                if cur and len(cur) + len(piece) > batch_size:
                    batches.append(cur)
                    cur = []
                cur = cur + piece
        if cur:
            batches.append(cur)
    return [batches[int(i)] for i in rng.permutation(len(batches))]
