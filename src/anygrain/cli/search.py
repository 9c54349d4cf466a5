"""``anygrain search``: one question, its hits printed as a table or as JSON lines; or a batch
of questions (``--questions``), one JSON line of hits per question."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from anygrain.cli import panels
from anygrain.cli.common import (
    BatchSizeOpt,
    DeviceOpt,
    QuietOpt,
    RuntimeOpt,
    ThreadsOpt,
    VerifyOpt,
    at_least_one,
    config_options,
    console,
    fail,
    out,
    take_options,
)
from anygrain.cli.kind_options import (
    SEARCH_HELP,
    AnswerOptions,
    FusionOptions,
    PhraseOptions,
    option,
)
from anygrain.cli.panels import with_panels
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Hit, Unit
from anygrain.utils.checksums import Verify

if TYPE_CHECKING:
    from anygrain.api import Index

#: the most passages the answer grain reads per question (ReadSettings' limit)
MAX_READ = 100

FilterOpt = Annotated[
    Optional[list[str]],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--filter",
        help="Keep hits whose metadata match: FIELD=VALUE (repeatable; FIELD=A,B or the "
        "field again: any of them; or a JSON filter object); the top K that match",
    ),
]
#: the question encoder a search runs, ``search``'s and ``eval``'s
QueryModelOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(help="Question-side model to search with (query-side fine-tuned)"),
]


def _read_question(query: str | None, question_file: str | None) -> str:
    """The question from the argument, a file, or stdin (``-``): a long question cannot be
    an argument (the OS limits their length)."""
    if query is not None and question_file is not None:
        raise AnygrainError("give the question as an argument or with --question-file, not both")
    if query is None and question_file is None:
        raise AnygrainError(
            "give the question as an argument, or --question-file PATH (- for stdin)"
        )
    if query is not None:
        return query
    assert question_file is not None
    from anygrain.api import read_text_file

    text, where = read_text_file(question_file, "a file holding the question")
    text = text.strip()
    if not text:
        raise AnygrainError(f"{where}: the question is empty")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1:  # never one concatenated question, silently
        raise AnygrainError(
            f"{where}: holds {len(lines)} lines, and --question-file reads one question; "
            f"for one search per line use --questions {question_file} (JSON lines out)"
        )
    return text


def print_phrase_hits(
    hits: Sequence[Hit], *, as_json: bool = False, console_: Console | None = None
) -> None:
    """Answer phrases (or sentences) highlighted in their context; passages and documents in brief."""
    if as_json:
        print_json_hits(hits)
        return
    c = console_ or out
    table = Table(show_lines=True)
    for col in ("#", "score", "answer", "title", "context"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        before, phrase, after = h.context()
        answer = phrase if h.span is not None else ""
        ctx = f"{escape(before)}[bold yellow]{escape(phrase)}[/]{escape(after)}"
        table.add_row(str(i), f"{h.score:.3f}", escape(answer), escape(h.citation), ctx)
    c.print(table)


def print_answer_hits(hits: Sequence[Hit], *, as_json: bool = False) -> None:
    """Read answers, each marked inside its sentence, with both models' scores and the
    calibrated confidence; passage hits are the evidence of a question left unanswered."""
    if as_json:
        print_json_hits(hits)
        return
    if hits and hits[0].unit is not Unit.ANSWER:
        out.print(
            f"[yellow]not found in these documents[/] (best answer's confidence "
            f"{hits[0].confidence or 0.0:.2f}); the passages read:"
        )
        for i, h in enumerate(hits, 1):
            text = h.text if len(h.text) < 400 else h.text[:400] + "…"
            out.print(f"{i}. [bold]{escape(h.citation)}[/] {escape(text)}")
        return
    table = Table(show_lines=True)
    for col in ("#", "score", "answer", "title", "sentence"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        a, b = h.span or (0, 0)
        sa, sb = h.sentence or (a, b)
        ctx = f"{escape(h.text[sa:a])}[bold yellow]{escape(h.text[a:b])}[/]{escape(h.text[b:sb])}"
        score = f"{h.score:.2f}\n(reader {h.reader_score:.2f})"
        if h.confidence is not None:
            score += f"\nconfidence {h.confidence:.2f}"
        table.add_row(str(i), score, escape(h.text[a:b]), escape(h.citation), " ".join(ctx.split()))
    out.print(table)


def print_json_hits(hits: Sequence[Hit]) -> None:
    """One JSON object per hit (:meth:`Hit.to_json`, the server's shape), best first."""
    for i, h in enumerate(hits, 1):
        print(json.dumps(h.to_json(i), ensure_ascii=False, allow_nan=False))


@dataclass(frozen=True)
class RescoreOptions:
    """How a phrase search's re-scoring (``--rescore``) re-encodes its passages: search
    options only (no build setting; :func:`anygrain.phrase.rescore.search_rescored`)."""

    rescore_bf16: bool | None = option(
        "Phrase indexes, with --rescore: re-encode in bfloat16 (default: as the index was built)",
        "--rescore-bf16/--no-rescore-bf16",
    )


def check_read(read: int | None) -> None:
    """Refuse a ``--read`` outside 1..:data:`MAX_READ` by its name."""
    if read is not None and not 1 <= read <= MAX_READ:
        raise AnygrainError(f"--read must be between 1 and {MAX_READ} (passages read), got {read}")


def load_searched(
    index_dir: Path,
    unit: Unit | None,
    k: int,
    given: tuple[Mapping[str, Any], int | None, list[str] | None],
    reading: Mapping[str, Any],
    runtime: Runtime | None,
    **options: Any,
) -> tuple[Index, dict[str, Any]]:
    """The index a search opens (``options``: :func:`anygrain.api.load_index`'s) and the
    options it is searched with: the kinds' given on the command line, ``--batch-size`` and
    ``--filter`` (``given``), and the answer grain's ``reading``, -k and the counts checked
    by name first.  ``--runtime`` is its question encoder's; on a kind without one (BM25)
    an answer search's ``--runtime`` runs the reader only, and any other search refuses it."""
    from anygrain.api import answer_unit, load_index, takes_load_option

    search, batch_size, filter_ = given
    opts = search_options(search, batch_size, filter=filter_ or None)
    at_least_one("-k", k)
    check_read(reading["read"])
    opts.update(reading)
    reads = answer_unit(unit, reading) is Unit.ANSWER
    if runtime is not None and reads and not takes_load_option(index_dir, "runtime"):
        runtime = None  # the reader's alone (search_index hands it on)
    return load_index(index_dir, runtime=runtime, **options), opts


def with_search_options(lead: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The index kinds' options a search takes (a hybrid index's fusion, a phrase index's
    BM25 weight and rescoring; :mod:`anygrain.cli.kind_options`, in their search meaning),
    after the command's first ``lead`` parameters, handed to it as ``**search``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        phrase = ("sparse_weight", "rescore", "rescore_margin", "rescore_tokens", "rescore_context")
        command = config_options(RescoreOptions, lead=lead)(command)
        command = config_options(PhraseOptions, phrase, lead=lead, helps=SEARCH_HELP)(command)
        return config_options(FusionOptions, lead=lead, helps=SEARCH_HELP)(command)

    return decorate


def search_options(
    search: Mapping[str, Any], batch_size: int | None, **more: Any
) -> dict[str, Any]:
    """The search options given on the command line (None: not given), which the index
    refuses by name when its kind does not take them; ``--batch-size`` and
    ``--fusion-depth`` below 1 refused here."""
    at_least_one("--batch-size", batch_size)
    at_least_one("--fusion-depth", search["depth"])
    kinds = {k: v for k, v in search.items() if k != "rescore"}
    return {**kinds, "batch_size": batch_size, **more, "rescore": search["rescore"]}


#: what ``search --questions --format`` writes: the hits of each question as one JSON line,
#: or TREC run lines (``qid Q0 docid rank score tag``, :mod:`anygrain.eval.runs`)
FORMATS = ("jsonl", "trec")


@dataclass(frozen=True)
class RunFormatOptions:
    """What ``search --questions`` writes on stdout, checked together (:func:`_trec_format`)."""

    format_: str | None = option(
        "With --questions: what stdout gets, one JSON line of hits per question "
        "(jsonl, the default) or a TREC run, qid Q0 docid rank score tag (trec; docid: the "
        "passage id, or the document id at --unit document)",
        "--format",
        metavar="jsonl|trec",
    )
    run_tag: str | None = option(
        "With --format trec: the run's tag, its last column (default anygrain)"
    )


@with_panels(
    {
        panels.INPUT: ("question_file", "questions", "verify"),
        panels.SEARCH: ("k", "unit", "filter_", "model", *panels.HYBRID_SEARCH),
        panels.PHRASE: (*panels.PHRASE_SEARCH, "stats"),
        panels.ANSWER: (
            "read",
            "reader",
            "retriever_weight",
            "min_confidence",
            "read_window",
            "read_sure",
        ),
        panels.OUTPUT: ("as_json", "format_", "run_tag", "quiet"),
        panels.PERFORMANCE: ("threads", "device", "runtime", "batch_size"),
    }
)
@with_search_options(lead=8)
@config_options(AnswerOptions, lead=8)
@config_options(RunFormatOptions, lead=16)
def search_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    query: Annotated[
        str | None, typer.Argument(help="The question (or use --question-file)")
    ] = None,
    question_file: Annotated[
        str | None,
        typer.Option(
            "--question-file",
            help="Read the one question from this file, or stdin with - (one line)",
        ),
    ] = None,
    questions: Annotated[
        str | None,
        typer.Option(
            "--questions",
            help="Batch search: a file with one question per line (- for stdin), or "
            "FORMAT:PATH of any question format; one JSON line per question on stdout",
        ),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="How many hits")] = 10,
    unit: Annotated[
        Unit | None,
        typer.Option(help="Grain (phrase indexes): phrase | sentence | passage | document"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit on stdout")
    ] = False,
    model: QueryModelOpt = None,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    runtime: RuntimeOpt = None,
    verify: VerifyOpt = Verify.SMALL,
    stats: Annotated[
        bool,
        typer.Option("--stats", help="Phrase indexes: print the unit search's rounds (stderr)"),
    ] = False,
    quiet: QuietOpt = False,
    batch_size: BatchSizeOpt = None,
    filter_: FilterOpt = None,
    **search: Any,
) -> None:
    """Search an index with one question (phrase indexes: answer phrases in their context),
    or with many (--questions: one JSON line of hits per question, or a TREC run with
    --format trec).  --unit answer (or --read K) reads the top K passages of any index with
    a reader: the answer span with its sentence and passage."""
    from anygrain.api import one_question_runtime, search_index

    try:
        trec = _trec_format(
            **take_options(RunFormatOptions, search), questions=questions, as_json=as_json
        )
    except AnygrainError as e:
        fail(e)
    reading = take_options(AnswerOptions, search)
    if questions is not None:
        _search_batch(
            index_dir, questions, query, question_file, k, unit, model, stats, quiet,
            verify, device, threads,
            (search, batch_size, filter_),
            reading,
            runtime=runtime,
            trec=trec,
        )  # fmt: skip
        return
    collected: list[Any] = []
    try:
        question = _read_question(query, question_file)
        idx, opts = load_searched(
            index_dir, unit, k, (search, batch_size, filter_), reading, runtime,
            verify=verify, model=model, device=device,
        )  # fmt: skip
        opts["stats"] = collected if stats else None
        one = one_question_runtime(runtime)  # the reader's, for one question
        hits = search_index(idx, [question], k, unit=unit, threads=threads, runtime=one, **opts)[0]
    except AnygrainError as e:
        fail(e)
        return
    print_hits(hits, idx, collected, as_json=as_json)


