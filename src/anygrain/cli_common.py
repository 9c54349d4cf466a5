"""What every CLI module shares: the consoles and the one way errors are printed."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)
out = Console()


def fail(e: Exception) -> None:
    """Print an anygrain error as one unwrapped line (no traceback) and exit with status 2.

    Escaped, so paths or ids with brackets are not read as markup; not wrapped, so the
    file, line and field stay on one line for people and for scripts that grep them.
    """
    console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)
