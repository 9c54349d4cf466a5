"""Training examples for DPR: a question, its answers, one positive passage, hard negatives.

Two sources:

* DPR retriever JSON / JSONL (``dpr-train``): ``positive_ctxs[0]`` is the positive and
  ``hard_negative_ctxs`` the hard negatives, as DPR trains.
* Any format with documents *and* questions.  What a question carries picks its
  :class:`Supervision`: judged passages (qrels with a grade > 0: Multi-CPR, BEIR, any
  qrels-based set) make ``QRELS`` examples, whose positive is the best-graded judged
  passage found in the corpus; answer strings without qrels (SQuAD-format JSON and its
  relatives) make ``ANSWERS`` examples, whose positive is the question's source paragraph.
  The corpus is the source's own documents, or a separate ``corpus`` spec (Multi-CPR's
  ``corpus.tsv`` is downloaded apart from its queries).

Every passage seen goes into one pool keyed by id (the training corpus), which the
trainer indexes with BM25 to mine hard negatives where the data brings none, and
which query-side training encodes once.  :func:`mine_bm25_hard_negatives` is DPR's
recipe: the top BM25 passages that are not a positive and, for ``ANSWERS`` examples,
do not contain an answer; for ``QRELS`` examples, that are not judged relevant.

An ``id_prefix`` (``"ecom-"``) is put in front of a source's question and passage ids,
so the domains of a merged-domain run keep apart ids that clash.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from anygrain.corpus.formats import Source, parse_source
from anygrain.corpus.questions import Question
from anygrain.corpus.records import SourceDocument, Span
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.eval.answers import AnswerMatcher
from anygrain.utils.progress import progress_bar

Ctx = tuple[str, str, str]  # (passage id, title, text)

DPR_TRAIN_FORMAT = "dpr-train"


class Supervision(str, enum.Enum):
    """What makes a passage a positive (and keeps it from being a negative) for a question.

    ANSWERS: the passage the data names (DPR's positive_ctxs, SQuAD's paragraph); a
    passage that contains an answer string is never a negative.  QRELS: the passages
    judged relevant (grade > 0); only those are excluded from the negatives, since
    qrels-based sets (Multi-CPR, BEIR) carry no answer strings to match.
    """

    ANSWERS = "answers"
    QRELS = "qrels"


def supervision_of(q: Question) -> Supervision | None:
    """The strategy a question's own data supports: qrels first, else answers, else None."""
    if any(r > 0 for r in q.qrels.values()):
        return Supervision.QRELS
    if q.answers:
        return Supervision.ANSWERS
    return None


@dataclass
class TrainExample:
    """One question with its positive passage and (possibly no) hard negatives.

    ``relevant`` holds the pool ids of every passage judged relevant (QRELS
    examples); none of them may be a negative, in mining or in the batch.
    """

    qid: str
    question: str
    answers: list[str]
    positive: Ctx
    hard_negatives: list[Ctx] = field(default_factory=list)
    answers_are_regex: bool = False
    supervision: Supervision = Supervision.ANSWERS
    relevant: tuple[str, ...] = ()

    def excluded_ids(self) -> set[str]:
        """Pool ids that must never be a negative for this question."""
        return {self.positive[0], *self.relevant}


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
            record: list[object] = [
                ex.qid,
                ex.question,
                ex.positive[0],
                [c[0] for c in ex.hard_negatives],
            ]
            if ex.supervision is Supervision.QRELS:  # older runs' fingerprints stay as they were
                record += [ex.supervision.value, sorted(ex.relevant)]
            h.update(json.dumps(record).encode())
        return h.hexdigest()[:16]


def _source(spec: str) -> Source:
    src = parse_source(spec, want="questions")
    fmt = src.format
    if fmt.name != DPR_TRAIN_FORMAT and fmt.read_questions is None:
        raise AnygrainError(
            f"{src.path}: format '{fmt.name}' cannot train a retriever: it holds no questions "
            f"(use {DPR_TRAIN_FORMAT} JSON/JSONL, SQuAD-format JSON, or a qrels-based set "
            "such as multicpr or beir)"
        )
    return src


def _documents_source(src: Source, corpus: str | None) -> Source:
    if corpus is not None:
        return parse_source(corpus, want="documents")
    if src.format.read_documents is None:
        raise AnygrainError(
            f"{src.path}: format '{src.format.name}' holds no passages: give the corpus "
            "(--corpus FORMAT:PATH)"
        )
    return src


def _count(data: TrainingData, reason: str) -> None:
    data.dropped[reason] = data.dropped.get(reason, 0) + 1


def _add_dpr(src: Source, data: TrainingData, errors: ErrorLog, prefix: str = "") -> None:
    from anygrain.corpus.readers.dpr_train import read_dpr_training

    for ex in read_dpr_training(src.path, errors):
        if not ex.positives:
            _count(data, "no positive passage")
            continue
        pid, title, text = ex.positives[0]
        pos = data.pool.add(prefix + pid if pid else pid, title, text)
        hard = [
            data.pool.add(prefix + c[0] if c[0] else c[0], c[1], c[2]) for c in ex.hard_negatives
        ]
        data.examples.append(
            TrainExample(
                f"{prefix}{src.path.name}:{ex.line}", ex.question, list(ex.answers), pos, hard
            )
        )


