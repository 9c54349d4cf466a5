"""``anygrain demo``: index CPython's bundled reference topics and answer ten questions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli.common import QuietOpt, console, fail, out
from anygrain.corpus.lang import Lang
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit


def demo_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write the demo index")] = Path(
        "anygrain-demo"
    ),
    kind: Annotated[
        str, typer.Option(help="Index kind: phrase (shipped phrase model), bm25, dense, hybrid")
    ] = "phrase",
    max_documents: Annotated[
        int | None,
        typer.Option("--max-documents", help="Index only the first N reference topics (quicker)"),
    ] = None,
    lang: Annotated[
        Lang,
        typer.Option(help="en: CPython's reference topics; zh: Chinese topics, Chinese models"),
    ] = Lang.EN,
    read: Annotated[
        bool,
        typer.Option(
            "--read/--no-read",
            help="Also read the top passages with the shipped reader (the answer grain)",
        ),
    ] = True,
    reader: Annotated[
        str | None, typer.Option("--reader", help="Reader to read with (default: shipped)")
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Index CPython's bundled reference topics (offline) and answer ten questions: the
    reader's answer in its sentence, the answer phrase, its sentence and its passage (phrase
    index), or the read answer and passages (other kinds)."""
    from anygrain.api import run_demo

    try:
        result = run_demo(
            out_dir,
            kind=kind,
            progress=not quiet,
            max_documents=max_documents,
            lang=lang,
            read=read,
            reader=reader,
        )
    except AnygrainError as e:
        fail(e)
        return
    if result.reused:
        console.print(f"reusing the demo index at {out_dir} (same corpus and model)")
    for a in result.answers:
        out.print(f"[bold]Q:[/] {escape(a.question.text)}", highlight=False)
        for unit, hits in a.hits.items():
            if not hits:
                out.print(f"   {unit.value:8} (no hit)", highlight=False)
                continue
            h = hits[0]
            if unit is Unit.ANSWER and h.span is not None:
                # the read answer marked inside its sentence
                s0, s1 = h.span
                sa, sb = h.sentence or (s0, s1)
                # whitespace runs shown as one space, the answer's edges kept as they are
                before, answer, after = (
                    re.sub(r"\s+", " ", x) for x in (h.text[sa:s0], h.text[s0:s1], h.text[s1:sb])
                )
                line = (
                    f"[bold cyan]{escape(answer)}[/]  [green]{escape(h.title)}[/]  "
                    f"{escape(before.lstrip())}[bold cyan]{escape(answer)}[/]{escape(after.rstrip())}"
                )
            elif unit is Unit.PHRASE:
                # the phrase marked inside its context: what the demo is about
                before, phrase, after = (x.replace("\n", " ") for x in h.context(width=40))
                line = (
                    f"[bold yellow]{escape(phrase)}[/]  [green]{escape(h.title)}[/]  "
                    f"{escape(before)}[bold yellow]{escape(phrase)}[/]{escape(after)}"
                )
            else:
                text = " ".join(h.text.split())
                text = text[:100] + ("…" if len(text) > 100 else "")
                line = f"[green]{escape(h.title)}[/]  {escape(text)}"
            out.print(
                f"   {unit.value:8} {line}",
                highlight=False,
                soft_wrap=True,
            )
    print(json.dumps(result.to_dict()))
