"""``anygrain eval``, ``eval-domains`` and ``eval-reader``: scoring an index (or a reader) on
a question set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from anygrain.cli import panels
from anygrain.cli.common import (
    BatchSizeOpt,
    DeviceOpt,
    OnErrorOpt,
    QuietOpt,
    RuntimeOpt,
    ThreadsOpt,
    VerifyOpt,
    at_least_one,
    config_options,
    console,
    fail,
    out,
)
from anygrain.cli.kind_options import AnswerOptions
from anygrain.cli.panels import with_panels
from anygrain.cli.search import QueryModelOpt, search_options, with_search_options
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.hits.hit import Unit
from anygrain.index.scope import Scope
from anygrain.utils.checksums import Verify

# the options eval, eval-reader and eval-domains share
QuestionSetOpt = Annotated[
    str, typer.Option("--questions", help="Question set: FORMAT:PATH or PATH")
]
LimitOpt = Annotated[
    Optional[int],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(help="Evaluate only the first N questions"),
]
JsonReportOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout")]
DropEmptyOpt = Annotated[
    bool,
    typer.Option(
        "--drop-empty", help="Drop queries with no results from means (original Multi-CPR script)"
    ),
]


@with_panels(
    {
        panels.INPUT: ("questions", "limit", "on_error", "verify"),
        panels.EVALUATION: ("metrics", "k", "unit", "scope", "drop_empty"),
        panels.SEARCH: ("model", *panels.HYBRID_SEARCH),
        panels.PHRASE: panels.PHRASE_SEARCH,
        panels.OUTPUT: ("run_out", "as_json", "quiet"),
        panels.PERFORMANCE: ("threads", "device", "runtime", "batch_size"),
    }
)
@with_search_options(lead=13)
def eval_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    questions: QuestionSetOpt,
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
    drop_empty: DropEmptyOpt = False,
    limit: LimitOpt = None,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    as_json: JsonReportOpt = False,
    quiet: QuietOpt = False,
    unit: Annotated[
        Unit | None,
        typer.Option(help="Grain, for phrase indexes (default phrase); answer is eval-reader's"),
    ] = None,
    model: QueryModelOpt = None,
    scope: Annotated[
        Scope,
        typer.Option(
            help="corpus, or gold-passage: phrase indexes search each question in its own "
            "passage (D={p}); passage indexes judge a hit by the question's gold passage id "
            "instead of answer containment"
        ),
    ] = Scope.CORPUS,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    verify: VerifyOpt = Verify.SMALL,
    batch_size: BatchSizeOpt = None,
    runtime: RuntimeOpt = None,
    **search: Any,
) -> None:
    """Evaluate an index on a question set."""
    from anygrain.api import evaluate_index

    errors = ErrorLog(on_error)
    try:
        if unit is Unit.ANSWER:  # never passage metrics under the answer's name
            raise AnygrainError(
                f"--unit answer: eval scores what an index retrieves; for the EM/F1 of read "
                f"answers run `anygrain eval-reader {index_dir} --questions {questions}`"
            )
        at_least_one("-k", k)
        at_least_one("--limit", limit)
        options = search_options(search, batch_size)
        report = evaluate_index(
            index_dir,  # the run file is checked before the index loads
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
            search_options=options,
            threads=threads,
            load_options={
                "verify": verify,
                "model": model,
                "device": device,
                **({"runtime": runtime} if runtime is not None else {}),
            },
        )
    except AnygrainError as e:
        fail(e)
        return
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    print_eval_report(report.to_dict(), f"{index_dir} on {questions}", as_json)


def print_eval_report(d: dict[str, Any], title: str, as_json: bool) -> None:
    """``eval``'s output: its notes on stderr, then the metrics as one JSON object or a table
    titled ``title``."""
    # d holds the scope, and the unit of an index with several
    for note in d.get("notes", []):  # options that cannot change this evaluation
        console.print(f"note: {escape(note)}", soft_wrap=True)
    if as_json:
        print(json.dumps(d, ensure_ascii=False))
        return
    table = Table(title=f"{title} ({d['n_questions']} questions)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in d["metrics"].items():
        table.add_row(name, f"{v:.4f}")
    out.print(table)
    if "unit_search" in d:
        console.print(f"unit search: {json.dumps(d['unit_search'])}", soft_wrap=True)


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
    drop_empty: DropEmptyOpt = False,
    run_out: Annotated[
        Path | None,
        typer.Option("--run-out", help="TREC run file (per-domain indexes: FILE.DOMAIN each)"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="Evaluate only the first N questions of each domain")
    ] = None,
    as_json: JsonReportOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Evaluate every Multi-CPR domain and print one row per domain, as in the paper."""
    from anygrain.api import evaluate_domains

    try:
        table = evaluate_domains(
            root,
            index,
            split=split,
            domains=[d.strip() for d in domains.split(",") if d.strip()] if domains else None,
            metrics=[m.strip() for m in metrics.split(",") if m.strip()],
            drop_empty=drop_empty,
            run_out=run_out,
            limit=limit,
            progress=not quiet and not as_json,
        )
    except AnygrainError as e:
        fail(e)
        return
    if as_json:
        print(json.dumps(table.to_dict(), ensure_ascii=False))
        return
    out.print(table.format(), markup=False, highlight=False)


