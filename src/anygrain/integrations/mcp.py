"""An MCP server over one index: ``anygrain mcp INDEX`` (stdio, or streamable HTTP), or
mounted at ``/mcp`` beside the REST API by ``anygrain serve INDEX --mcp`` (one service).

Three tools, answering with the HTTP API's models (:mod:`anygrain.serve.schemas`: one
definition for both, so a tool's output schema is the REST response's):

* ``search(query, k, unit, filter)`` -- :class:`SearchResponse`: the top ``k`` hits (those
  whose metadata match ``filter``, when given), each with the exact answer ``span`` inside
  the passage ``text``, its sentence, passage and document, and the passage's metadata;
* ``get_passage(id)`` -- :class:`PassageOut`: one passage by the ``passage_id`` of a hit;
* ``info()`` -- :class:`InfoResponse`: the index's kind, units, corpus and limits.

Every call goes through the index's :class:`~anygrain.serve.service.SearchService` (its
worker threads batch concurrent calls; the event loop waits in a thread), and input the
service refuses (an empty question, an unknown unit, ``k`` out of range, an unknown id)
answers a tool error naming what was wrong, never a crash of the server.

The official ``mcp`` SDK: ``MCPServer`` (mcp 2.x), or ``FastMCP`` (mcp 1.x) where that is
what is installed.
"""

# no ``from __future__ import annotations``: the SDK reads the tools' signatures, whose
# annotations name this call's units, so they are evaluated where the tools are defined
import functools
import io
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
from pydantic import Field

from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.integrations.service import shared_service
from anygrain.serve.schemas import InfoResponse, PassageOut, SearchResponse, hits_out
from anygrain.serve.service import (
    DEFAULT_K,
    MAX_K,
    MAX_QUESTION_CHARS,
    RequestError,
    SearchService,
)
from anygrain.utils.threads import set_threads

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError

    MCP_MAJOR = 2
except ImportError:  # mcp 1.x (a missing SDK fails here, with pip's extra named by the CLI)
    from mcp.server.fastmcp import FastMCP as _Server  # type: ignore[no-redef,attr-defined]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

    MCP_MAJOR = 1

log = logging.getLogger("anygrain.mcp")

T = TypeVar("T")

Transport = Literal["stdio", "streamable-http"]

INSTRUCTIONS = (
    "Search a document collection and cite exactly. `search` returns hits ranked best "
    "first; each hit's `answer` is the exact text at `span` inside the passage `text` "
    "(`before + answer + after` is the passage), with the `title`, `passage_id` and "
    "`doc_id` to cite and the passage's `meta` (its document's fields; `start`/`end`: the "
    "passage's offsets in its document). Unit phrase returns short answers, sentence the "
    "sentence holding it, passage and document whole units; answer (when available) has a "
    "reader read the top passages. `get_passage` returns a passage by `passage_id`; `info` "
    "the index's units and limits."
)


async def _call(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread (it waits on the service's queue), any refusal a tool
    error: the client sees why, the server goes on."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except (RequestError, AnygrainError) as e:  # the request, or the index on disk
        raise ToolError(str(e)) from None
    except Exception as e:  # a bug: logged here, answered as an error all the same
        log.exception("tool call failed")
        raise ToolError(f"internal error: {type(e).__name__}") from None


def create_server(
    index: str | Path | Index | SearchService,
    *,
    name: str | None = None,
    reader: str | Path | None = None,
    read: int | None = None,
    warm_up: bool = True,
    threads: int | None = None,
    **load_options: Any,
) -> Any:
    """The MCP server (an ``MCPServer``, or a ``FastMCP`` under mcp 1.x) over ``index`` (a
    directory, an open :class:`Index`, or a :class:`SearchService`), loaded here.
    ``reader``/``read``: unit ``answer``'s reader and passages read (as ``anygrain serve``'s
    ``--reader``/``--read``); ``warm_up``: one search now, so the first call is not slowed
    by torch's first call; ``threads``: torch's and FAISS's thread count (default: theirs);
    ``load_options``: :meth:`Index.load`'s (``device``, ``model``)."""
    set_threads(threads)
    if isinstance(index, SearchService) and (reader is not None or read is not None):
        raise AnygrainError("reader and read are the SearchService's: pass them to it")
    service = shared_service(index, reader=reader, read=read, **load_options)
    if warm_up:
        service.warm_up()
    described = service.info()
    server = _Server(name or f"anygrain: {described['index']}", instructions=INSTRUCTIONS)
    units = ", ".join(described["units"])

    async def search(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_QUESTION_CHARS,
                description="The question, in natural language",
            ),
        ],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="Hits to return")] = DEFAULT_K,
        unit: Annotated[
            str | None,
            Field(
                description=f"The grain of the hits: one of {units} (default "
                f"{described['default_unit']})"
            ),
        ] = None,
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description="Keep the top k hits whose metadata (a hit's meta) match: "
                '{"field": value}, {"field": [a, b]} (any of), or operators: {"field": '
                '{"$ne"|"$in"|"$nin"|"$gt"|"$gte"|"$lt"|"$lte"|"$exists": ...}}, '
                '{"$and"|"$or": [filters]}, {"$not": filter}'
            ),
        ] = None,
        min_confidence: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="Unit answer: below this calibrated confidence the question is "
                "not answered (not in these documents) and the hits are the passages read",
            ),
        ] = None,
    ) -> SearchResponse:
        """Search the index: the top k hits for the question, each with the exact answer
        span inside its passage, the passage's title, ids and metadata (answers: their
        calibrated ``confidence``); ``filter`` keeps the top k whose metadata match."""
        r = await _call(
            functools.partial(
                service.search,
                [query],
                unit=unit,
                k=k,
                filter=filter,
                min_confidence=min_confidence,
            )
        )
        return SearchResponse(
            question=query, unit=r.unit, k=r.k, hits=hits_out(r.hits[0]), latency_ms=r.latency_ms
        )

    async def get_passage(
        id: Annotated[str, Field(description="A passage id (a hit's passage_id)")],
    ) -> PassageOut:
        """One passage by id: its text, title, document, sentence spans and metadata."""
        return PassageOut(**await _call(functools.partial(service.passage, id)))

    async def info() -> InfoResponse:
        """The index: its kind, the units it answers at, its corpus, model and limits."""
        return InfoResponse(**await _call(service.info))

    server.add_tool(search, name="search")
    server.add_tool(get_passage, name="get_passage")
    server.add_tool(info, name="info")
    setattr(server, "anygrain_service", service)  # noqa: B010  (tests, embedding apps)
    return server


