"""What every CLI module shares: the consoles, the one way errors are printed, the options
every trainer takes, and the one way a trainer is run from the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy

console = Console(stderr=True)
out = Console()

# Options with the same meaning in every trainer (each command sets its own default).
BF16Opt = Annotated[
    bool,
    typer.Option(
        "--bf16/--no-bf16",
        help="bfloat16 autocast: ~1.3x faster on CPUs with native bf16, several times slower without",
    ),
]
ThreadsOpt = Annotated[
    Optional[int],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--threads", help="torch threads (default: torch's); 1 on a CPU shared with other jobs"
    ),
]
CheckpointEveryOpt = Annotated[
    int,
    typer.Option(
        "--checkpoint-every", help="Steps between checkpoints (0: end of each epoch only)"
    ),
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume/--no-resume", help="Continue from the last checkpoint in --out")
]
OnErrorOpt = Annotated[
    ErrorPolicy,
    typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")]


def fail(e: Exception) -> NoReturn:
    """Print an anygrain error as one unwrapped line (no traceback) and exit with status 2.

    Escaped, so paths or ids with brackets are not read as markup; not wrapped, so the
    file, line and field stay on one line for people and for scripts that grep them.
    """
    console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def run_trainer(train: Callable[[ErrorLog], Path], on_error: ErrorPolicy, what: str) -> Path:
    """Run ``train(errors)`` as a command: errors as one line (exit 2), Ctrl-C as exit 130
    after the trainer's checkpoint, skipped records counted, then ``what → path``."""
    errors = ErrorLog(on_error)
    try:
        path = train(errors)
    except (AnygrainError, ValueError) as e:
        fail(e)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted; a checkpoint was saved: rerun the same command to resume[/]"
        )
        raise typer.Exit(130) from None
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]")
    console.print(f"{what} → {escape(str(path))}")
    return path
