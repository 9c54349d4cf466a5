"""``anygrain eval-domains``: Multi-CPR's per-domain table (MRR@10, Recall@1000) in one command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from anygrain.cli_common import fail, out
from anygrain.errors import AnygrainError, ErrorLog

DOMAIN_SLOT = "{domain}"


def eval_domains_cmd(
    root: Annotated[
        Path,
        typer.Argument(
            help="Multi-CPR data directory: one subdirectory per domain, each with SPLIT.query.txt and qrels.SPLIT.tsv"
        ),
    ],
    index: Annotated[
        str,
        typer.Option(
            "--index",
            help="Index directory; with {domain} in it, one index per domain (e.g. idx/{domain}), "
            "else one merged index whose ids are prefixed DOMAIN- (built from multicpr:ROOT)",
        ),
    ],
    split: Annotated[str, typer.Option(help="Which SPLIT.query.txt to read")] = "dev",
    domains: Annotated[
        str | None,
        typer.Option(help="Comma-separated domains (default: every subdirectory with the split)"),
    ] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated metrics")] = "mrr@10,recall@1000",
    drop_empty: Annotated[
        bool,
        typer.Option(
            "--drop-empty",
            help="Drop queries with no results from means (original Multi-CPR script)",
        ),
    ] = False,
    run_out: Annotated[
        Path | None,
        typer.Option("--run-out", help="TREC run file (per-domain indexes: FILE.DOMAIN each)"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="Evaluate only the first N questions of each domain")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Evaluate every Multi-CPR domain and print one row per domain, as in the paper."""
    from anygrain.corpus.questions import Question
    from anygrain.corpus.readers.multicpr import QUERY_SUFFIX, domain_prefix
    from anygrain.corpus.readers.multicpr import read_multicpr_questions as read_qs
    from anygrain.eval.domains import evaluate_domains
    from anygrain.eval.evaluate import Searcher
    from anygrain.index.base import Index

    try:
        if not root.is_dir():
            raise AnygrainError(f"{root}: not a directory")
        names = (
            [d.strip() for d in domains.split(",") if d.strip()]
            if domains
            else sorted(d.name for d in root.iterdir() if (d / f"{split}{QUERY_SUFFIX}").is_file())
        )
        if not names:
            raise AnygrainError(f"{root}: no domain directory with {split}{QUERY_SUFFIX}")
        if limit is not None and limit < 1:
            raise AnygrainError(f"--limit must be at least 1, got {limit}")
        per_domain = DOMAIN_SLOT in index
        errors = ErrorLog()
        questions: dict[str, list[Question]] = {}
        for name in names:
            prefix = "" if per_domain else domain_prefix(root / name)
            qs = read_qs(root / name / f"{split}{QUERY_SUFFIX}", errors, prefix=prefix)
            questions[name] = list(qs)[:limit] if limit is not None else list(qs)
        target: Searcher | dict[str, Searcher]
        if per_domain:
            target = {name: Index.load(index.replace(DOMAIN_SLOT, name)) for name in names}
        else:
            target = Index.load(index)
        table = evaluate_domains(
            questions,
            target,
            [m.strip() for m in metrics.split(",") if m.strip()],
            drop_empty=drop_empty,
            progress=not quiet and not as_json,
            run_out=run_out,
        )
    except AnygrainError as e:
        fail(e)
        return
    if as_json:
        print(json.dumps(table.to_dict(), ensure_ascii=False))
        return
    out.print(table.format(), markup=False, highlight=False)
