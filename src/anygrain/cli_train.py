"""``anygrain train``: fine-tune retrievers.  Thin wrappers that build a config and call the API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from anygrain.cli_common import (
    BF16Opt,
    CheckpointEveryOpt,
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    run_trainer,
)
from anygrain.errors import ErrorLog, ErrorPolicy

train_app = typer.Typer(
    no_args_is_help=True,
    help="Fine-tune retrievers: DPR bi-encoders, fully or query-side only (the passage index stays valid).",
)


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
    bf16: BF16Opt = False,
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
    checkpoint_every: CheckpointEveryOpt = 100,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
) -> None:
    """Train a DPR bi-encoder (in-batch + BM25 hard negatives) and save it to --out."""
    from anygrain.train import DprTrainConfig, train_dpr

    def run(errors: ErrorLog) -> Path:
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
        return train_dpr(config, progress=not quiet, resume=resume, errors=errors)

    run_trainer(run, on_error, "trained model")
