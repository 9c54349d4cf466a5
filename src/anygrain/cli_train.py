"""``anygrain train``: fine-tune retrievers.  Thin wrappers that build a config and call the API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from anygrain.cli_common import fail
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy

train_app = typer.Typer(
    no_args_is_help=True,
    help="Fine-tune retrievers: DPR bi-encoders, fully or query-side only (the passage index stays valid).",
)
console = Console(stderr=True)


@train_app.command("dpr")
def dpr_cmd(
    train: Annotated[
        list[str],
        typer.Option(
            "--train",
            help="Training data, FORMAT:PATH or PATH (dpr-train JSON/JSONL, or SQuAD-format JSON); repeatable",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Model directory to write (also holds checkpoints, cache and log)"
        ),
    ],
    model: Annotated[
        str,
        typer.Option(
            help="Starting encoder: alias (minilm, me5-small), hub name, directory, or an anygrain model"
        ),
    ] = "minilm",
    mode: Annotated[
        str,
        typer.Option(
            help="full: train both encoders; query-side: only the question encoder, so an index built with the base model still fits"
        ),
    ] = "full",
    epochs: Annotated[int, typer.Option(help="Passes over the training data")] = 1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Questions per step (in-batch negatives)")
    ] = 32,
    lr: Annotated[
        float, typer.Option(help="Peak learning rate (linear warm-up, then linear decay)")
    ] = 2e-5,
    hard_negatives: Annotated[
        int, typer.Option("--hard-negatives", help="BM25 hard negatives per question (full mode)")
    ] = 1,
    bf16: Annotated[
        bool,
        typer.Option(
            "--bf16/--no-bf16",
            help="bfloat16 autocast (faster on CPUs with native bf16; slower without, slightly less exact)",
        ),
    ] = False,
    grad_cache: Annotated[
        bool,
        typer.Option(
            "--grad-cache/--no-grad-cache",
            help="Gradient caching: batch size not bounded by memory (each batch is encoded twice: ~1.5x time)",
        ),
    ] = False,
    max_examples: Annotated[
        int | None,
        typer.Option("--max-examples", help="Train on a seeded random subset of this size"),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for data order, negatives and dropout")] = 12345,
    temperature: Annotated[
        float | None,
        typer.Option(help="Softmax temperature (default: 0.05 for normalised encoders, else 1)"),
    ] = None,
    checkpoint_every: Annotated[
        int,
        typer.Option("--checkpoint-every", help="Steps between checkpoints (0: end of epoch only)"),
    ] = 100,
    resume: Annotated[
        bool,
        typer.Option("--resume/--no-resume", help="Continue from the last checkpoint in --out"),
    ] = True,
    on_error: Annotated[
        ErrorPolicy,
        typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
    ] = ErrorPolicy.STOP,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    """Train a DPR bi-encoder (in-batch + BM25 hard negatives) and save it to --out."""
    from anygrain.train import DprTrainConfig, train_dpr

    errors = ErrorLog(on_error)
    try:
        config = DprTrainConfig(
            train=train,
            out=str(out),
            model=model,
            mode=mode,  # type: ignore[arg-type]
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            hard_negatives=hard_negatives,
            bf16=bf16,
            grad_cache=grad_cache,
            max_examples=max_examples,
            seed=seed,
            temperature=temperature,
            checkpoint_every=checkpoint_every,
        )
        path = train_dpr(config, progress=not quiet, resume=resume, errors=errors)
    except (AnygrainError, ValueError) as e:
        fail(e)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted; a checkpoint was saved: rerun the same command to resume[/]"
        )
        raise typer.Exit(130) from None
    if errors.n_skipped:
        console.print(f"[yellow]{errors.summary()}[/]")
    console.print(f"trained model → {path}")