def _add_documents_and_questions(
    src: Source,
    data: TrainingData,
    errors: ErrorLog,
    *,
    corpus: str | None = None,
    prefix: str = "",
) -> None:
    questions = src.questions(errors)
    # Read the questions first: a wrong corpus is not worth a 1M-passage read to find out.
    docs = _documents_source(src, corpus)
    local: dict[str, Ctx] = {}
    for doc in docs.documents(errors):
        for sp in doc.passages or []:
            if sp.id is None:
                continue
            local[sp.id] = data.pool.add(
                prefix + sp.id,
                sp.title if sp.title is not None else doc.title,
                doc.text[sp.start : sp.end],
            )
    for q in questions:
        how = supervision_of(q)
        if how is None:
            # SQuAD 2.0 unanswerable questions, or queries without a relevant judgement.
            _count(data, "no answers or relevant passages")
            continue
        if how is Supervision.QRELS:
            judged = sorted((pid for pid, r in q.qrels.items() if r > 0), key=lambda p: -q.qrels[p])
            relevant = [local[p] for p in judged if p in local]
            if not relevant:
                _count(data, "judged passages not in the corpus")
                continue
            gold, rel_ids = relevant[0], tuple(c[0] for c in relevant)
        else:
            found = next((local[g] for g in q.gold if g in local), None)
            if found is None:
                _count(data, "gold passage not found")
                continue
            gold, rel_ids = found, ()
        data.examples.append(
            TrainExample(
                f"{prefix}{src.path.name}:{q.id}",
                q.text,
                list(q.answers),
                gold,
                [],
                q.answers_are_regex,
                supervision=how,
                relevant=rel_ids,
            )
        )


def _paired(name: str, values: Sequence[str] | None, n: int) -> list[str | None]:
    if not values:
        return [None] * n
    if len(values) != n:
        raise AnygrainError(
            f"{len(values)} {name} value(s) for {n} training source(s): give one per --train, "
            "in the same order"
        )
    return [v or None for v in values]


def load_training_data(
    specs: Sequence[str],
    *,
    errors: ErrorLog | None = None,
    max_examples: int | None = None,
    seed: int = 0,
    corpora: Sequence[str] | None = None,
    id_prefixes: Sequence[str] | None = None,
) -> TrainingData:
    """Examples from every ``FORMAT:PATH`` (or ``PATH``) in ``specs``, in file order.

    ``corpora`` (one per spec, or none; an empty string means "the source's own") names
    the passages of question-only sources; ``id_prefixes`` (one per spec, or none) is
    put in front of each source's question and passage ids.  ``max_examples`` keeps a
    seeded random subset (in file order), so a quick run still sees every source.  The
    pool keeps every passage of the corpora, as the BM25 hard negatives come from all of
    them.  Raises when nothing is left to train on.
    """
    errors = errors or ErrorLog()
    data = TrainingData([], PassagePool())
    paired = zip(
        specs,
        _paired("corpus", corpora, len(specs)),
        _paired("id prefix", id_prefixes, len(specs)),
        strict=True,
    )
    for spec, corpus, prefix in paired:
        src = _source(spec)
        if src.format.name == DPR_TRAIN_FORMAT:
            if corpus is not None:
                raise AnygrainError(
                    f"{src.path}: {DPR_TRAIN_FORMAT} data carries its passages; drop its corpus"
                )
            _add_dpr(src, data, errors, prefix or "")
        else:
            _add_documents_and_questions(src, data, errors, corpus=corpus, prefix=prefix or "")
    if max_examples is not None and len(data.examples) > max_examples:
        keep = np.sort(np.random.default_rng(seed).permutation(len(data.examples))[:max_examples])
        data.examples = [data.examples[i] for i in keep]
        if not any(ex.supervision is Supervision.QRELS for ex in data.examples):
            # A quick run should not pay for indexing or encoding passages it never uses.
            # (Qrels-based examples keep the corpus: their negatives are mined from all of it.)
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
    not the positive (by id or identical text) and, by the example's
    :class:`Supervision`, do not contain an answer (DPR's ``has_answer``) or are not
    judged relevant.  ``only_missing`` leaves examples that already carry hard
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
            by_answer = ex.supervision is Supervision.ANSWERS
            matcher = AnswerMatcher(ex.answers, regex=ex.answers_are_regex) if by_answer else None
            excluded = ex.excluded_ids()
            pos_text = ex.positive[2].strip()
            found: list[Ctx] = []
            for r in hits.tolist():
                if r < 0:
                    break
                if (
                    ids[r] in excluded
                    or texts[r].strip() == pos_text
                    or (matcher is not None and matcher.in_text(texts[r]))
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
