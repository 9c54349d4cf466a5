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
from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli_common import (
    BF16Opt,
    CheckpointEveryOpt,
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    fail,
    out,
    run_trainer,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.reader.evaluate import evaluate_reader

__all__ = ["ask_cmd", "eval_reader_cmd", "evaluate_reader", "train_reader_cmd"]


def _threads(n: int | None) -> None:
    if n is not None:
        import torch

        torch.set_num_threads(max(1, n))


def train_reader_cmd(
    train: Annotated[
        list[str],
        typer.Option("--train", help="SQuAD-format training data, FORMAT:PATH or PATH; repeatable"),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", help="Reader directory to write (also holds checkpoints and log)"),
    ],
    model: Annotated[
        str,
        typer.Option(
            help="Starting encoder: alias (minilm, me5-small), hub name, directory, or a reader"
        ),
    ] = "minilm",
    retriever: Annotated[
        Path | None,
        typer.Option(
            "--retriever",
            help="Index to draw negatives from (DPR); default: other paragraphs of the same file",
        ),
    ] = None,
    epochs: Annotated[int, typer.Option(help="Passes over the training questions")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Questions per step")] = 4,
    lr: Annotated[
        float, typer.Option(help="Peak learning rate (linear warm-up, then linear decay)")
    ] = 1e-4,
    negatives: Annotated[
        int, typer.Option("--negatives", help="Negative passages per question (DPR m-1 = 23)")
    ] = 7,
    max_length: Annotated[
        int, typer.Option("--max-length", help="Tokens per passage window")
    ] = 256,
    max_examples: Annotated[
        int | None,
        typer.Option(
            "--max-examples", help="Train on a seeded random subset of this many questions"
        ),
    ] = None,
    bf16: BF16Opt = False,
    seed: Annotated[int, typer.Option(help="Seed for data order, negatives and dropout")] = 12345,
    checkpoint_every: CheckpointEveryOpt = 200,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train an extractive reader (span + passage selection, DPR section 6) and save it to --out."""
    from anygrain.train import reader

    def run(errors: ErrorLog) -> Path:
        config = reader.ReaderTrainConfig(
            train=train,
            out=str(out),
            model=model,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            negatives=negatives,
            max_length=max_length,
            max_examples=max_examples,
            bf16=bf16,
            seed=seed,
            checkpoint_every=checkpoint_every,
            threads=threads,
        )
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
    from anygrain.reader import Reader, read
    from anygrain.search.index import Index

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
    from anygrain.reader import Reader
    from anygrain.search.index import Index

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
