"""``anygrain eval``, ``eval-domains`` and ``eval-reader``: scoring an index (or a reader) on
a question set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from anygrain.cli.common import (
    BatchSizeOpt,
    BF16Opt,
    DeviceOpt,
    FusionDepthOpt,
    FusionOpt,
    FusionWeightOpt,
    QuietOpt,
    SparseWeightOpt,
    ThreadsOpt,
    TorchThreadsOpt,
    VerifyOpt,
    batch_options,
    console,
    device_option,
    fail,
    fusion_options,
    model_option,
    out,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.hits.hit import Unit
from anygrain.index.scope import Scope
from anygrain.utils.checksums import Verify


def eval_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    questions: Annotated[
        str, typer.Option("--questions", help="Question set: FORMAT:PATH or PATH")
    ],
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated metrics (default: top@1,top@5,top@20,mrr@20; "
            "phrase indexes at --unit phrase: em,f1,top@1,top@k)"
        ),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("-k", help="Hits retrieved per question (default: largest cutoff)"),
    ] = None,
    run_out: Annotated[Path | None, typer.Option("--run-out", help="Write a TREC run file")] = None,
    drop_empty: Annotated[
        bool,
        typer.Option(
            "--drop-empty",
            help="Drop queries with no results from means (original Multi-CPR script)",
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N questions")] = None,
    on_error: Annotated[ErrorPolicy, typer.Option("--on-error")] = ErrorPolicy.STOP,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    unit: Annotated[
        Unit | None, typer.Option(help="Grain, for phrase indexes (default phrase)")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Question-side model to search with (query-side fine-tuned)"),
    ] = None,
    scope: Annotated[
        Scope,
        typer.Option(
            help="corpus, or gold-passage: phrase indexes search each question in its own "
            "passage (D={p}); passage indexes judge a hit by the question's gold passage id "
            "instead of answer containment"
        ),
    ] = Scope.CORPUS,
    fusion: FusionOpt = None,
    fusion_weight: FusionWeightOpt = None,
    fusion_depth: FusionDepthOpt = None,
    sparse_weight: SparseWeightOpt = None,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    verify: VerifyOpt = Verify.SMALL,
    batch_size: BatchSizeOpt = None,
) -> None:
    """Evaluate an index on a question set."""
    from anygrain.api import evaluate_index
    from anygrain.eval.runs import check_run_path
    from anygrain.index.base import Index

    errors = ErrorLog(on_error)
    try:
        if run_out is not None:  # never over the questions, never inside the index
            check_run_path(run_out, [questions, index_dir])
        opts = fusion_options(index_dir, fusion, fusion_weight, fusion_depth, sparse_weight)
        opts.update(batch_options(index_dir, batch_size))
        idx = Index.load(
            index_dir, verify=verify, **model_option(index_dir, model), **device_option(device)
        )
        report = evaluate_index(
            idx,
            questions,
            metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
            k=k,
            run_out=run_out,
            drop_empty=drop_empty,
            limit=limit,
            errors=errors,
            # the bar is on stderr, so it stays with --json (a long eval is not silent)
            progress=not quiet,
            unit=unit,
            scope=scope,
            search_options=opts or None,
            threads=threads,
        )
    except AnygrainError as e:
        fail(e)
        return
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    d = report.to_dict()
    d["scope"] = scope.value
    if idx.cuts_units():
        d["unit"] = idx.check_unit(unit).value
    if as_json:
        print(json.dumps(d, ensure_ascii=False))
        return
    table = Table(title=f"{index_dir} on {questions} ({d['n_questions']} questions)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in d["metrics"].items():
        table.add_row(name, f"{v:.4f}")
    out.print(table)
    if "unit_search" in d:
        console.print(f"unit search: {json.dumps(d['unit_search'])}", soft_wrap=True)


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
    from anygrain.eval.runs import check_run_path
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
        per_domain = DOMAIN_SLOT in index
        if run_out is not None:  # never over a query or qrels file, never inside an index
            read = [
                root / name / f
                for name in names
                for f in (f"{split}{QUERY_SUFFIX}", f"qrels.{split}.tsv", f"qrels.{split}.txt")
            ]
            for name in names if per_domain else [""]:
                check_run_path(f"{run_out}.{name}" if name else run_out, read)
        if limit is not None and limit < 1:
            raise AnygrainError(f"--limit must be at least 1, got {limit}")
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


def _threads(n: int | None) -> None:
    if n is not None:
        import torch

        torch.set_num_threads(max(1, n))


def eval_reader_cmd(
    questions: Annotated[
        str, typer.Option("--questions", help="Question set: FORMAT:PATH or PATH")
    ],
    reader_dir: Annotated[Path, typer.Option("--reader", help="Reader directory")],
    index_dir: Annotated[
        Path | None,
        typer.Argument(help="Index for end-to-end reading (its corpus serves --gold-passage too)"),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="Passages read per question")] = 5,
    gold_passage: Annotated[
        bool,
        typer.Option(
            "--gold-passage", help="Read each question with only its gold passage (D={p})"
        ),
    ] = False,
    corpus: Annotated[
        str | None,
        typer.Option(
            "--corpus", help="Corpus directory or source for --gold-passage without an index"
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N questions")] = None,
    bf16: BF16Opt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout")
    ] = False,
    threads: TorchThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """SQuAD EM/F1 of a reader: end to end over an index, or with the gold passage."""
    import tempfile

    from anygrain.api import load_questions
    from anygrain.corpus.store import CorpusStore
    from anygrain.index.base import Index
    from anygrain.reader import Reader
    from anygrain.reader.evaluate import evaluate_reader

    _threads(threads)
    try:
        qs = load_questions(questions, limit=limit)
        reader = Reader.load(reader_dir)
        index = Index.load(index_dir) if index_dir is not None else None
        with tempfile.TemporaryDirectory() as tmp:
            store = None
            if corpus is not None:
                cp = Path(corpus)
                store = (
                    CorpusStore(cp)
                    if (cp / "corpus.json").exists()
                    else CorpusStore.build(corpus, Path(tmp) / "corpus", progress=not quiet)
                )
            report = evaluate_reader(
                index,
                reader,
                list(qs),
                k=k,
                gold_passage=gold_passage,
                store=store,
                bf16=bf16,
                progress=not quiet,
            )
    except (AnygrainError, ValueError, OSError) as e:
        fail(e)
        return
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    out.print(
        f"{report['setting']} (k={report['k']}): EM {100 * report['em']:.2f}  F1 {100 * report['f1']:.2f}  "
        f"on {report['n_evaluated']} questions, {report['questions_per_second']} questions/s"
    )
