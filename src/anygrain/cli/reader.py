"""``anygrain ask INDEX_DIR "question" --reader DIR [-k 5] [--json]``: retrieve, read and print
the answer with its evidence (``train reader`` is in :mod:`anygrain.cli.train`, ``eval-reader``
in :mod:`anygrain.cli.eval`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli.common import at_least_one, fail, out
from anygrain.errors import AnygrainError


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
    from anygrain.api import ask

    try:
        at_least_one("-k", k)
        answer, hits = ask(index_dir, question, reader_dir, k=k)
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
