"""The ``anygrain`` command: thin wrappers over the Python API.

This module is the typer app (``--version``, the command groups registered); each group
lives in its own module of :mod:`anygrain.cli`, parses its options, calls the API and prints
the result; errors anygrain raises on purpose are printed without a traceback.

The module itself imports only the standard library: ``app`` is built on first use (PEP
562), inside :func:`main`, so that a Ctrl-C while typer, NumPy and the command modules
are imported -- a second or more of start-up -- exits 130 without a traceback, like a
Ctrl-C while a command runs.  The console script (``anygrain = anygrain.cli.main:main``)
and ``python -m anygrain.cli`` both import this module and call :func:`main`.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

#: the exit status of a command stopped by Ctrl-C (or SIGTERM): 128 + SIGINT
EXIT_INTERRUPTED = 130

_app: typer.Typer | None = None


def _build_app(only: str | None = None, listing: bool = False) -> typer.Typer:
    import typer

    app = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        help="Dense retrieval at any grain: phrases, sentences, passages, documents.",
    )

    def _version(value: bool) -> None:
        if value:
            from anygrain import __version__
            from anygrain.cli.common import out

            out.print(f"anygrain {__version__}", highlight=False)
            raise typer.Exit()

    @app.callback()
    def _main(
        # a default, not Annotated[...]: annotations here are strings that typer evaluates in
        # this module's globals, where typer is not imported (start-up stays light)
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit"
        ),
    ) -> None:
        """Dense retrieval at any grain: phrases, sentences, passages, documents."""

    _register_commands(app, only, listing)
    return app


#: every command, in the order ``--help`` lists them: (module under anygrain.cli, function)
COMMANDS: dict[str, tuple[str, str]] = {
    "index": ("index", "index_cmd"),
    "search": ("search", "search_cmd"),
    "eval": ("eval", "eval_cmd"),
    "verify": ("index", "verify_cmd"),
    "add": ("maintain", "add_cmd"),
    "delete": ("maintain", "delete_cmd"),
    "compact": ("maintain", "compact_cmd"),
    "formats": ("index", "formats_cmd"),
    "convert-script": ("index", "convert_script_cmd"),
    "demo": ("demo", "demo_cmd"),
    "refilter": ("index", "refilter_cmd"),
    "pack": ("phrase", "pack_cmd"),
    "attach-sparse": ("phrase", "attach_sparse_cmd"),
    "ask": ("reader", "ask_cmd"),
    "eval-reader": ("eval", "eval_reader_cmd"),
    "eval-domains": ("eval", "eval_domains_cmd"),
    "serve": ("serve", "serve_cmd"),
    "mcp": ("mcp", "mcp_cmd"),
}
TRAIN = "train"
#: the one line the app's ``--help`` shows for each command (its own ``--help`` has the rest)
LINES: dict[str, str] = {
    "index": "Build an index from a corpus: phrase, BM25, dense or hybrid.",
    "search": "Search an index: answer phrases, sentences, passages, documents or read answers.",
    "eval": "Evaluate an index on a question set.",
    "verify": "Check an index's files against their checksums, then open it.",
    "add": "Add documents to an index: only new passages are encoded.",
    "delete": "Mark documents deleted: searches skip them at once.",
    "compact": "Rebuild an index without its deleted documents.",
    "formats": "List the source formats anygrain reads.",
    "convert-script": "Convert a Chinese SQuAD-format file to Simplified or Traditional characters.",
    "demo": "Index CPython's reference topics (offline) and answer ten questions.",
    "refilter": "A smaller phrase index at a higher filter threshold.",
    "pack": "Store a phrase model or a reader as differences from its backbone.",
    "attach-sparse": "Fuse BM25 into a phrase index's scores.",
    "ask": "Retrieve passages, read them, and print the answer with its evidence.",
    "eval-reader": "SQuAD EM/F1 of a reader, over an index or gold passages.",
    "eval-domains": "Evaluate every Multi-CPR domain, one row each.",
    "serve": "Serve an index over HTTP: a JSON API, a search page, MCP with --mcp.",
    "mcp": "Serve an index to agents over MCP (stdio or streamable HTTP).",
    TRAIN: "Train models: DPR bi-encoders, phrase models (full or query-side) and readers.",
}


def _register_commands(app: typer.Typer, only: str | None = None, listing: bool = False) -> None:
    # One module per command group, each thin; registered here in the order `--help` lists
    # them.  ``only``: the one command a run invokes, whose module alone is imported (the
    # others cost a command's start-up their imports for nothing).  ``listing``: the app's
    # own help, --version or a mistyped command, which need each command's name and line
    # only, so none of the modules is imported (click's lazily loaded subcommands, by table)
    import importlib

    for name, (module, function) in COMMANDS.items():
        if listing:
            app.command(name, short_help=LINES[name])(_listed)
        elif only is None or only == name:
            command = getattr(importlib.import_module(f"anygrain.cli.{module}"), function)
            app.command(name, short_help=LINES[name])(command)
    if listing:
        app.command(TRAIN, short_help=LINES[TRAIN])(_listed)
    elif only is None or only == TRAIN:
        from anygrain.cli.train import train_app

        app.add_typer(train_app, name=TRAIN, short_help=LINES[TRAIN])


def _listed() -> None:
    # never runs: a command named on the command line is built for real (``only``)
    raise AssertionError("a listed command is built before it runs")


def invoked_command(argv: list[str]) -> str | None:
    """The command ``argv`` (the arguments after the program) runs, when its first word is
    one; None for the app's own options (``--help``, ``--version``) or an unknown word,
    which the whole app answers."""
    first = argv[0] if argv else ""
    return first if first in COMMANDS or first == TRAIN else None


def get_app() -> typer.Typer:
    """The typer app, built (and its command modules imported) on the first call."""
    global _app
    if _app is None:
        _app = _build_app()
    return _app


def __getattr__(name: str) -> Any:
    # ``from anygrain.cli.main import app``: the app, built on first use
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stop_on_sigterm() -> None:
    """Make SIGTERM stop a command the way Ctrl-C does (trainers checkpoint, encoders keep
    their finished shards).  ``kill``, job schedulers and timeouts send SIGTERM, and a job
    started in the background by a script ignores SIGINT, so Ctrl-C alone is not enough."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def enable_faulthandler() -> None:
    """A fatal signal (SIGSEGV, SIGBUS: a memory-mapped file truncated under a search) at
    least prints where every thread was, instead of dying without a word."""
    import contextlib
    import faulthandler

    if not faulthandler.is_enabled():
        # a stderr without a file descriptor (a test runner's) cannot take it: no matter
        with contextlib.suppress(AttributeError, OSError, ValueError):
            faulthandler.enable(all_threads=True)


def _log_warnings() -> None:
    # The library warns through logging (e.g. qrels ids missing from the corpus); show those
    # warnings on stderr as one line each, apart from stdout's results.  Only anygrain's:
    # other libraries keep Python's default handling (bm25s logs at DEBUG, for one).
    import logging

    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logging.getLogger("anygrain").addHandler(handler)


def main() -> None:
    try:
        stop_on_sigterm()
        enable_faulthandler()
        _log_warnings()
        # the invoked command's module alone: its start-up pays for no other command's imports
        only = invoked_command(sys.argv[1:])
        app = _build_app(listing=True) if only is None else _build_app(only)
        app()  # typer turns a Ctrl-C inside a command into exit 130 itself
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM) during start-up: no traceback, the conventional status
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
