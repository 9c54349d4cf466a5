"""``anygrain serve DIR``: the HTTP API and search page over one index (see docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from anygrain.cli.common import DeviceOpt, TorchThreadsOpt, console, device_option, fail
from anygrain.errors import AnygrainError


def serve_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory (any kind)")],
    host: Annotated[
        str, typer.Option(help="Address to bind (loopback by default; 0.0.0.0 exposes it)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    threads: TorchThreadsOpt = None,
    device: DeviceOpt = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="uvicorn log level: critical, error, warning, info")
    ] = "info",
) -> None:
    """Serve an index over HTTP: a JSON search API and a search page at /."""
    try:
        import uvicorn

        from anygrain.serve.app import create_app
    except ImportError as e:
        fail(AnygrainError(f"anygrain serve needs fastapi and uvicorn ({e}); run ./install.sh"))
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    try:
        app = create_app(index_dir, **device_option(device))
    except AnygrainError as e:
        fail(e)
    info = app.state.info
    console.print(
        f"serving {escape(str(index_dir))} ({info['kind']}, units: {', '.join(info['units'])}) "
        f"on http://{escape(host)}:{port}/",
        highlight=False,
        soft_wrap=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
