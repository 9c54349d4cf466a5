"""Training examples for DPR: a question, its answers, one positive passage, hard negatives.

Two sources:

* DPR retriever JSON / JSONL (``dpr-train``): ``positive_ctxs[0]`` is the positive and
  ``hard_negative_ctxs`` the hard negatives, as DPR trains.
* Any format with documents *and* questions whose ``gold`` names a passage
  (SQuAD-format JSON and its relatives): the question's source paragraph is the positive.

Every passage seen goes into one pool keyed by id (the training corpus), which the
trainer indexes with BM25 to mine hard negatives where the data brings none, and
which query-side training encodes once.  :func:`mine_bm25_hard_negatives` is DPR's
recipe: the top BM25 passages that do not contain an answer and are not the positive.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from anygrain.corpus.formats import Source, parse_source
from anygrain.corpus.records import SourceDocument, Span
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.eval.answers import AnswerMatcher
from anygrain.utils.progress import progress_bar

Ctx = tuple[str, str, str]  # (passage id, title, text)

DPR_TRAIN_FORMAT = "dpr-train"


@dataclass
class TrainExample:
    """One question with its positive passage and (possibly no) hard negatives."""

    qid: str
    question: str
    answers: list[str]
    positive: Ctx
    hard_negatives: list[Ctx] = field(default_factory=list)
    answers_are_regex: bool = False


@dataclass
class PassagePool:
    """Every distinct passage of the training data, in first-seen order.

    Two sources may reuse an id for different passages; the later one is renamed
    ``id#2`` (``#3``...) so ids stay unique and nothing is silently merged.
    """

    passages: dict[str, Ctx] = field(default_factory=dict)
    renamed: int = 0
    _by_content: dict[tuple[str, str, str], str] = field(default_factory=dict, repr=False)

    def add(self, pid: str | None, title: str, text: str) -> Ctx:
        if not pid:
            # DPR files may omit ids: derive a stable one from the content.
            pid = "sha1:" + hashlib.sha1(f"{title}\x00{text}".encode()).hexdigest()[:16]
        key = (pid, title, text)
        if key in self._by_content:
            return self.passages[self._by_content[key]]
        new_id, n = pid, 1
        while new_id in self.passages:
            n += 1
            new_id = f"{pid}#{n}"
        if new_id != pid:
            self.renamed += 1
        ctx = (new_id, title, text)
        self.passages[new_id] = ctx
        self._by_content[key] = new_id
        return ctx

    def __len__(self) -> int:
        return len(self.passages)

    def subset(self, ids: set[str]) -> PassagePool:
        """The passages in ``ids``, in pool order (ids stay as they are)."""
        out = PassagePool(renamed=self.renamed)
        out.passages = {pid: c for pid, c in self.passages.items() if pid in ids}
        out._by_content = {k: pid for k, pid in self._by_content.items() if pid in ids}
        return out

    def ids(self) -> list[str]:
        return list(self.passages)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for pid, title, text in self.passages.values():
            h.update(f"{pid}\x00{title}\x00{text}\x01".encode())
        return h.hexdigest()[:16]

    def documents(self) -> Iterator[SourceDocument]:
        """One document per passage, pre-cut, for :meth:`CorpusStore.build`."""
        for pid, title, text in self.passages.values():
            yield SourceDocument(
                doc_id=pid, title=title, text=text, passages=[Span(0, len(text), id=pid)]
            )


@dataclass
class TrainingData:
    examples: list[TrainExample]
    pool: PassagePool
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def fingerprint(self) -> str:
        """Identifies the examples (and their order), so a checkpoint only resumes on the same data."""
        h = hashlib.sha256(self.pool.fingerprint().encode())
        for ex in self.examples:
            h.update(
                json.dumps(
                    [ex.qid, ex.question, ex.positive[0], [c[0] for c in ex.hard_negatives]]
                ).encode()
            )
        return h.hexdigest()[:16]


def _source(spec: str) -> Source:
    src = parse_source(spec, want="questions")
    fmt = src.format
    if fmt.name != DPR_TRAIN_FORMAT and (fmt.read_documents is None or fmt.read_questions is None):
        raise AnygrainError(
            f"{src.path}: format '{fmt.name}' cannot train a retriever: it needs positive passages "
            f"(use {DPR_TRAIN_FORMAT} JSON/JSONL, or SQuAD-format JSON with paragraphs and questions)"
        )
    return src


def _add_dpr(src: Source, data: TrainingData, errors: ErrorLog) -> None:
    from anygrain.corpus.readers.dpr_train import read_dpr_training

    for ex in read_dpr_training(src.path, errors):
        if not ex.positives:
            data.dropped["no positive passage"] = data.dropped.get("no positive passage", 0) + 1
            continue
        pos = data.pool.add(*ex.positives[0])
        hard = [data.pool.add(*c) for c in ex.hard_negatives]
        data.examples.append(
            TrainExample(f"{src.path.name}:{ex.line}", ex.question, list(ex.answers), pos, hard)
        )


def _add_documents_and_questions(src: Source, data: TrainingData, errors: ErrorLog) -> None:
    local: dict[str, Ctx] = {}
    for doc in src.documents(errors):
        for sp in doc.passages or []:
            if sp.id is None:
                continue
            local[sp.id] = data.pool.add(
                sp.id, sp.title if sp.title is not None else doc.title, doc.text[sp.start : sp.end]
            )
    for q in src.questions(errors):
        if not q.answers:
            # SQuAD 2.0 unanswerable questions: the paragraph is not a positive for them.
            data.dropped["no answers"] = data.dropped.get("no answers", 0) + 1
            continue
        gold = next((local[g] for g in q.gold if g in local), None)
        if gold is None:
            data.dropped["gold passage not found"] = (
                data.dropped.get("gold passage not found", 0) + 1
            )
            continue
        data.examples.append(
            TrainExample(
                f"{src.path.name}:{q.id}", q.text, list(q.answers), gold, [], q.answers_are_regex
            )
        )


def load_training_data(
    specs: Sequence[str],
    *,
    errors: ErrorLog | None = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> TrainingData:
    """Examples from every ``FORMAT:PATH`` (or ``PATH``) in ``specs``, in file order.

    ``max_examples`` keeps a seeded random subset (in file order), so a quick run
    still sees every source, and only the passages those examples name.  Raises when nothing is left to train on.
    """
    errors = errors or ErrorLog()
    data = TrainingData([], PassagePool())
    for spec in specs:
        src = _source(spec)
        if src.format.name == DPR_TRAIN_FORMAT:
            _add_dpr(src, data, errors)
        else:
            _add_documents_and_questions(src, data, errors)
    if max_examples is not None and len(data.examples) > max_examples:
        keep = np.sort(np.random.default_rng(seed).permutation(len(data.examples))[:max_examples])
        data.examples = [data.examples[i] for i in keep]
        # A quick run should not pay for indexing or encoding passages it never uses.
        used = {c[0] for ex in data.examples for c in (ex.positive, *ex.hard_negatives)}
        data.pool = data.pool.subset(used)
    if not data.examples:
        raise AnygrainError(
            f"no training examples in {', '.join(specs)}"
            + (f" (dropped: {data.dropped})" if data.dropped else "")
        )
    return data


@dataclass
class MiningReport:
    """How BM25 mining went; ``without`` lists the questions that got no hard negative."""

    searched: int = 0
    mined: int = 0
    without: list[str] = field(default_factory=list)

    @property
    def n_without(self) -> int:
        return len(self.without)

    def summary(self) -> str:
        return f"BM25 hard negatives for {self.searched - self.n_without}/{self.searched} questions ({self.mined} passages); {self.n_without} got none"


def mine_bm25_hard_negatives(
    examples: Sequence[TrainExample],
    store: CorpusStore,
    bm25_index: object,
    n: int = 1,
    depth: int = 20,
    *,
    only_missing: bool = True,
    batch_size: int = 1024,
    progress: bool = False,
) -> tuple[list[TrainExample], MiningReport]:
    """Examples with up to ``n`` BM25 hard negatives each (DPR's recipe).

    For each question, walk the top ``depth`` BM25 passages and keep those that are
    not the positive (by id or identical text) and do not contain an answer
    (DPR's ``has_answer``).  ``only_missing`` leaves examples that already carry hard
    negatives (from DPR files) as they are.  ``bm25_index`` needs ``search_rows``.
    """
    out = list(examples)
    report = MiningReport()
    todo = [i for i, ex in enumerate(out) if not (only_missing and ex.hard_negatives)]
    if n < 1 or not todo:
        return out, report
    search_rows = bm25_index.search_rows  # type: ignore[attr-defined]
    batches = [todo[s : s + batch_size] for s in range(0, len(todo), batch_size)]
    for batch in progress_bar(
        batches, desc="mining BM25 hard negatives", unit="batch", disable=not progress
    ):
        rows, _ = search_rows([out[i].question for i in batch], depth)
        needed = np.unique(rows[rows >= 0])
        ids = dict(zip(needed.tolist(), store.column("id", needed), strict=True))
        titles = dict(zip(needed.tolist(), store.titles(needed), strict=True))
        texts = dict(zip(needed.tolist(), store.texts(needed), strict=True))
        for i, hits in zip(batch, rows, strict=True):
            ex = out[i]
            matcher = AnswerMatcher(ex.answers, regex=ex.answers_are_regex)
            pos_text = ex.positive[2].strip()
            found: list[Ctx] = []
            for r in hits.tolist():
                if r < 0:
                    break
                if (
                    ids[r] == ex.positive[0]
                    or texts[r].strip() == pos_text
                    or matcher.in_text(texts[r])
                ):
                    continue
                found.append((ids[r], titles[r], texts[r]))
                if len(found) == n:
                    break
            report.searched += 1
            report.mined += len(found)
            if not found:
                report.without.append(ex.qid)
            out[i] = replace(ex, hard_negatives=found)
    return out, report
