"""``anygrain serve DIR``: the HTTP API and search page over one index (see docs/serve.md)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from anygrain.cli.common import DeviceOpt, RuntimeOpt, ThreadsOpt, console, fail
from anygrain.cli.index import check_files
from anygrain.cli.panels import with_helps
from anygrain.errors import AnygrainError

#: uvicorn's log levels (it raises a KeyError for any other)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds one), or an error in one line.

    Bound before the index loads: a port in use is reported at once, not after a long load,
    and no other process can take it meanwhile."""
    if not 1 <= port <= 65535:
        raise AnygrainError(f"--port must be between 1 and 65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise AnygrainError(f"--host {host}: not an address of this machine ({e})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        why = e.strerror or str(e)
        hint = "; choose another --port" if "in use" in why.lower() else ""
        raise AnygrainError(f"cannot listen on {host}:{port}: {why}{hint}") from None
    sock.set_inheritable(True)
    return sock


# the options `anygrain serve` and `anygrain mcp` share (cli/mcp.py imports them)
IndexArg = Annotated[Path, typer.Argument(help="Index directory (any kind)")]
HostOpt = Annotated[
    str, typer.Option(help="Address to bind (loopback by default; 0.0.0.0 exposes it)")
]
PortOpt = Annotated[int, typer.Option(help="TCP port (1 to 65535)")]
ReaderOpt = Annotated[
    str | None,
    typer.Option(
        "--reader",
        metavar="DIR_OR_NAME",
        help="Reader for unit answer (any index): a reader directory or shipped name "
        "(default: the shipped reader for the corpus language, where one ships, loaded on "
        "the first answer request)",
    ),
]
ReadOpt = Annotated[
    int | None,
    typer.Option(
        "--read",
        metavar="K",
        help="Unit answer: passages the reader reads per question (1 to 100, default 3)",
    ),
]

ReadThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--read-threads",
        metavar="N",
        help="Unit answer: threads reading answers at once, each on one core (1 to 16; "
        "default 2, or 1 on a one-core machine)",
    ),
]


VerifyFilesOpt = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Before serving, check every file of the index against its recorded checksums "
        "(as anygrain verify does); refuse to serve a damaged index",
    ),
]


def verify_files(index_dir: Path) -> None:
    """``--verify``: every file of the index checked as ``anygrain verify`` checks them; each
    damaged, missing or unexpected file listed and exit 1 when there is any."""
    n_files = check_files(index_dir, "not serving it: rebuild the index")
    console.print(f"verified: {n_files} files match their checksums", highlight=False)


def mcp_missing() -> str | None:
    """Why the MCP server cannot be imported (the SDK missing), or None."""
    try:
        import anygrain.integrations.mcp  # noqa: F401
    except ImportError as e:
        return f"the MCP server needs the mcp SDK ({e}): pip install 'anygrain[mcp]'"
    return None


#: ``serve``'s --threads: each stage's pool, not one
SERVE_THREADS_HELP = (
    "CPU threads per stage for torch, FAISS and ONNX Runtime (default 1: the encode, search "
    "and read stages run in parallel)"
)
QuestionBf16Opt = Annotated[
    bool | None,
    typer.Option(
        "--question-bf16/--question-fp32",
        help="Encode questions with bfloat16 linear layers (default: where the CPU has "
        "native bfloat16; phrase indexes)",
    ),
]
McpOpt = Annotated[
    bool,
    typer.Option(
        "--mcp",
        help="Serve the MCP server too, streamable HTTP at /mcp (tools search, "
        "get_passage, info; the mcp extra)",
    ),
]
MaxKOpt = Annotated[
    int,
    typer.Option("--max-k", help="The most hits a request may ask for (k); above it: a 422"),
]
ApiKeyOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--api-key",
        envvar="ANYGRAIN_API_KEY",
        help="Require this key on every request (X-API-Key: KEY or Authorization: Bearer "
        "KEY) but the page's, /docs' and /health's; the page asks for it (or reads "
        "#key=KEY from its address)",
    ),
]
CorsOriginOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--cors-origin",
        metavar="ORIGIN",
        help="Let web pages from this origin (scheme://host[:port], or *) call the API; "
        "repeat for several",
    ),
]
LogLevelOpt = Annotated[
    str,
    typer.Option("--log-level", help="uvicorn log level: critical, error, warning, info, debug"),
]


@with_helps({"threads": SERVE_THREADS_HELP})
def serve_cmd(
    index_dir: IndexArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    runtime: RuntimeOpt = None,
    question_bf16: QuestionBf16Opt = None,
    reader: ReaderOpt = None,
    read: ReadOpt = None,
    read_threads: ReadThreadsOpt = None,
    verify: VerifyFilesOpt = False,
    mcp: McpOpt = False,
    max_k: MaxKOpt = 1000,
    api_key: ApiKeyOpt = None,
    cors_origin: CorsOriginOpt = None,
    log_level: LogLevelOpt = "info",
) -> None:
    """Serve an index over HTTP: a JSON search API and a search page at / (and MCP at /mcp
    with --mcp)."""
    if log_level.lower() not in LOG_LEVELS:
        fail(AnygrainError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {log_level}"))
    try:
        import uvicorn

        from anygrain.serve.app import create_app
    except ImportError as e:
        fail(AnygrainError(f"anygrain serve needs fastapi and uvicorn ({e}); run ./install.sh"))
    if mcp and (why := mcp_missing()):
        fail(AnygrainError(f"--mcp: {why}"))  # before the index loads
    try:
        sock = bind(host, port)  # before anything loads: a bad or busy port fails at once
    except AnygrainError as e:
        fail(e)
    try:
        if verify:  # after binding (a busy port fails at once), before the index loads
            verify_files(index_dir)
        try:
            app = create_app(
                index_dir,
                threads=threads,
                device=device,
                runtime=runtime,
                question_bf16=question_bf16,
                reader=reader,
                read=read,
                max_k=max_k,
                read_threads=read_threads,
                api_key=api_key,
                cors_origins=cors_origin or (),
            )
            if mcp:  # beside the API, over the same service
                from anygrain.integrations.mcp import mount_http

                mount_http(app, host=host)
        except AnygrainError as e:
            fail(e)
        info = app.state.info
        reading = (
            f", reader {escape(str(info['reader']))} reads {info['read']} passages"
            if info.get("reader")
            else ""
        )
        console.print(
            f"serving {escape(str(index_dir))} ({info['kind']}, units: "
            f"{', '.join(info['units'])}{reading}) on http://{escape(host)}:{port}/"
            + (f" (MCP: http://{escape(host)}:{port}/mcp)" if mcp else ""),
            highlight=False,
            soft_wrap=True,
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level=log_level.lower())
        )
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        fail(AnygrainError(f"the server on {host}:{port} did not start (see the log above)"))
