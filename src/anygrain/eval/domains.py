"""Per-domain evaluation in one pass, reported as Multi-CPR's table (one row per domain).

Two layouts:

* one index per domain (the paper's setting: each domain searched over its own
  corpus): every domain's questions go to its own index;
* one merged index whose ids carry the domain as a prefix (``ecom-260``): all
  questions are searched in a single :func:`evaluate` call and the per-question
  values are grouped by prefix afterwards.

Either way each domain's row averages over *all* of its questions that the metric
applies to (a query with no results counts as 0 unless ``drop_empty``), exactly as
:func:`evaluate` does for one set; the defaults are Multi-CPR's MRR@10 and Recall@1000,
both from one ranked list of 1000.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.eval.evaluate import EvalReport, Searcher, evaluate
from anygrain.eval.metrics import parse_metrics

MULTICPR_METRICS = ("mrr@10", "recall@1000")
#: the slot of :func:`evaluate_domain_dirs`' index path that names one index per domain
DOMAIN_SLOT = "{domain}"
# How the paper names its columns.
_TITLES = {"mrr@10": "MRR@10", "recall@1000": "Recall@1000"}


@dataclass
class DomainRow:
    domain: str
    n_questions: int
    n_empty: int
    metrics: dict[str, float]
    n_evaluated: dict[str, int] = field(default_factory=dict)


@dataclass
class DomainTable:
    """One row per domain, in the order given; ``overall`` averages over every question."""

    metrics: list[str]
    rows: list[DomainRow]
    overall: DomainRow | None = None
    drop_empty: bool = False

    def to_dict(self) -> dict[str, Any]:
        def row(r: DomainRow) -> dict[str, Any]:
            return {
                "domain": r.domain,
                "n_questions": r.n_questions,
                "n_empty": r.n_empty,
                "metrics": dict(r.metrics),
                "n_evaluated": dict(r.n_evaluated),
            }

        return {
            "metrics": list(self.metrics),
            "drop_empty": self.drop_empty,
            "domains": [row(r) for r in self.rows],
            "overall": row(self.overall) if self.overall is not None else None,
        }

    def format(self, digits: int = 4) -> str:
        """Plain text, like the paper's table: a row per domain, a column per metric."""
        heads = ["domain", "queries", *(_TITLES.get(m, m) for m in self.metrics)]
        shown = [*self.rows, self.overall] if self.overall and len(self.rows) > 1 else self.rows
        body = [
            [r.domain, str(r.n_questions), *(f"{r.metrics[m]:.{digits}f}" for m in self.metrics)]
            for r in shown
        ]
        widths = [max(len(x) for x in col) for col in zip(heads, *body, strict=True)]

        def line(cells: list[str]) -> str:
            return "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([line(heads), rule, *(line(b) for b in body)])


def _row(domain: str, qs: Sequence[Question], report: EvalReport, names: list[str]) -> DomainRow:
    """One domain's means from a report holding (at least) its questions."""
    per = report.per_question
    metrics, counts = {}, {}
    for m in names:
        values = [per[q.id][m] for q in qs if q.id in per and m in per[q.id]]
        metrics[m] = sum(values) / len(values) if values else 0.0
        counts[m] = len(values)
    empty = set(report.empty_ids)
    return DomainRow(domain, len(qs), sum(1 for q in qs if q.id in empty), metrics, counts)


def _overall(rows: Sequence[DomainRow], names: Sequence[str]) -> DomainRow:
    """Every question of every domain in one mean (ids may repeat across domains)."""
    metrics, counts = {}, {}
    for m in names:
        n = sum(r.n_evaluated[m] for r in rows)
        metrics[m] = sum(r.metrics[m] * r.n_evaluated[m] for r in rows) / n if n else 0.0
        counts[m] = n
    return DomainRow(
        "all", sum(r.n_questions for r in rows), sum(r.n_empty for r in rows), metrics, counts
    )


