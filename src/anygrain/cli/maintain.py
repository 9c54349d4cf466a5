"""``anygrain add``, ``delete`` and ``compact``: changing a built index's documents
(:mod:`anygrain.index.updater`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from anygrain.cli.common import (
    SPLIT_HELP,
    BuildRuntimeOpt,
    DeviceOpt,
    OnErrorOpt,
    QuietOpt,
    ThreadsOpt,
    config_options,
    fail,
    given_options,
    out,
)
from anygrain.cli.index import report_files
from anygrain.cli.kind_options import RecordFieldOptions
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy


@config_options(RecordFieldOptions, lead=8)  # after the command's own options
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
    **fields: Any,
) -> None:
    """Add documents to an index: only new passages are encoded; old rows and ids stay.

    A folder (or file) adds only its new and changed files (by content hash): a changed
    file's old passages are deleted and its new version added.  BM25 statistics are
    corpus-wide, so a BM25 part is rebuilt from the grown corpus."""
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
            **given_options(RecordFieldOptions, fields),
        )
    except AnygrainError as e:
        report_files(errors, quiet=True)
        fail(e)
    report_files(errors, quiet=True)
    s = idx.summary()
    d = {
        "kind": s["kind"],
        "index": str(index_dir),
        "n_passages": s["corpus"]["n_passages"],
        "n_documents": s["corpus"]["n_documents"],
        "n_skipped_records": errors.n_skipped,
    }
    if errors.files:
        read = [f for f in errors.files if f.read]
        d["files"] = {
            "new": sum(f.category != "changed" for f in read),
            "changed": sum(f.category == "changed" for f in read),
            "unchanged": sum(f.category == "unchanged" for f in errors.files),
            "skipped": [
                {"path": f.path, "reason": f.reason}
                for f in errors.files_skipped
                if f.category != "unchanged"
            ],
        }
    out.print(json.dumps(d, ensure_ascii=False), highlight=False, soft_wrap=True)


def delete_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    doc: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--doc", help="Document id to delete (repeatable)"),
    ] = None,
    file: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--file",
            help="Delete every document read from this file, as the index names it: its path "
            "relative to the folder indexed (repeatable)",
        ),
    ] = None,
) -> None:
    """Mark documents deleted: searches skip them at once; `anygrain compact` drops them."""
    from anygrain.api import delete_documents

    try:
        res = delete_documents(index_dir, doc or [], files=file or [])
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
