"""``anygrain search``: one question, its hits printed as a table or as JSON lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from anygrain.cli.common import (
    DeviceOpt,
    FusionDepthOpt,
    FusionOpt,
    FusionWeightOpt,
    SparseWeightOpt,
    ThreadsOpt,
    VerifyOpt,
    console,
    device_option,
    fail,
    fusion_options,
    model_option,
    out,
)
from anygrain.errors import AnygrainError
from anygrain.search.highlight import phrase_context
from anygrain.search.hit import Hit, Unit
from anygrain.utils.checksums import Verify


def _read_question(query: str | None, question_file: str | None) -> str:
    """The question from the argument, a file, or stdin (``-``): a long question cannot be
    an argument (the OS limits their length)."""
    if query is not None and question_file is not None:
        raise AnygrainError("give the question as an argument or with --question-file, not both")
    if query is None and question_file is None:
        raise AnygrainError(
            "give the question as an argument, or --question-file PATH (- for stdin)"
        )
    if query is not None:
        return query
    assert question_file is not None
    if question_file == "-":
        text = sys.stdin.read()
    else:
        p = Path(question_file)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise AnygrainError(f"{p}: no such file") from None
        except UnicodeDecodeError as e:
            raise AnygrainError(f"{p}: not UTF-8 text (byte {e.start})") from None
    text = text.strip()
    if not text:
        raise AnygrainError(
            f"{'stdin' if question_file == '-' else question_file}: the question is empty"
        )
    return text


def print_phrase_hits(
    hits: Sequence[Hit], *, as_json: bool = False, console_: Console | None = None
) -> None:
    """Answer phrases (or sentences) highlighted in their context; passages and documents in brief."""
    if as_json:
        for h in hits:
            print(json.dumps(h.to_dict(), ensure_ascii=False))
        return
    c = console_ or out
    table = Table(show_lines=True)
    for col in ("#", "score", "answer", "title", "context"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        before, phrase, after = phrase_context(h)
        answer = phrase if h.span is not None else ""
        ctx = f"{escape(before)}[bold yellow]{escape(phrase)}[/]{escape(after)}"
        table.add_row(str(i), f"{h.score:.3f}", escape(answer), escape(h.title), ctx)
    c.print(table)


def search_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    query: Annotated[
        str | None, typer.Argument(help="The question (or use --question-file)")
    ] = None,
    question_file: Annotated[
        str | None,
        typer.Option("--question-file", help="Read the question from this file, or stdin with -"),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="How many hits")] = 10,
    unit: Annotated[
        Unit | None,
        typer.Option(help="Grain (phrase indexes): phrase | sentence | passage | document"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit on stdout")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="Question-side model to search with (query-side fine-tuned)"),
    ] = None,
    fusion: FusionOpt = None,
    fusion_weight: FusionWeightOpt = None,
    fusion_depth: FusionDepthOpt = None,
    sparse_weight: SparseWeightOpt = None,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    verify: VerifyOpt = Verify.SMALL,
    stats: Annotated[
        bool,
        typer.Option("--stats", help="Phrase indexes: print the unit search's rounds (stderr)"),
    ] = False,
) -> None:
    """Search an index with one question (phrase indexes: answer phrases in their context)."""
    from anygrain.api import search_index
    from anygrain.index.base import Index

    collected: list[Any] = []
    try:
        question = _read_question(query, question_file)
        opts = fusion_options(index_dir, fusion, fusion_weight, fusion_depth, sparse_weight)
        idx = Index.load(
            index_dir, verify=verify, **model_option(index_dir, model), **device_option(device)
        )
        if stats and idx.cuts_units():
            opts["stats"] = collected
        hits = search_index(idx, [question], k, unit=unit, threads=threads, **opts)[0]
    except AnygrainError as e:
        fail(e)
        return
    for st in collected:
        console.print(
            f"unit search: {st.rounds} round(s), depth {st.depth}, {st.units} units, "
            f"exhausted {st.exhausted}, exact {st.exact}"
        )
    if Unit.PHRASE in idx.units:
        print_phrase_hits(hits, as_json=as_json)
        return
    if as_json:
        for h in hits:
            print(json.dumps(h.to_dict(), ensure_ascii=False))
        return
    table = Table(show_lines=True)
    for col in ("#", "score", "title", "text"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        text = h.text if len(h.text) < 400 else h.text[:400] + "…"
        table.add_row(str(i), f"{h.score:.3f}", h.title, text)
    out.print(table)