def mount_http(app: Any, *, path: str = "/mcp", host: str = "127.0.0.1") -> Any:
    """Mount the MCP server's streamable HTTP endpoint at ``path`` in ``app``, an app of
    :func:`anygrain.serve.create_app` (``anygrain serve --mcp``), its tools searching through
    the app's :class:`SearchService` (one index, one set of worker threads), and return the
    server.  The SDK's session manager runs inside the app's lifespan (Starlette runs none
    of a mounted app's; a manager runs once): serve the app with uvicorn, or enter
    ``TestClient(app)`` as a context, once.  ``host``: the address the server binds; on a
    loopback address the endpoint refuses requests whose ``Host`` or ``Origin`` is not
    loopback (the SDK's DNS rebinding protection)."""
    if getattr(app.state, "mcp", None) is not None:
        raise AnygrainError("the MCP server is mounted in this app already")
    server = create_server(app.state.service, warm_up=False)
    if MCP_MAJOR >= 2:
        sub = server.streamable_http_app(streamable_http_path=path, host=host)
    else:  # mcp 1.x reads them from its settings
        server.settings.streamable_http_path = path
        if host not in ("127.0.0.1", "localhost", "::1"):
            server.settings.transport_security = None
        sub = server.streamable_http_app()
    run_manager = server.session_manager.run
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with run_manager(), inner(a) as state:  # the manager outlives the app's own
            yield state

    app.router.lifespan_context = lifespan
    app.router.routes.extend(sub.routes)  # after the API's routes: its 404s stay the API's
    app.state.mcp = server
    return server


#: Arrays and objects a message read on stdin may nest; deeper ones are cut (the SDK's JSON
#: parser refuses a message past about 200 levels and answers nothing, so its request
#: would wait forever).  No argument of these tools nests half as deep (a filter nests
#: at most ``anygrain.index.filters.MAX_DEPTH`` levels), so what is cut is refused anyway.
MAX_MESSAGE_DEPTH = 128

_JSON_MARKS = re.compile(rb'[\[\]{}"\\]')


def cut_deep_json(line: bytes, limit: int = MAX_MESSAGE_DEPTH) -> bytes:
    """``line`` (JSON text) with each array or object nested deeper than ``limit`` replaced
    by ``null``; the rest as it was (strings are skipped, escapes included)."""
    if line.count(b"{") + line.count(b"[") <= limit:
        return line
    out: list[bytes] = []
    depth, kept, cut_at, escaped, in_string = 0, 0, -1, -1, False
    for m in _JSON_MARKS.finditer(line):
        i, c = m.start(), m.group()
        if in_string:
            if i == escaped:  # the character after a backslash
                continue
            if c == b"\\":
                escaped = i + 1
            elif c == b'"':
                in_string = False
        elif c == b'"':
            in_string = True
        elif c in (b"[", b"{"):
            depth += 1
            if depth == limit + 1:
                cut_at = i
        elif c in (b"]", b"}"):
            if depth == limit + 1 and cut_at >= 0:
                out += [line[kept:cut_at], b"null"]
                kept, cut_at = i + 1, -1
            depth -= 1
    out.append(line[kept:])
    return b"".join(out)


class _ShallowLines(io.RawIOBase):
    """A binary stream of ``source``'s lines, each through :func:`cut_deep_json`."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if not self.pending:
            self.pending = cut_deep_json(self.source.readline())
        n = min(len(b), len(self.pending))
        b[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


@contextmanager
def _shallow_stdin() -> Iterator[None]:
    """``sys.stdin`` read through :class:`_ShallowLines` (the SDK's stdio transport reads
    ``sys.stdin.buffer``), so that every request reaches the server and gets an answer."""
    original = sys.stdin
    raw = _ShallowLines(original.buffer)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
    try:
        yield
    finally:
        sys.stdin = original


def run_server(
    server: Any, transport: Transport = "stdio", *, host: str = "127.0.0.1", port: int = 8000
) -> None:
    """Serve ``server`` until stopped: over stdin/stdout, or streamable HTTP at
    ``http://HOST:PORT/mcp``."""
    if transport == "stdio":
        with _shallow_stdin():
            server.run("stdio")
    elif transport == "streamable-http":
        if MCP_MAJOR >= 2:
            server.run("streamable-http", host=host, port=port)
        else:  # mcp 1.x reads them from its settings
            server.settings.host, server.settings.port = host, port
            server.run("streamable-http")
    else:
        raise AnygrainError(f"unknown MCP transport {transport!r}: stdio or streamable-http")


__all__ = [
    "INSTRUCTIONS",
    "MCP_MAJOR",
    "create_server",
    "cut_deep_json",
    "mount_http",
    "run_server",
]
