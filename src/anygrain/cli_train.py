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
    ThreadsOpt,
    run_trainer,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy

train_app = typer.Typer(
    no_args_is_help=True,
    help="Fine-tune retrievers: DPR bi-encoders, fully or query-side only (the passage index stays valid).",
)


@train_app.command("dpr")
def dpr_cmd(
    ctx: typer.Context,
    train: Annotated[
        list[str] | None,
        typer.Option(
            "--train",
            help="Training data, FORMAT:PATH or PATH (dpr-train JSON/JSONL, SQuAD-format JSON, or qrels-based questions: multicpr, beir); repeatable",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Model directory to write (also holds checkpoints, cache and log)"
        ),
    ] = None,
    corpus: Annotated[
        list[str] | None,
        typer.Option(
            "--corpus",
            help="Passages for the --train source at the same position (e.g. multicpr:DIR/corpus.tsv); '' for the source's own; repeatable",
        ),
    ] = None,
    id_prefix: Annotated[
        list[str] | None,
        typer.Option(
            "--id-prefix",
            help="Prefix for the question and passage ids of the --train source at the same position (e.g. ecom-); repeatable",
        ),
    ] = None,
    recipe: Annotated[
        str | None,
        typer.Option(
            "--recipe",
            help="A saved recipe (name or JSON file: see 'anygrain train recipes'); options given here override it",
        ),
    ] = None,
    var: Annotated[
        list[str] | None,
        typer.Option("--var", help="NAME=VALUE for a recipe's ${NAME} slots; repeatable"),
    ] = None,
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
    threads: ThreadsOpt = None,
    checkpoint_every: CheckpointEveryOpt = 100,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
) -> None:
    """Train a DPR bi-encoder (in-batch + BM25 hard negatives) and save it to --out."""
    from anygrain.train import dpr

    settings = {
        "train": train or [],
        "out": str(out) if out is not None else None,
        "corpus": corpus or [],
        "id_prefix": id_prefix or [],
        "model": model,
        "mode": mode,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "hard_negatives": hard_negatives,
        "bf16": bf16,
        "grad_cache": grad_cache,
        "max_examples": max_examples,
        "seed": seed,
        "temperature": temperature,
        "threads": threads,
        "checkpoint_every": checkpoint_every,
    }

    def run(errors: ErrorLog) -> Path:
        if recipe is not None:
            from anygrain.train.dpr.recipe import load_recipe, parse_vars, recipe_config

            # Typer may vendor click: compare the source by name, not by class.
            given = {
                k: v
                for k, v in settings.items()
                if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"
            }
            config = recipe_config(load_recipe(recipe), parse_vars(var or []), overrides=given)
        else:
            if not train or out is None:
                raise AnygrainError("give --train and --out, or a --recipe")
            config = dpr.DprTrainConfig(**settings)  # type: ignore[arg-type]
        return dpr.train(config, progress=not quiet, resume=resume, errors=errors)

    run_trainer(run, on_error, "trained model")


@train_app.command("recipes")
def recipes_cmd() -> None:
    """List the saved training recipes and the variables each needs."""
    from anygrain.train.dpr.recipe import builtin_recipes, load_recipe

    for name in builtin_recipes():
        r = load_recipe(name)
        typer.echo(f"{name}: {r.description}")
        for key, what in r.variables.items():
            typer.echo(f"    --var {key}=...  {what}")
