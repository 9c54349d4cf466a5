"""Reader commands, as plain functions typer can register (the main CLI wires them):

* ``anygrain train reader --train FORMAT:PATH --out DIR [...]`` -> :func:`train_reader_cmd`
* ``anygrain ask INDEX_DIR "question" --reader DIR [-k 5] [--json]`` -> :func:`ask_cmd`
* ``anygrain eval-reader [INDEX_DIR] --questions FORMAT:PATH --reader DIR`` -> :func:`eval_reader_cmd`

:func:`evaluate_reader` (EM/F1, end to end or with the gold passage) is the API behind
the last one, re-exported here from :mod:`anygrain.reader.evaluate`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from anygrain.cli_common import (
    BF16Opt,
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    config_options,
    fail,
    out,
    run_trainer,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.reader.evaluate import evaluate_reader
from anygrain.train.reader.config import ReaderTrainConfig

__all__ = ["ask_cmd", "eval_reader_cmd", "evaluate_reader", "train_reader_cmd"]


def _threads(n: int | None) -> None:
    if n is not None:
        import torch

        torch.set_num_threads(max(1, n))


READER_OPTIONS = (
    "train",
    "out",
    "model",
    "epochs",
    "batch_size",
    "lr",
    "negatives",
    "max_length",
    "max_examples",
    "bf16",
    "seed",
    "threads",
    "checkpoint_every",
)


@config_options(ReaderTrainConfig, READER_OPTIONS)
def train_reader_cmd(
    retriever: Annotated[
        Path | None,
        typer.Option(
            "--retriever",
            help="Index to draw negatives from (DPR); default: other paragraphs of the same file",
        ),
    ] = None,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Train an extractive reader (span + passage selection, DPR section 6) and save it to --out."""
    from anygrain.train import reader

    def run(errors: ErrorLog) -> Path:
        config = reader.ReaderTrainConfig(**settings)
        return reader.train(
            config, retriever_index=retriever, progress=not quiet, resume=resume, errors=errors
        )

    run_trainer(run, on_error, "trained reader")


def ask_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    question: Annotated[str, typer.Argument(help="The question")],
    reader_dir: Annotated[
        Path, typer.Option("--reader", help="Reader directory (anygrain train reader)")
    ],
    k: Annotated[int, typer.Option("-k", help="Passages to retrieve and read")] = 5,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout")
    ] = False,
) -> None:
    """Retrieve k passages, read them, and print the answer with its evidence."""
    from anygrain.index.base import Index
    from anygrain.reader import Reader, read

    try:
        index = Index.load(index_dir)
        reader = Reader.load(reader_dir)
        hits = index.search_one(question, k)
        answer = read(reader, question, hits)
    except (AnygrainError, ValueError, OSError) as e:
        fail(e)
        return
    if as_json:
        typer.echo(json.dumps({"question": question, **answer.to_dict()}, ensure_ascii=False))
        return
    if answer.hit is None or answer.span is None:
        out.print("[yellow]no answer: nothing was retrieved or readable[/]")
        return
    start, end = answer.span
    text = answer.hit.text
    out.print(f"[bold green]{escape(answer.text)}[/]")
    out.print(
        f"[dim]span score {answer.score:.2f} · passage {answer.passage_index + 1}/{len(hits)} "
        f"(selection p={answer.selection_prob:.2f}, retrieval score {answer.hit.score:.3f})[/]"
    )
    out.print(f"[bold]{escape(answer.hit.title)}[/] [dim]({escape(answer.hit.passage_id)})[/]")
    out.print(
        f"{escape(text[:start])}[reverse]{escape(text[start:end])}[/reverse]{escape(text[end:])}",
        highlight=False,
    )


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
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """SQuAD EM/F1 of a reader: end to end over an index, or with the gold passage."""
    import tempfile

    from anygrain.api import load_questions
    from anygrain.corpus.store import CorpusStore
    from anygrain.index.base import Index
    from anygrain.reader import Reader

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
