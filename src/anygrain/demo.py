"""The offline demo: index CPython's reference topics (or the Chinese demo topics) and
answer the demo questions at every grain the index returns, scored on the hits in hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.corpus.questions import Question, Questions
from anygrain.errors import AnygrainError, parse_enum
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.manifest import read_manifest
from anygrain.index.registry import IndexKind, index_class
from anygrain.search import search_index


@dataclass
class DemoAnswer:
    """One demo question with its hits at each unit the index returns."""

    question: Question
    hits: dict[Unit, list[Hit]]


@dataclass
class DemoResult:
    index: Index
    answers: list[DemoAnswer]
    metrics: dict[str, float]
    reused: bool
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.index.kind.value,
            "index": str(self.index.path),
            "n_questions": len(self.answers),
            "n_passages": len(self.index.corpus),
            "metrics": self.metrics,
            "reused_index": self.reused,
            "seconds": self.seconds,
        }


def _reusable_demo_index(
    out: Path, kind: IndexKind, corpus_checksum: str, lang: str = "en"
) -> Index | None:
    """The demo index already at ``out`` when it holds the same corpus, kind and (phrase)
    model, so a second ``anygrain demo`` answers at once; None when there is none."""
    if not (out / "index.json").exists():
        return None
    m = read_manifest(out)
    if m.get("kind") != kind.value or m.get("corpus", {}).get("checksum") != corpus_checksum:
        return None
    want = index_class(kind).default_model_fingerprint(lang)
    if want is not None and m.get("model", {}).get("fingerprint") != want:
        return None
    return Index.load(out)


def run_demo(
    out: str | Path,
    *,
    kind: IndexKind | str = IndexKind.PHRASE,
    progress: bool = True,
    max_documents: int | None = None,
    k: int = 5,
    lang: str = "en",
    read: bool = True,
    reader: str | Path | None = None,
    **settings: Any,
) -> DemoResult:
    """Index CPython's reference topics (``lang="zh"``: the Chinese demo topics, with the
    shipped Chinese models) and answer the demo questions, all offline.

    A phrase index (the default, with the shipped phrase model) answers with phrases,
    sentences and passages; other kinds with passages.  An index already at ``out`` with
    the same corpus and model is reused; anything else there is refused, never replaced.
    With ``read`` (the default where a reader ships for the language, or with ``reader``)
    the shipped reader also reads the top passages: the answer grain beside the phrases.
    """
    import tempfile
    import time

    from anygrain.corpus.builtin import chinese_topics, demo_questions, pydoc_topics
    from anygrain.corpus.lang import Lang
    from anygrain.corpus.store import CorpusStore
    from anygrain.models.shipped import reader_ships

    out = Path(out)
    k_ = parse_enum(IndexKind, kind)
    lang = parse_enum(Lang, lang).value
    topics = chinese_topics() if lang == "zh" else pydoc_topics()
    docs = list(topics)[:max_documents]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = CorpusStore.build(docs, Path(tmp) / "corpus", split="paragraph", progress=False)
        checksum = store.manifest["checksum"]
    idx = _reusable_demo_index(out, k_, checksum, lang)
    reused = idx is not None
    if idx is None:
        if out.exists() and any(out.iterdir()) and not (out / "index.json").exists():
            raise AnygrainError(
                f"{out}: exists and is not this demo's index; pass another --out "
                "(the demo never replaces a directory that is not an anygrain index)"
            )
        # another demo index there (another kind or model) is replaced
        settings.setdefault("overwrite", True)
        settings.setdefault("lang", lang)
        idx = Index.build(docs, kind=k_, out=out, split="paragraph", progress=progress, **settings)
    t_index = time.time() - t0
    qs = demo_questions(lang)
    units: list[Unit] = [
        u for u in idx.units if u is not Unit.DOCUMENT
    ]  # a topic page is too long to show
    t1 = time.time()
    by_unit = {u: search_index(idx, qs.texts, k, unit=u) for u in units}
    t_search = time.time() - t1
    if read and (reader is not None or reader_ships(lang)):
        read_hits = search_index(idx, qs.texts, 1, unit=Unit.ANSWER, reader=reader)
        by_unit = {Unit.ANSWER: read_hits, **by_unit}
        units = [Unit.ANSWER, *units]
    t_read = time.time() - t1 - t_search
    answers = [DemoAnswer(q, {u: by_unit[u][i] for u in units}) for i, q in enumerate(qs.items)]

    metrics = _metrics(qs, by_unit, units, k)
    seconds = {
        "index": round(t_index, 2),
        "search_per_question": round(
            t_search / max(1, len(qs) * len([u for u in units if u is not Unit.ANSWER])), 4
        ),
        "read_per_question": round(t_read / max(1, len(qs)), 4),
    }
    return DemoResult(idx, answers, metrics, reused, seconds)


def _metrics(
    qs: Questions, by_unit: dict[Unit, list[list[Hit]]], units: list[Unit], k: int
) -> dict[str, float]:
    """The demo's scores, from the hits already in hand rather than searching again."""
    from anygrain.eval import evaluate_run

    def run_of(u: Unit) -> dict[str, list[Hit]]:
        return {q.id: h for q, h in zip(qs, by_unit[u], strict=True)}

    metrics = dict(
        evaluate_run(run_of(Unit.PASSAGE), qs, ["top@1", f"top@{k}", f"mrr@{k}"]).metrics
    )
    if Unit.PHRASE in units:
        metrics.update(evaluate_run(run_of(Unit.PHRASE), qs, ["em", "f1"]).metrics)
    if Unit.ANSWER in units:
        read_metrics = evaluate_run(run_of(Unit.ANSWER), qs, ["em", "f1"]).metrics
        metrics.update({f"answer_{m}": v for m, v in read_metrics.items()})
    if Unit.SENTENCE in units:
        from anygrain.eval.answers import has_answer

        # the sentence of the best phrase (a sentence scores as its best phrase): does it
        # hold the answer, for a reader who wants the context and not only the phrase
        def in_sentence(h: list[Hit], answers: list[str]) -> bool:
            if not h or h[0].span is None:
                return False
            a, b = h[0].span
            return has_answer(h[0].text[a:b], answers)

        hits = by_unit[Unit.SENTENCE]
        found = sum(in_sentence(h, q.answers) for q, h in zip(qs, hits, strict=True))
        metrics["answer_in_top_sentence"] = found / max(len(qs), 1)
    return metrics