def evaluate_domains(
    questions: Mapping[str, Sequence[Question]],
    index: Searcher | Mapping[str, Searcher],
    metrics: Sequence[str] = MULTICPR_METRICS,
    *,
    drop_empty: bool = False,
    progress: bool = False,
    run_out: str | os.PathLike[str] | None = None,
    batch_size: int = 64,
) -> DomainTable:
    """Evaluate each domain's questions; ``index`` is one merged index (ids prefixed, so
    every domain is searched in one :func:`evaluate` call) or one index per domain."""
    names = [m.name for m in parse_metrics(list(metrics))]
    if not questions:
        raise AnygrainError("no domains to evaluate")
    if isinstance(index, Mapping):
        missing = sorted(set(questions) - set(index))
        if missing:
            raise AnygrainError(f"no index for domain(s) {', '.join(missing)}")
        reports = {
            domain: evaluate(
                index[domain],
                qs,
                names,
                drop_empty=drop_empty,
                progress=progress,
                run_out=None if run_out is None else Path(f"{run_out}.{domain}"),
                batch_size=batch_size,
            )
            for domain, qs in questions.items()
        }
    else:
        # one merged index (ids prefixed by domain): every domain in one pass
        merged = evaluate(
            index,
            [q for qs in questions.values() for q in qs],
            names,
            drop_empty=drop_empty,
            progress=progress,
            run_out=run_out,
            batch_size=batch_size,
        )
        reports = dict.fromkeys(questions, merged)
    rows = [_row(domain, qs, reports[domain], names) for domain, qs in questions.items()]
    return DomainTable(names, rows, _overall(rows, names), drop_empty)


def evaluate_domain_dirs(
    root: str | Path,
    index: str | Path,
    open_index: Callable[[str | Path], Searcher],
    *,
    split: str = "dev",
    domains: Sequence[str] | None = None,
    metrics: Sequence[str] = MULTICPR_METRICS,
    drop_empty: bool = False,
    run_out: str | Path | None = None,
    limit: int | None = None,
    progress: bool = False,
) -> DomainTable:
    """Multi-CPR's table for the domain directories of ``root``
    (:func:`anygrain.api.evaluate_domains`): each domain's questions read, checked and cut
    to ``limit`` before ``open_index`` opens ``index`` (``{domain}`` in it: one per domain)."""
    from anygrain.corpus.readers.multicpr import QUERY_SUFFIX, domain_prefix
    from anygrain.corpus.readers.multicpr import read_multicpr_questions as read_qs
    from anygrain.eval.runs import check_run_path

    root = Path(root)
    if not root.is_dir():
        raise AnygrainError(f"{root}: not a directory")
    names = (
        list(domains)
        if domains
        else sorted(d.name for d in root.iterdir() if (d / f"{split}{QUERY_SUFFIX}").is_file())
    )
    if not names:
        raise AnygrainError(f"{root}: no domain directory with {split}{QUERY_SUFFIX}")
    per_domain = DOMAIN_SLOT in str(index)
    if run_out is not None:  # never over a query or qrels file, never inside an index
        read = [
            root / name / f
            for name in names
            for f in (f"{split}{QUERY_SUFFIX}", f"qrels.{split}.tsv", f"qrels.{split}.txt")
        ]
        for name in names if per_domain else [""]:
            check_run_path(f"{run_out}.{name}" if name else run_out, read)
    if limit is not None and limit < 1:
        raise AnygrainError(f"limit must be at least 1, got {limit}")
    errors = ErrorLog()
    questions: dict[str, list[Question]] = {}
    for name in names:
        prefix = "" if per_domain else domain_prefix(root / name)
        qs = list(read_qs(root / name / f"{split}{QUERY_SUFFIX}", errors, prefix=prefix))
        questions[name] = qs[:limit] if limit is not None else qs
    target: Searcher | dict[str, Searcher]
    if per_domain:
        target = {name: open_index(str(index).replace(DOMAIN_SLOT, name)) for name in names}
    else:
        target = open_index(index)
    return evaluate_domains(
        questions, target, list(metrics), drop_empty=drop_empty, progress=progress, run_out=run_out
    )
