"""``anygrain add``, ``delete`` and ``compact``: changing a built index's documents
(:mod:`anygrain.index.updater`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from anygrain.cli.common import (
    SPLIT_HELP,
    DeviceOpt,
    OnErrorOpt,
    QuietOpt,
    ThreadsOpt,
    fail,
    out,
)
from anygrain.cli.index import BuildRuntimeOpt
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy


def add_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory to add to")],
    source: Annotated[str, typer.Argument(help="Documents to add: FORMAT:PATH or PATH")],
    split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=f"Passage split (default: the corpus's own): {SPLIT_HELP}"),
    ] = None,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    runtime: BuildRuntimeOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Add documents to an index: only new passages are encoded; old rows and ids stay.

    BM25 statistics are corpus-wide, so a BM25 part is rebuilt from the grown corpus."""
    from anygrain.api import add_documents

    errors = ErrorLog(on_error)
    try:
        idx = add_documents(
            index_dir,
            source,
            split=split,
            errors=errors,
            progress=not quiet,
            threads=threads,
            device=device,
            runtime=runtime.value if runtime is not None else None,
        )
    except AnygrainError as e:
        fail(e)
    s = idx.summary()
    out.print(
        json.dumps(
            {
                "kind": s["kind"],
                "index": str(index_dir),
                "n_passages": s["corpus"]["n_passages"],
                "n_documents": s["corpus"]["n_documents"],
                "n_skipped_records": errors.n_skipped,
            }
        ),
        highlight=False,
        soft_wrap=True,
    )


def delete_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    doc: Annotated[list[str], typer.Option("--doc", help="Document id to delete (repeatable)")],
) -> None:
    """Mark documents deleted: searches skip them at once; `anygrain compact` drops them."""
    from anygrain.api import delete_documents

    try:
        res = delete_documents(index_dir, doc)
    except AnygrainError as e:
        fail(e)
    out.print(json.dumps(res, ensure_ascii=False), highlight=False, soft_wrap=True)


def compact_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rebuild an index without its deleted documents, reusing its stored vectors."""
    from anygrain.api import compact_index

    try:
        idx = compact_index(index_dir, progress=not quiet, threads=threads)
    except AnygrainError as e:
        fail(e)
    out.print(
        json.dumps({"index": str(index_dir), "n_passages": idx.summary()["corpus"]["n_passages"]}),
        highlight=False,
        soft_wrap=True,
    )