#: passages eval-reader reads per question unless -k says otherwise
READ_K = 5


@with_panels(
    {
        panels.INPUT: ("questions", "corpus", "gold_passage", "limit"),
        panels.MODEL: ("reader_dir",),
        panels.EVALUATION: ("k", "at", "retriever_weight", "read_window", "read_sure"),
        panels.OUTPUT: ("as_json", "quiet"),
        panels.PERFORMANCE: ("threads", "runtime", "bf16"),
    }
)
@config_options(AnswerOptions, ("retriever_weight", "read_window", "read_sure"), lead=9)
def eval_reader_cmd(
    questions: QuestionSetOpt,
    reader_dir: Annotated[
        str | None,
        typer.Option(
            "--reader",
            help="Reader directory or shipped name (default: the shipped reader for the "
            "corpus language)",
        ),
    ] = None,
    index_dir: Annotated[
        Path | None,
        typer.Argument(help="Index for end-to-end reading (its corpus serves --gold-passage too)"),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("-k", help=f"Passages read per question, 1 to 100 (default {READ_K})"),
    ] = None,
    gold_passage: Annotated[
        bool,
        typer.Option(
            "--gold-passage", help="Read each question with only its gold passage (D={p})"
        ),
    ] = False,
    corpus: Annotated[
        str | None,
        typer.Option(
            "--corpus",
            help="With --gold-passage: the corpus (directory or FORMAT:PATH) holding the gold "
            "passages, in place of the index's",
        ),
    ] = None,
    limit: LimitOpt = None,
    bf16: Annotated[
        bool | None,
        typer.Option(
            "--bf16/--fp32",
            help="Reader precision (default: bf16 where native; --bf16 reads with torch)",
        ),
    ] = None,
    runtime: Annotated[
        Runtime | None,
        typer.Option(
            "--runtime",
            help="What runs the reader (and the index's question encoder, where it has one): "
            "auto (torch where the CPU has native bfloat16, else ONNX Runtime), onnx or torch",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="Also EM/F1 reading only the first K of the -k passages: 1,3"),
    ] = None,
    as_json: JsonReportOpt = False,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
    **reading: Any,
) -> None:
    """SQuAD EM/F1 of a reader at the answer grain: end to end over an index (the reader
    reads its top -k passages), or with the gold passage."""
    from anygrain.api import evaluate_reader

    try:
        cutoffs = reader_cutoffs(k, at, gold_passage, reading["retriever_weight"])
        at_least_one("--limit", limit)
        if corpus is not None and not gold_passage:
            raise AnygrainError(
                "--corpus serves --gold-passage only (end to end, the index retrieves)"
            )
        if index_dir is None and not gold_passage:
            raise AnygrainError("give an INDEX to read end to end, or --gold-passage with --corpus")
        report = evaluate_reader(
            questions,
            reader_dir,
            index_dir,
            k=READ_K if k is None else k,
            gold_passage=gold_passage,
            corpus=corpus,
            limit=limit,
            bf16=bf16,
            threads=threads,
            progress=not quiet,
            at=cutoffs,
            runtime=None if runtime is None else runtime.value,
            **reading,
        )
    except (AnygrainError, ValueError, OSError) as e:
        fail(e)
        return
    print_reader_report(report, cutoffs, as_json)


def print_reader_report(report: dict[str, Any], cutoffs: list[int], as_json: bool) -> None:
    """``eval-reader``'s output: one JSON object, or EM/F1 (and at each cutoff) then the reader
    and its runtime on stderr."""
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    cuts = "".join(
        f"  @{c}: EM {100 * report[f'em@{c}']:.2f} F1 {100 * report[f'f1@{c}']:.2f}"
        for c in cutoffs
        if f"em@{c}" in report
    )
    out.print(
        f"{report['setting']} (k={report['k']}): EM {100 * report['em']:.2f}  F1 {100 * report['f1']:.2f}"
        f"{cuts}  on {report['n_evaluated']} questions, {report['questions_per_second']} questions/s",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"reader {escape(report['reader']['name'])} on {report['runtime']} ({report['precision']})",
        highlight=False,
        soft_wrap=True,
    )


def reader_cutoffs(
    k: int | None, at: str | None, gold_passage: bool, retriever_weight: float | None
) -> list[int]:
    """``--at``'s cutoffs, each checked against ``-k``; what the gold-passage setting (one
    passage read) cannot use is refused by name."""
    from anygrain.api import check_reader_counts

    if gold_passage:
        given = [
            n
            for n, v in (("-k", k), ("--at", at), ("--retriever-weight", retriever_weight))
            if v is not None
        ]
        if given:
            raise AnygrainError(
                f"{', '.join(given)}: --gold-passage reads each question's one gold passage"
            )
        return []
    cutoffs = []
    for part in (at or "").split(","):
        if part.strip():
            try:
                cutoffs.append(int(part))
            except ValueError:
                raise AnygrainError(
                    f"--at {part.strip()}: not a whole number (cutoffs such as --at 1,3)"
                ) from None
    if at is not None and not cutoffs:
        raise AnygrainError(f"--at {at!r}: give cutoffs such as --at 1,3")
    check_reader_counts(READ_K if k is None else k, cutoffs)  # -k in 1..100, each cutoff in 1..k
    return sorted(set(cutoffs))
