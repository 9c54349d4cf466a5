"""``anygrain train``: fine-tune retrievers.  Thin wrappers that build a config and call the
trainer; their options come from the config dataclass (:func:`~anygrain.cli_common.config_options`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from anygrain.cli_common import OnErrorOpt, QuietOpt, ResumeOpt, config_options, run_trainer
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.train.dpr.config import DprTrainConfig

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
    "grad_cache",
    "max_examples",
    "seed",
    "temperature",
    "threads",
    "checkpoint_every",
)


@train_app.command("dpr")
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
    from anygrain.train import dpr

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
            if not settings["train"] or settings["out"] is None:
                raise AnygrainError("give --train and --out, or a --recipe")
            config = dpr.DprTrainConfig(**settings)
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
