"""The ``anygrain`` command: thin wrappers over the Python API.

This module is the typer app (``--version``, the command groups registered); each group
lives in its own module of :mod:`anygrain.cli`, parses its options, calls the API and prints
the result; errors anygrain raises on purpose are printed without a traceback.
"""

from __future__ import annotations

import logging
import signal
from typing import Annotated

import typer

from anygrain.cli.common import out

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Dense retrieval at any grain: phrases, sentences, passages, documents.",
)


def _version(value: bool) -> None:
    if value:
        from anygrain import __version__

        out.print(f"anygrain {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Dense retrieval at any grain: phrases, sentences, passages, documents."""


def _register_commands() -> None:
    # One module per command group, each thin; registered here in the order `--help` lists them.
    from anygrain.cli import demo, index, maintain, phrase, reader, search, serve
    from anygrain.cli import eval as eval_
    from anygrain.cli.train import train_app

    for name, command in (
        ("index", index.index_cmd),
        ("search", search.search_cmd),
        ("eval", eval_.eval_cmd),
        ("verify", index.verify_cmd),
        ("add", maintain.add_cmd),
        ("delete", maintain.delete_cmd),
        ("compact", maintain.compact_cmd),
        ("formats", index.formats_cmd),
        ("convert-script", index.convert_script_cmd),
        ("demo", demo.demo_cmd),
        ("refilter", index.refilter_cmd),
        ("pack", phrase.pack_cmd),
        ("attach-sparse", phrase.attach_sparse_cmd),
        ("ask", reader.ask_cmd),
        ("eval-reader", eval_.eval_reader_cmd),
        ("eval-domains", eval_.eval_domains_cmd),
        ("serve", serve.serve_cmd),
    ):
        app.command(name)(command)
    app.add_typer(train_app, name="train")


_register_commands()


def stop_on_sigterm() -> None:
    """Make SIGTERM stop a command the way Ctrl-C does (trainers checkpoint, encoders keep
    their finished shards).  ``kill``, job schedulers and timeouts send SIGTERM, and a job
    started in the background by a script ignores SIGINT, so Ctrl-C alone is not enough."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main() -> None:
    stop_on_sigterm()
    # The library warns through logging (e.g. qrels ids missing from the corpus); show those
    # warnings on stderr as one line each, apart from stdout's results.  Only anygrain's:
    # other libraries keep Python's default handling (bm25s logs at DEBUG, for one).
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logging.getLogger("anygrain").addHandler(handler)
    app()


if __name__ == "__main__":
    main()
