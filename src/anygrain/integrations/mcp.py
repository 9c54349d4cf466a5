"""An MCP server over one index: ``anygrain mcp INDEX`` (stdio, or streamable HTTP), or
mounted at ``/mcp`` beside the REST API by ``anygrain serve INDEX --mcp`` (one service).

Four read-only tools, answering with the HTTP API's models (:mod:`anygrain.serve.schemas`:
one definition for both, so a tool's output schema is the REST response's):

* ``search(query, k, unit, filter, min_confidence, format)`` -- :class:`SearchResponse`:
  the top ``k`` hits (those whose metadata match ``filter``, when given).  ``format``
  compact (the default, :mod:`anygrain.serve.mcp_compact`): ``passages``, each passage's
  text once with its hits under it as rows of the values ``hit_fields`` names (rank,
  score, the ``span`` inside the passage, its text, confidence); full: ``hits``, each hit
  whole, as ``GET /search`` returns them.  ``unit`` is one of the index's units;
* ``get_passage(id)`` -- :class:`PassageOut`: one passage by the ``passage_id`` of a hit;
* ``get_document(id, offset, max_chars)`` -- :class:`DocumentOut`: a document's passages
  in order, whole passages up to ``max_chars`` of text, with the offset to ask for the rest;
* ``info()`` -- :class:`InfoResponse`: the index's kind, units, corpus and limits, and the
  metadata fields a filter may name, each with a few values.

Every call goes through the index's :class:`~anygrain.serve.service.SearchService` (its
worker threads batch concurrent calls; the event loop waits in a thread), and input the
server refuses (an empty question, a unit the index does not have, ``k`` out of range, an
unknown id) answers a one-line tool error naming what was wrong, never a crash of the
server.  Under mcp 2.x a result's text is its structured content as compact JSON (the
SDK would indent it); mcp 1.x writes it itself.

The official ``mcp`` SDK: ``MCPServer`` (mcp 2.x), or ``FastMCP`` (mcp 1.x) where that is
what is installed.
"""

# no ``from __future__ import annotations``: the SDK reads the tools' signatures, whose
# annotations name this call's units, so they are evaluated where the tools are defined
import functools
import io
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import numpy as np
import pyarrow.compute as pc
from pydantic import BaseModel, Field, ValidationError

from anygrain.corpus.records import Passage
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.index.filters import COLUMNS
from anygrain.integrations.service import shared_service
from anygrain.serve.mcp_compact import compact_passages
from anygrain.serve.schemas import (
    DocumentOut,
    DocumentPassage,
    FilterField,
    InfoResponse,
    PassageOut,
    SearchResponse,
    hits_out,
)
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
from mcp.types import CallToolResult, TextContent, ToolAnnotations

log = logging.getLogger("anygrain.mcp")

T = TypeVar("T")

Transport = Literal["stdio", "streamable-http"]

#: ``get_document``'s text per call: the default, and the most one may ask for.
DEFAULT_DOCUMENT_CHARS = 20_000
MAX_DOCUMENT_CHARS = 200_000
#: Passages ``info`` reads, spread over the corpus, to list the fields a filter may name;
#: values it shows per field, and the longest shown (longer ones are left out).
FIELD_SAMPLE = 512
FIELD_EXAMPLES = 3
EXAMPLE_CHARS = 80

INSTRUCTIONS = (
    "Search a document collection and cite exactly. `search` returns hits ranked best "
    "first, by default compactly: `passages`, each passage's `text` once with its "
    "`passage_id`, `doc_id`, `title` (left out where it is the doc_id or an earlier passage "
    "of the document gave it) and `meta` (its document's fields; `start`/`end`: the "
    "passage's offsets in its document), and its `hits` under it, each a row of the values "
    "`hit_fields` names, in order: `rank`, `score`, and the exact `answer` at `span` inside "
    "the passage text (format full: `hits`, each hit whole). Unit phrase returns short "
    "answers, sentence the sentence holding it, passage and document whole units; answer "
    "(when available) has a reader read the top passages (with a calibrated `confidence`, "
    "a row's last value). `filter` keeps hits whose metadata match; `info` lists the fields "
    "it may name. `get_passage` returns a passage by `passage_id`, `get_document` a "
    "document's passages by `doc_id`."
)

#: Every tool only reads the index: clients may call them without asking, and again.
READ_ONLY = {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}


