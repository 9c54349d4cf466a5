"""``anygrain train``: every trainer (dpr, phrase, reader, phrase-query-side) and the saved
recipes.  Thin wrappers that build a config and call the trainer; their options come from the
config dataclass (:func:`~anygrain.cli.common.config_options`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from anygrain.cli import panels
from anygrain.cli.common import (
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    config_options,
    console,
    run_trainer,
)
from anygrain.cli.panels import with_panels
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.train.dpr.config import DprTrainConfig
from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig
from anygrain.train.reader.config import ReaderTrainConfig

train_app = typer.Typer(
    no_args_is_help=True,
    help="Fine-tune retrievers: DPR bi-encoders, fully or query-side only (the passage index stays valid).",
)


DPR_OPTIONS = (
    "train",
    "out",
    "corpus",
    "id_prefix",
    "model",
    "mode",
    "epochs",
    "batch_size",
    "lr",
    "hard_negatives",
    "bf16",
    "device",
    "grad_cache",
    "max_examples",
    "seed",
    "temperature",
    "threads",
    "checkpoint_every",
)


@train_app.command("dpr")
@with_panels(
    {
        panels.INPUT: ("recipe", "var", "train", "corpus", "id_prefix", "max_examples", "on_error"),
        panels.MODEL: ("model", "mode", "temperature"),
        panels.TRAINING: ("epochs", "batch_size", "lr", "hard_negatives", "grad_cache", "seed"),
        panels.OUTPUT: ("out", "checkpoint_every", "resume", "quiet"),
        panels.PERFORMANCE: ("bf16", "device", "threads"),
    }
)
@config_options(DprTrainConfig, DPR_OPTIONS, optional=("train", "out"))  # a recipe may give them
def dpr_cmd(
    ctx: typer.Context,
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
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Train a DPR bi-encoder (in-batch + BM25 hard negatives) and save it to --out."""
    from anygrain.api import recipe_config, train_dpr

    def run(errors: ErrorLog) -> Path:
        if recipe is not None:
            # Typer may vendor click: compare the source by name, not by class.
            given = {
                k: v
                for k, v in settings.items()
                if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"
            }
            config = recipe_config(recipe, var or [], overrides=given)
        else:
            if not settings["train"] or settings["out"] is None:
                raise AnygrainError("give --train and --out, or a --recipe")
            config = DprTrainConfig(**settings)
        return train_dpr(config, progress=not quiet, resume=resume, errors=errors)

    run_trainer(run, on_error, "trained model")


@train_app.command("recipes")
def recipes_cmd() -> None:
    """List the saved training recipes and the variables each needs."""
    from anygrain.api import training_recipes

    for name, r in training_recipes():
        typer.echo(f"{name}: {r.description}")
        for key, what in r.variables.items():
            typer.echo(f"    --var {key}=...  {what}")


PHRASE_OPTIONS = (
    "train",
    "out",
    "model",
    "epochs",
    "batch_size",
    "lr",
    "max_minutes",
    "fit_budget",
    "question_encoder",
    "in_batch",
    "teacher",
    "in_batch_negatives",
    "hard_negatives",
    "grad_clip",
    "freeze_embeddings",
    "bf16",
    "device",
    "max_passage_length",
    "doc_stride",
    "max_examples",
    "seed",
    "threads",
    "checkpoint_every",
)


@train_app.command("phrase")
@with_panels(
    {
        panels.INPUT: ("train", "max_examples", "max_passage_length", "doc_stride", "on_error"),
        panels.MODEL: ("model", "question_encoder", "teacher", "freeze_embeddings"),
        panels.TRAINING: (
            "epochs", "batch_size", "lr", "max_minutes", "fit_budget", "in_batch",
            "in_batch_negatives", "hard_negatives", "prebatch", "grad_clip", "seed",
        ),
        panels.OUTPUT: ("out", "checkpoint_every", "resume", "quiet"),
        panels.PERFORMANCE: ("bf16", "device", "threads"),
    }
)  # fmt: skip
@config_options(PhraseTrainConfig, PHRASE_OPTIONS)
def train_phrase_cmd(
    prebatch: Annotated[
        bool, typer.Option("--prebatch/--no-prebatch", help="Pre-batch negatives (last 2 batches)")
    ] = True,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Train a DensePhrases model (single-passage, in-batch and pre-batch losses, filter)."""
    from anygrain.api import train_phrase

    def run(errors: ErrorLog) -> Path:
        cfg = PhraseTrainConfig(**settings, pre_batch=2 if prebatch else 0)
        return train_phrase(cfg, progress=not quiet, resume=resume, errors=errors)

    run_trainer(run, on_error, "trained phrase model")


READER_OPTIONS = (
    "train",
    "out",
    "model",
    "epochs",
    "batch_size",
    "lr",
    "negatives",
    "max_length",
    "selection_bce",
    "micro_batch",
    "max_examples",
    "max_minutes",
    "fit_budget",
    "freeze_embeddings",
    "bf16",
    "device",
    "seed",
    "threads",
    "checkpoint_every",
)


@train_app.command("reader")
@with_panels(
    {
        panels.INPUT: ("train", "retriever", "max_examples", "max_length", "on_error"),
        panels.MODEL: ("model", "freeze_embeddings"),
        panels.TRAINING: (
            "epochs", "batch_size", "lr", "negatives", "selection_bce", "max_minutes",
            "fit_budget", "seed",
        ),
        panels.OUTPUT: ("out", "checkpoint_every", "resume", "quiet"),
        panels.PERFORMANCE: ("bf16", "device", "threads", "micro_batch"),
    }
)  # fmt: skip
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
    from anygrain.api import train_reader

    def run(errors: ErrorLog) -> Path:
        config = ReaderTrainConfig(**settings)
        return train_reader(
            config, retriever=retriever, progress=not quiet, resume=resume, errors=errors
        )

    run_trainer(run, on_error, "trained reader")


QUERY_SIDE_OPTIONS = (
    "index",
    "train",
    "out",
    "loss",
    "epochs",
    "batch_size",
    "lr",
    "top_k",
    "max_examples",
    "bf16",
    "threads",
)


@train_app.command("phrase-query-side")
@with_panels(
    {
        panels.INPUT: ("train", "max_examples", "on_error"),
        panels.TRAINING: ("loss", "epochs", "batch_size", "lr", "top_k"),
        panels.OUTPUT: ("out", "resume", "quiet"),
        panels.PERFORMANCE: ("bf16", "threads"),
    }
)
@config_options(PhraseQuerySideConfig, QUERY_SIDE_OPTIONS)
def train_query_side_cmd(
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Fine-tune a phrase model's question encoder against a built phrase index."""
    from anygrain.api import train_phrase_query_side

    def run(errors: ErrorLog) -> Path:
        cfg = PhraseQuerySideConfig(**settings)
        return train_phrase_query_side(cfg, progress=not quiet, resume=resume, errors=errors)

    path = run_trainer(run, on_error, "phrase model (query side fine-tuned)")
    console.print(f"use it with `anygrain eval INDEX --model {escape(str(path))}`")
