"""``anygrain mcp DIR``: an MCP server over one index, for agents (see docs/integrations.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli.common import DeviceOpt, ThreadsOpt, console, fail
from anygrain.errors import AnygrainError


def mcp_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory (any kind)")],
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at http://HOST:PORT/mcp (default: stdio, for a "
            "desktop agent that starts the server itself)",
        ),
    ] = False,
    host: Annotated[
        str, typer.Option(help="--http: address to bind (loopback by default)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--http: TCP port (1 to 65535)")] = 8000,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    reader: Annotated[
        str | None,
        typer.Option(
            "--reader",
            metavar="DIR_OR_NAME",
            help="Reader for unit answer (any index): a reader directory or shipped name "
            "(default: the shipped reader for the corpus language, where one ships)",
        ),
    ] = None,
    read: Annotated[
        int | None,
        typer.Option(
            "--read",
            metavar="K",
            help="Unit answer: passages the reader reads per question (default 5)",
        ),
    ] = None,
) -> None:
    """Serve an index to agents over MCP: tools search, get_passage and info."""
    # the SDK (and the index's models) are imported here, not when `anygrain --help` runs
    try:
        from anygrain.integrations.mcp import create_server, run_server
    except ImportError as e:
        fail(AnygrainError(f"anygrain mcp needs the mcp SDK ({e}): pip install 'anygrain[mcp]'"))
    if http and not 1 <= port <= 65535:
        fail(AnygrainError(f"--port must be between 1 and 65535, got {port}"))
    try:
        server = create_server(index_dir, threads=threads, device=device, reader=reader, read=read)
    except AnygrainError as e:
        fail(e)
    where = f"http://{escape(host)}:{port}/mcp" if http else "stdio"
    # stderr: under stdio, stdout carries the protocol
    console.print(f"MCP server over {escape(str(index_dir))} on {where}", highlight=False)
    run_server(server, "streamable-http" if http else "stdio", host=host, port=port)