async def _call(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread (it waits on the service's queue), any refusal a tool
    error: the client sees why, the server goes on."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except (RequestError, AnygrainError) as e:  # the request, or the index on disk
        raise ToolError(_one_line(str(e))) from None
    except Exception as e:  # a bug: logged here, answered as an error all the same
        log.exception("tool call failed")
        raise ToolError(f"internal error: {type(e).__name__}") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def invalid_arguments(tool: str, error: ValidationError) -> str:
    """The SDK's validation error of a tool's arguments in one line: each argument and
    what was wrong with it (not the value given, which may be long)."""
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{where}: {e['msg']}")
    return _one_line(f"invalid arguments to {tool}: " + "; ".join(parts))


class _AnygrainServer(_Server):  # type: ignore[misc,valid-type]
    """The SDK's server, its argument validation errors answered in one line (the SDK
    answers pydantic's multi-line report, with a link)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], *rest: Any) -> Any:
        try:
            return await super().call_tool(name, arguments, *rest)
        except ToolError as e:
            if type(e) is ToolError and isinstance(e.__cause__, ValidationError):
                raise ToolError(invalid_arguments(name, e.__cause__)) from e.__cause__
            raise


def _result(model: BaseModel, **dump: Any) -> Any:
    """What a tool returns: under mcp 2.x, ``model`` dumped once (``dump``: ``model_dump``'s
    options) as the structured content and, as compact JSON, the text; mcp 1.x (whose older
    releases take no :class:`CallToolResult`) serialises the model itself."""
    if MCP_MAJOR < 2:
        return model
    data = model.model_dump(mode="json", **dump)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _returns(model: type[BaseModel]) -> Any:
    """A tool's return annotation: its model, as the SDK reads it (mcp 2.x: a
    :class:`CallToolResult` whose structured content is ``model``)."""
    return Annotated[CallToolResult, model] if MCP_MAJOR >= 2 else model


def document_rows(index: Index, doc_id: str) -> np.ndarray:
    """The rows of document ``doc_id``'s live passages, in corpus order (a scan of the
    ``doc_id`` column, in large batches)."""
    found = []
    for start, batch in index.corpus.iter_batches(1 << 20):
        hit = pc.equal(batch.column("doc_id"), doc_id).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(hit)
        if rows.size:
            found.append(rows + start)
    rows = np.concatenate(found) if found else np.zeros(0, np.int64)
    tomb = getattr(index, "tombstones", None)
    if tomb is not None and rows.size:
        rows = rows[[int(r) not in tomb.rows for r in rows]]
    return rows


def read_document(index: Index, doc_id: str, offset: int, max_chars: int) -> DocumentOut:
    """Document ``doc_id``'s passages from the ``offset``-th on, whole, while their text
    stays within ``max_chars`` (the first always comes); :class:`RequestError` for a
    document the index does not hold, or an offset past its end."""
    if not doc_id.strip():
        raise RequestError("no document id given")
    rows = document_rows(index, doc_id)
    if not rows.size:
        raise RequestError(f"no document {doc_id!r} in this index (a hit's doc_id names one)")
    if offset >= len(rows):
        raise RequestError(
            f"offset {offset} is past the end of document {doc_id!r} ({len(rows)} passages)"
        )
    store = index.corpus
    take: list[Passage] = []
    used = 0
    for row in rows[offset:]:
        p = store.passage(int(row))
        if take and used + len(p.text) > max_chars:
            break
        take.append(p)
        used += len(p.text)
    metas = store.hit_meta(rows[offset : offset + len(take)])
    # the document's fields (and its first passage's own); each passage adds what differs
    doc_meta = {k: v for k, v in metas[0].items() if k not in ("start", "end")}
    passages = []
    for p, meta in zip(take, metas, strict=True):
        own = {k: v for k, v in meta.items() if k not in ("start", "end") and doc_meta.get(k) != v}
        passages.append(
            DocumentPassage(
                passage_id=p.id,
                text=p.text,
                start=meta.get("start"),
                end=meta.get("end"),
                meta=own or None,
            )
        )
    after = offset + len(take)
    return DocumentOut(
        doc_id=doc_id,
        title=take[0].title,
        meta=doc_meta,
        n_passages=len(rows),
        offset=offset,
        passages=passages,
        next_offset=after if after < len(rows) else None,
    )


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def filter_fields(index: Index) -> list[FilterField]:
    """The fields a filter may name (the passage columns :data:`COLUMNS`, then the metadata
    fields in the order first seen, a nested object's as dotted names), each with its
    values' JSON types and a few values, read from up to :data:`FIELD_SAMPLE` passages
    spread evenly over the corpus."""
    store = index.corpus
    n = len(store)
    rows = np.unique(np.linspace(0, n - 1, min(n, FIELD_SAMPLE)).astype(np.int64))
    tomb = getattr(index, "tombstones", None)
    if tomb is not None:
        rows = np.asarray([r for r in rows if int(r) not in tomb.rows], np.int64)
    seen: dict[str, tuple[list[str], list[Any]]] = {}

    def add(name: str, value: Any, depth: int = 0) -> None:
        if isinstance(value, dict) and depth < 4:
            for key, v in value.items():
                add(f"{name}.{key}", v, depth + 1)
            return
        types, examples = seen.setdefault(name, ([], []))
        items = value if isinstance(value, list) else [value]
        kind = "array" if isinstance(value, list) else _JSON_TYPES.get(type(value), "null")
        if value is not None and kind not in types:
            types.append(kind)
        for v in items:
            if len(examples) >= FIELD_EXAMPLES:
                break
            shown = isinstance(v, bool | int | float) or (
                isinstance(v, str) and 0 < len(v) <= EXAMPLE_CHARS
            )
            if shown and v not in examples:
                examples.append(v)

    if len(rows):
        columns = {
            "doc_id": store.column("doc_id", rows),
            "title": store.column("title", rows),
            "passage_id": store.column("id", rows),
        }
        for name in COLUMNS:
            for v in columns[name]:
                add(name, v)
        for meta in store.hit_meta(rows):
            for key, v in meta.items():
                add(key, v)
    return [FilterField(field=f, types=t, examples=e) for f, (t, e) in seen.items()]


def _search_tool(service: SearchService, described: dict[str, Any]) -> Callable[..., Any]:
    """The ``search`` tool over ``service``, whose index ``described`` (its info): ``unit``
    one of the index's units, ``k`` at most the server's most (``--max-k``)."""
    # the units this index answers at (answer where a reader is available), as an enum
    Units = Literal[tuple(described["units"])]  # type: ignore[valid-type]
    max_k = int(described["limits"].get("max_k", MAX_K))  # the server's (--max-k)

    async def search(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_QUESTION_CHARS,
                description="The question, in natural language",
            ),
        ],
        k: Annotated[int, Field(ge=1, le=max_k, description="Hits to return")] = min(
            DEFAULT_K, max_k
        ),
        unit: Annotated[
            Units,  # type: ignore[valid-type]
            Field(
                description="The grain of the hits: phrase (short answers), sentence, passage, "
                "document, or answer (a reader reads the top passages), where this index has it"
            ),
        ] = described["default_unit"],
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description="Keep the top k hits whose metadata (a hit's meta) match: "
                '{"field": value}, {"field": [a, b]} (any of), or operators: {"field": '
                '{"$ne"|"$in"|"$nin"|"$gt"|"$gte"|"$lt"|"$lte"|"$exists": ...}}, '
                '{"$and"|"$or": [filters]}, {"$not": filter}; info lists the fields'
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
        format: Annotated[
            Literal["compact", "full"],
            Field(
                description="compact: each passage's text once, its hits under it as rows "
                "(passages; hit_fields names a row's values); full: each hit whole, with its "
                "passage (hits)"
            ),
        ] = "compact",
    ) -> _returns(SearchResponse):  # type: ignore[valid-type]
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
        common: dict[str, Any] = {"question": query, "unit": r.unit, "k": r.k}
        if format == "full":
            full = SearchResponse(**common, hits=hits_out(r.hits[0]), latency_ms=r.latency_ms)
            return _result(full, exclude={"hit_fields", "passages"})
        fields, passages = compact_passages(r.hits[0])
        compact = SearchResponse(
            **common, hit_fields=fields, passages=passages, latency_ms=round(r.latency_ms, 1)
        )
        return _result(compact, exclude={"hits"}, exclude_none=True)

    return search


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
    server = _AnygrainServer(name or f"anygrain: {described['index']}", instructions=INSTRUCTIONS)
    fields_of: dict[tuple[int, int], list[FilterField]] = {}  # (index, generation) -> fields
    search = _search_tool(service, described)

    async def get_passage(
        id: Annotated[str, Field(description="A passage id (a hit's passage_id)")],
    ) -> _returns(PassageOut):  # type: ignore[valid-type]
        """One passage by id: its text, title, document, sentence spans and metadata."""
        return _result(PassageOut(**await _call(functools.partial(service.passage, id))))

    async def get_document(
        id: Annotated[
            str,
            Field(max_length=MAX_QUESTION_CHARS, description="A document id (a hit's doc_id)"),
        ],
        offset: Annotated[
            int, Field(ge=0, description="The first passage to return (next_offset of a call)")
        ] = 0,
        max_chars: Annotated[
            int,
            Field(
                ge=1,
                le=MAX_DOCUMENT_CHARS,
                description="Passage text to return at most (whole passages; at least one)",
            ),
        ] = DEFAULT_DOCUMENT_CHARS,
    ) -> _returns(DocumentOut):  # type: ignore[valid-type]
        """A document's passages in order, by document id: whole passages up to max_chars
        of text, and the offset to ask for the rest."""
        doc = await _call(lambda: read_document(service.index, id, offset, max_chars))
        return _result(doc, exclude_none=True)

    def described_now() -> InfoResponse:
        info = service.info()
        key = (id(service.index), service.generation)
        if key not in fields_of:
            fields_of.clear()
            fields_of[key] = filter_fields(service.index)
        return InfoResponse(**info, filter_fields=fields_of[key])

    async def info() -> _returns(InfoResponse):  # type: ignore[valid-type]
        """The index: its kind, the units it answers at, its corpus, model and limits, and
        the metadata fields a search filter may name, each with a few values."""
        return _result(await _call(described_now))

    tools: list[tuple[Callable[..., Any], str, str]] = [
        (search, "search", "Search the documents"),
        (get_passage, "get_passage", "Get a passage"),
        (get_document, "get_document", "Get a document"),
        (info, "info", "Describe the index"),
    ]
    for fn, tool, title in tools:
        hints = ToolAnnotations(title=title, **READ_ONLY)
        server.add_tool(fn, name=tool, title=title, annotations=hints)
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
