"""``anygrain train``: every trainer (dpr, phrase, reader, phrase-query-side) and the saved
recipes.  Thin wrappers that build a config and call the trainer; their options come from the
config dataclass (:func:`~anygrain.cli.common.config_options`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from anygrain.cli import panels
from anygrain.cli.common import Trainer, config_options, console, trainer_command
from anygrain.cli.panels import with_panels
from anygrain.errors import AnygrainError
from anygrain.train.dpr.config import DprTrainConfig
from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig
from anygrain.train.reader.config import ReaderTrainConfig

train_app = typer.Typer(
    no_args_is_help=True,
    help="Train models: DPR bi-encoders, phrase models (full or query-side: the passage index stays valid) and readers.",
)


#: the options every trainer takes: its data, its output, the fit and where it runs
TRAINER_OPTIONS = ("train", "out", "epochs", "batch_size", "lr", "max_examples", "bf16", "threads")
#: and those of every trainer that fits a whole model (not the query side alone)
MODEL_TRAINER_OPTIONS = (*TRAINER_OPTIONS, "model", "device", "seed", "checkpoint_every")

DPR_OPTIONS = (
    *MODEL_TRAINER_OPTIONS,
    "corpus",
    "id_prefix",
    "mode",
    "hard_negatives",
    "grad_cache",
    "temperature",
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
@trainer_command("trained model")
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
    **settings: Any,
) -> Trainer:
    """Train a DPR bi-encoder (in-batch + BM25 hard negatives) and save it to --out."""
    from anygrain.api import recipe_config, train_dpr

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
    return partial(train_dpr, config)


@train_app.command("recipes")
def recipes_cmd() -> None:
    """List the saved training recipes and the variables each needs."""
    from anygrain.api import training_recipes

    for name, r in training_recipes():
        typer.echo(f"{name}: {r.description}")
        for key, what in r.variables.items():
            typer.echo(f"    --var {key}=...  {what}")


PHRASE_OPTIONS = (
    *MODEL_TRAINER_OPTIONS,
    "max_minutes",
    "fit_budget",
    "question_encoder",
    "in_batch",
    "teacher",
    "in_batch_negatives",
    "hard_negatives",
    "grad_clip",
    "freeze_embeddings",
    "max_passage_length",
    "doc_stride",
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
@trainer_command("trained phrase model")
def train_phrase_cmd(
    prebatch: Annotated[
        bool, typer.Option("--prebatch/--no-prebatch", help="Pre-batch negatives (last 2 batches)")
    ] = True,
    **settings: Any,
) -> Trainer:
    """Train a DensePhrases model (single-passage, in-batch and pre-batch losses, filter)."""
    from anygrain.api import train_phrase

    return partial(train_phrase, PhraseTrainConfig(**settings, pre_batch=2 if prebatch else 0))


READER_OPTIONS = (
    *MODEL_TRAINER_OPTIONS,
    "negatives",
    "max_length",
    "selection_bce",
    "teacher",
    "distill",
    "temperature",
    "hidden_distill",
    "layers",
    "micro_batch",
    "max_minutes",
    "fit_budget",
    "freeze_embeddings",
)


@train_app.command("reader")
@with_panels(
    {
        panels.INPUT: ("train", "retriever", "max_examples", "max_length", "on_error"),
        panels.MODEL: ("model", "layers", "teacher", "freeze_embeddings"),
        panels.TRAINING: (
            "epochs", "batch_size", "lr", "negatives", "selection_bce", "distill",
            "temperature", "hidden_distill", "max_minutes", "fit_budget", "seed",
        ),
        panels.OUTPUT: ("out", "checkpoint_every", "resume", "quiet"),
        panels.PERFORMANCE: ("bf16", "device", "threads", "micro_batch"),
    }
)  # fmt: skip
@config_options(ReaderTrainConfig, READER_OPTIONS)
@trainer_command("trained reader")
def train_reader_cmd(
    retriever: Annotated[
        Path | None,
        typer.Option(
            "--retriever",
            help="Index to draw negatives from (DPR); default: other paragraphs of the same file",
        ),
    ] = None,
    **settings: Any,
) -> Trainer:
    """Train an extractive reader (span + passage selection, DPR section 6) and save it to --out."""
    from anygrain.api import train_reader

    return partial(train_reader, ReaderTrainConfig(**settings), retriever=retriever)


QUERY_SIDE_OPTIONS = (*TRAINER_OPTIONS, "index", "loss", "top_k")


def _how_to_use(model: Path) -> None:
    """What the query-side trainer's output is for, said after it trained."""
    console.print(f"use it with `anygrain eval INDEX --model {escape(str(model))}`")


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
@trainer_command("phrase model (query side fine-tuned)", then=_how_to_use)
def train_query_side_cmd(**settings: Any) -> Trainer:
    """Fine-tune a phrase model's question encoder against a built phrase index."""
    from anygrain.api import train_phrase_query_side

    return partial(train_phrase_query_side, PhraseQuerySideConfig(**settings))