def print_hits(hits: Sequence[Hit], idx: Index, collected: Sequence[Any], *, as_json: bool) -> None:
    """One question's hits on stdout, as answers, phrases in context, JSON lines or a table
    (by what they are and ``as_json``), after the unit search's rounds ``collected`` (--stats)
    on stderr."""
    for st in collected:
        console.print(
            f"unit search: {st.rounds} round(s), depth {st.depth}, {st.units} units, "
            f"exhausted {st.exhausted}, exact {st.exact}"
        )
    if hits and (hits[0].unit is Unit.ANSWER or hits[0].confidence is not None):
        print_answer_hits(hits, as_json=as_json)
        return
    if Unit.PHRASE in idx.units:
        print_phrase_hits(hits, as_json=as_json)
        return
    if as_json:
        print_json_hits(hits)
        return
    table = Table(show_lines=True)
    for col in ("#", "score", "title", "text"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        text = h.text if len(h.text) < 400 else h.text[:400] + "…"
        table.add_row(str(i), f"{h.score:.3f}", escape(h.citation), escape(text))
    out.print(table)


def _search_batch(
    index_dir: Path,
    questions: str,
    query: str | None,
    question_file: str | None,
    k: int,
    unit: Unit | None,
    model: str | None,
    stats: bool,
    quiet: bool,
    verify: Verify,
    device: str | None,
    threads: int | None,
    given: tuple[Mapping[str, Any], int | None, list[str] | None],
    reading: dict[str, Any],
    *,
    runtime: Runtime | None = None,
    trec: str | None = None,
) -> None:
    """``search --questions``: one JSON line per question, ``{"id", "question", "hits"}``,
    or its TREC run lines tagged ``trec`` (when given), printed as each chunk of questions
    comes back; the progress bar is on stderr."""
    from anygrain.api import run_lines, search_questions

    try:
        if query is not None or question_file is not None:
            raise AnygrainError(
                "give the questions with --questions, or one question as an argument or "
                "with --question-file, not both"
            )
        if stats:
            raise AnygrainError("--stats takes one question, not --questions")
        idx, opts = load_searched(
            index_dir, unit, k, given, reading, runtime, verify=verify, model=model, device=device
        )
        for result in search_questions(
            idx,
            questions,
            k,
            unit=unit,
            threads=threads,
            progress=not quiet,
            runtime=runtime,
            **opts,
        ):
            if trec is None:
                print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
            else:
                sys.stdout.writelines(run_lines(result.id, result.hits, trec))
                sys.stdout.flush()
    except AnygrainError as e:
        fail(e)


def _trec_format(
    format_: str | None, run_tag: str | None, questions: str | None, as_json: bool
) -> str | None:
    """The tag of a TREC run ``--format trec`` asks for (None: JSON lines); a format other
    than :data:`FORMATS`, or given without ``--questions``, refused by name."""
    if run_tag is not None and format_ != "trec":
        raise AnygrainError("--run-tag is a TREC run's: it takes --format trec")
    if format_ is None:
        return None
    if format_ not in FORMATS:
        raise AnygrainError(f"--format must be one of {', '.join(FORMATS)}, not {format_!r}")
    if questions is None:
        raise AnygrainError(
            "--format takes --questions (a batch search); one question prints a table, or "
            "JSON lines with --json"
        )
    if as_json:
        raise AnygrainError("--json is one question's; with --questions use --format jsonl")
    if format_ == "jsonl":
        return None
    from anygrain.api import check_run_tag

    return check_run_tag("anygrain" if run_tag is None else run_tag)
