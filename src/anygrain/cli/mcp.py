"""``anygrain mcp DIR``: an MCP server over one index, for agents (see docs/integrations.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli.common import DeviceOpt, ThreadsOpt, console, fail
from anygrain.cli.serve import HostOpt, IndexArg, PortOpt, ReaderOpt, ReadOpt, mcp_missing
from anygrain.errors import AnygrainError


def mcp_cmd(
    index_dir: IndexArg,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at http://HOST:PORT/mcp (default: stdio, for a "
            "desktop agent that starts the server itself; `anygrain serve --mcp` serves it "
            "beside the REST API)",
        ),
    ] = False,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    reader: ReaderOpt = None,
    read: ReadOpt = None,
) -> None:
    """Serve an index to agents over MCP: tools search, get_passage, get_document and info."""
    # the SDK (and the index's models) are imported here, not when `anygrain --help` runs
    if why := mcp_missing():
        fail(AnygrainError(f"anygrain mcp: {why}"))
    from anygrain.integrations.mcp import create_server, run_server

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
