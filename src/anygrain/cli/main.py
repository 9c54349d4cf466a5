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


def _build_app(only: str | None = None) -> typer.Typer:
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
        # a default, not Annotated[...]: annotations here are strings that typer evaluates in
        # this module's globals, where typer is not imported (start-up stays light)
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit"
        ),
    ) -> None:
        """Dense retrieval at any grain: phrases, sentences, passages, documents."""

    _register_commands(app, only)
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


def _register_commands(app: typer.Typer, only: str | None = None) -> None:
    # One module per command group, each thin; registered here in the order `--help` lists
    # them.  ``only``: the one command a run invokes, whose module alone is imported (the
    # others cost a command's start-up their imports for nothing)
    import importlib

    for name, (module, function) in COMMANDS.items():
        if only is None or only == name:
            command = getattr(importlib.import_module(f"anygrain.cli.{module}"), function)
            app.command(name)(command)
    if only is None or only == TRAIN:
        from anygrain.cli.train import train_app

        app.add_typer(train_app, name=TRAIN)


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
        app = get_app() if only is None else _build_app(only)
        app()  # typer turns a Ctrl-C inside a command into exit 130 itself
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM) during start-up: no traceback, the conventional status
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
