"""The FastAPI application: ``create_app(index)`` -> an ASGI app for uvicorn (or TestClient).

Endpoints, each with a named operation id: ``GET /v1/search`` (``search``), ``POST
/v1/search`` (``search_batch``), ``GET /v1/ask`` (``ask``: unit answer), ``GET
/v1/passages/{passage_id}`` (``get_passage``), ``GET /v1/health`` (``health``), ``GET
/v1/info`` (``info``); ``/search``, ``/health`` and ``/info``, the paths before ``/v1``,
still answer (left out of the schema).  ``GET /`` is the search page, ``/openapi.json``
the schema and ``/docs`` Swagger UI from bundled files (:mod:`.access`, with the optional
API key and CORS origins); the MCP server is at ``/mcp``, over the same service, once
:func:`anygrain.integrations.mcp.mount_http` mounts it (``anygrain serve --mcp``).  Unit
``answer`` (any kind of index) has a reader read the top passages; a server without a
reader refuses it with a 400 naming ``--reader``.
Every refused request gets a 4xx with ``{"error": "..."}``; nothing a client sends can
stop the server.  When the index's files change on disk and it no longer opens (see
:mod:`.service`), searches get a 503 with the same ``{"error": ...}`` naming the file and
``/health`` answers 503 ``unhealthy``; both recover once the index opens again.
Handlers are plain functions, so FastAPI runs them in its threadpool and a search never
blocks the event loop.
"""

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from anygrain import __version__
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.serve import page
from anygrain.serve.access import add_docs, check_api_key, check_cors_origins, guard
from anygrain.serve.options import query_options
from anygrain.serve.schemas import (
    SEARCH_OPTIONS,
    BatchRequest,
    BatchResponse,
    ErrorResponse,
    HealthResponse,
    InfoResponse,
    PassageOut,
    QuestionResult,
    SearchResponse,
    hits_out,
)
from anygrain.serve.service import (
    DEFAULT_K,
    MAX_K,
    MAX_QUESTION_CHARS,
    IndexUnavailable,
    ReaderUnavailable,
    RequestError,
    SearchService,
)
from anygrain.utils.threads import set_threads

log = logging.getLogger("anygrain.serve")

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": ErrorResponse,
        "description": "Malformed request body, or unit answer on a server without a reader",
    },
    401: {"model": ErrorResponse, "description": "No API key, or a wrong one (--api-key)"},
    422: {"model": ErrorResponse, "description": "Invalid question, unit, k, filter or batch"},
    503: {"model": ErrorResponse, "description": "The index changed on disk and does not open"},
}

# The page runs only its own inline script and talks only to this server.
PAGE_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """One readable line for FastAPI's validation errors; malformed JSON is a 400."""
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            why = (err.get("ctx") or {}).get("error", "not valid JSON")
            return 400, f"malformed JSON body: {why}"
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query")]
        if not loc and err.get("type") in ("model_attributes_type", "dict_type"):
            return (
                422,
                'the body must be a JSON object: {"questions": [...], "unit": ..., "k": ...}',
            )
        where = ".".join(loc) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return 422, "; ".join(parts) or "invalid request"


# ``FIELD=VALUE`` items of a query's filter: each begins at a word followed by ``=``
_PAIR_START = re.compile(r"\s+(?=[^\s=]+=)")


def query_filter(text: str | None) -> str | list[str] | None:
    """``GET /search``'s ``filter``: a JSON object (as it is), or ``FIELD=VALUE`` items
    separated by spaces (``lang=fr year=2001``; ``FIELD=A,B``: any of; a value may hold
    spaces: ``title=Great Wall``), as ``anygrain search --filter`` reads them."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    return text if text.startswith("{") else _PAIR_START.split(text)


#: intra-op threads per stage by default: the encode, search and read stages already run in
#: parallel, and more threads each oversubscribe the cores (docs/benchmarks.md, "Serving")
STAGE_THREADS = 1


def create_app(
    index: str | Path | Index | SearchService,
    *,
    title: str | None = None,
    batching: bool = True,
    warm_up: bool = True,
    threads: int | None = None,
    question_bf16: bool | None = None,
    reader: str | Path | None = None,
    read: int | None = None,
    max_k: int = MAX_K,
    read_threads: int | None = None,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    **load_options: Any,
) -> FastAPI:
    """The application over one index (a directory, an open :class:`Index`, or a
    :class:`SearchService`), loaded here, once, before the first request.  ``batching``:
    search requests that queue up together as one batch (see :mod:`.service`); ``warm_up``:
    one search before serving, so the first request is not slowed by torch's first call;
    ``threads``: torch's, FAISS's and ONNX Runtime's threads per stage (default
    :data:`STAGE_THREADS`); ``question_bf16``:
    bfloat16 question encoding (default: where the CPU has native bf16); ``reader``: the
    reader of unit ``answer`` (a directory or shipped name; default: the shipped reader for
    the corpus language, where one ships), ``read`` the passages it reads per question and
    ``read_threads`` the threads reading at once (default: two, at most one per core);
    ``max_k``: the most hits a request may ask for; ``api_key``: the key every request but
    the page's, the docs' and health's must carry; ``cors_origins``: the browser origins
    allowed to call the API (:mod:`.access`); ``load_options``: ``Index.load``'s
    (``device``, ``model``), refused by name where the kind takes none."""
    api_key = check_api_key(api_key)
    origins = check_cors_origins(cors_origins)
    set_threads(STAGE_THREADS if threads is None else threads)
    if isinstance(index, SearchService):
        if reader is not None or read is not None or read_threads is not None or max_k != MAX_K:
            raise AnygrainError(
                "reader, read, read_threads and max_k are the SearchService's: pass them to it"
            )
        service = index
    else:
        service = SearchService.load(
            index,
            batching=batching,
            question_bf16=question_bf16,
            reader=reader,
            read=read,
            max_k=max_k,
            read_threads=read_threads,
            **load_options,
        )
    if warm_up:
        service.warm_up()
    info = service.info()
    app = FastAPI(
        title=title or f"anygrain: {info['index']}",
        docs_url=None,  # FastAPI's pages load scripts from a CDN: add_docs serves bundled ones
        redoc_url=None,
        version=__version__,
        description=(
            f"Search a {info['kind']} index (units: {', '.join(info['units'])}). "
            "Every search response carries its server-side latency in milliseconds."
        ),
    )
    app.state.service = service
    add_error_handlers(app)
    add_search_routes(app, service, info)
    add_index_routes(app, service, Description(app, service, info, keyed=api_key is not None))
    add_docs(app)
    guard(app, api_key=api_key, cors_origins=origins)
    return app


class Description:
    """What describes the served index (``/info`` and the page, kept in ``app.state.info``
    too): rendered once per index, again only when the service reloads a replaced index."""

    def __init__(
        self, app: FastAPI, service: SearchService, info: dict[str, Any], *, keyed: bool = False
    ) -> None:
        self.app = app
        self.service = service
        self.keyed = keyed  # the API wants a key: the page asks for it
        self._use(service.generation, info)

    def _use(self, generation: int, info: dict[str, Any]) -> None:
        self.generation = generation
        self.info = info
        self.html = page.render(info, keyed=self.keyed)
        self.app.state.info = info

    def current(self) -> "Description":
        """This description, made again first when the index was reloaded since."""
        if self.generation != self.service.generation:
            generation = self.service.generation
            self._use(generation, self.service.info())
        return self


def add_error_handlers(app: FastAPI) -> None:
    """Every refused request gets a 4xx with ``{"error": ...}``, an index that does not
    open a 503, and a bug a 500 naming only the exception's type."""

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, exc: RequestError) -> JSONResponse:
        return _error(422, str(exc))

    @app.exception_handler(ReaderUnavailable)
    async def on_no_reader(request: Request, exc: ReaderUnavailable) -> JSONResponse:
        return _error(400, str(exc))  # the server's setup, not the question: says --reader

    @app.exception_handler(IndexUnavailable)
    async def on_index_unavailable(request: Request, exc: IndexUnavailable) -> JSONResponse:
        return _error(503, str(exc))  # the service logged it when it happened

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(*_validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse({"error": msg}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("search failed")
        return _error(500, f"internal error: {type(exc).__name__}")


def option_parameters() -> list[dict[str, Any]]:
    """The OpenAPI query parameters of the documented search options (``GET /search`` takes
    any search option its index lets a client set: :mod:`.options`)."""
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": {"type": kind},
            "description": doc,
        }
        for name, (kind, doc) in SEARCH_OPTIONS.items()
    ]


#: The paths before ``/v1``: still served, left out of the schema.
LEGACY = {"/v1/search": "/search", "/v1/health": "/health", "/v1/info": "/info"}

FILTER_DOC = (
    "Keep the top k hits whose metadata match: a JSON object, "
    '{"field": value}, {"field": [a, b]}, $ne, $in, $nin, $gt, $gte, $lt, $lte, '
    "$exists, $and, $or, $not; or FIELD=VALUE items separated by spaces "
    "(FIELD=A,B: any of) (docs/serve.md)"
)
FLOOR_DOC = (
    "Unit answer: below this calibrated confidence (0 to 1) the question is not answered "
    "and its hits are the passages read (unit passage, each with the best answer's "
    "confidence)"
)


def route(app: FastAPI, method: str, path: str, **kw: Any) -> Any:
    """A decorator registering a handler at ``path`` (with its operation id, in the schema)
    and at its path before ``/v1`` (out of the schema)."""

    def register(fn: Any) -> Any:
        app.add_api_route(path, fn, methods=[method], **kw)
        if path in LEGACY:
            extra = {k: v for k, v in kw.items() if k in ("response_model", "response_class")}
            app.add_api_route(LEGACY[path], fn, methods=[method], include_in_schema=False, **extra)
        return fn

    return register


#: The query parameters a GET search and a GET ask share.
QuestionQuery = Annotated[
    str, Query(description=f"The question (1 to {MAX_QUESTION_CHARS} characters)")
]
FilterQuery = Annotated[str | None, Query(description=FILTER_DOC)]
FloorQuery = Annotated[float | None, Query(description=FLOOR_DOC)]


def get_search_route(app: FastAPI, path: str, operation_id: str) -> Any:
    """:func:`route` for a GET of one question's hits, whose other query parameters are
    search options (listed in the schema)."""
    return route(
        app,
        "GET",
        path,
        operation_id=operation_id,
        response_model=SearchResponse,
        responses=ERRORS,
        openapi_extra={"parameters": option_parameters()},
    )


def add_search_routes(app: FastAPI, service: SearchService, info: dict[str, Any]) -> None:
    """``GET /v1/search`` (one question), ``POST /v1/search`` (a batch) and ``GET /v1/ask``
    (one question's answers)."""
    k_doc = f"Hits to return, 1 to {service.max_k} (the server's --max-k)"

    @get_search_route(app, "/v1/search", "search")
    async def search_get(
        request: Request,
        q: QuestionQuery,
        unit: Annotated[
            str | None,
            Query(
                description="phrase, sentence, passage, document, or answer (a reader reads "
                f"the top passages); allowed: {info['units']}"
            ),
        ] = None,
        k: Annotated[int, Query(description=k_doc)] = DEFAULT_K,
        filter: FilterQuery = None,
        min_confidence: FloorQuery = None,
    ) -> Response:
        """Top-``k`` hits for one question; any other query parameter is a search option."""
        return await _search_one(service, request, q, unit, k, filter, min_confidence)

    @get_search_route(app, "/v1/ask", "ask")
    async def ask(
        request: Request,
        q: QuestionQuery,
        k: Annotated[int, Query(description="Answers to return, 1 to the server's --max-k")] = 1,
        filter: FilterQuery = None,
        min_confidence: FloorQuery = None,
    ) -> Response:
        """The answers a reader reads out of the top passages (unit answer): what ``GET
        /v1/search?unit=answer`` returns, the best answer first."""
        if "unit" in request.query_params:  # not silently ignored
            raise RequestError("/v1/ask reads answers: it takes no unit (see /v1/search)")
        return await _search_one(service, request, q, Unit.ANSWER.value, k, filter, min_confidence)

    @route(
        app,
        "POST",
        "/v1/search",
        operation_id="search_batch",
        response_model=BatchResponse,
        responses=ERRORS,
    )
    async def search_post(body: BatchRequest) -> Response:
        """Top-``k`` hits for each of a batch of questions (searched together)."""
        r = await service.search_async(
            body.questions,
            unit=body.unit,
            k=body.k,
            filter=body.filter,
            options=body.search_options(),
            min_confidence=body.min_confidence,
        )
        results = [
            QuestionResult(question=q, hits=hits_out(h))
            for q, h in zip(body.questions, r.hits, strict=True)
        ]
        return _json(BatchResponse(unit=r.unit, k=r.k, results=results, latency_ms=r.latency_ms))


async def _search_one(
    service: SearchService,
    request: Request,
    q: str,
    unit: str | None,
    k: int,
    filter: str | None,
    min_confidence: float | None,
) -> Response:
    r = await service.search_async(
        [q],
        unit=unit,
        k=k,
        filter=query_filter(filter),
        options=query_options(request.query_params),
        min_confidence=min_confidence,
    )
    return _json(
        SearchResponse(
            question=q, unit=r.unit, k=r.k, hits=hits_out(r.hits[0]), latency_ms=r.latency_ms
        )
    )


def _json(model: BaseModel) -> Response:
    """``model`` as the JSON response, serialised once: returned as a model, FastAPI would
    validate it again against the declared ``response_model`` (the schema /docs shows)."""
    return Response(model.model_dump_json(), media_type="application/json")


def add_index_routes(app: FastAPI, service: SearchService, described: Description) -> None:
    """``GET /`` (the search page), ``GET /v1/health``, ``GET /v1/info`` and ``GET
    /v1/passages/{passage_id}``."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def home() -> HTMLResponse:
        html = described.current().html
        return HTMLResponse(html, headers={"Content-Security-Policy": PAGE_CSP})

    @route(
        app,
        "GET",
        "/v1/health",
        operation_id="health",
        response_model=HealthResponse,
        responses={503: {"model": HealthResponse, "description": "The index cannot be searched"}},
    )
    def health() -> Any:
        """Whether the index can be searched: its files are as loaded (or it was reloaded
        after they changed) and the server answers; 503 ``unhealthy`` with the error when not."""
        try:
            service.check_index()
            error = None
        except IndexUnavailable as e:
            error = str(e)
        body = HealthResponse(
            status="ok" if error is None else "unhealthy",
            kind=service.index.kind.value,
            uptime_s=round(time.time() - service.started, 3),
            searches=service.n_searches,
            questions=service.n_questions,
            reloads=service.n_reloads,
            error=error,
        )
        if error is None:
            return body
        return JSONResponse(body.model_dump(), status_code=503)

    @route(app, "GET", "/v1/info", operation_id="info", response_model=InfoResponse)
    def index_info() -> InfoResponse:
        """The index: kind, format version, model, corpus, counts, allowed units (answer
        when a reader is available: ``reader``, reading ``read`` passages), limits."""
        return InfoResponse(**described.current().info)

    @route(
        app,
        "GET",
        "/v1/passages/{passage_id}",
        operation_id="get_passage",
        response_model=PassageOut,
        responses={**ERRORS, 404: {"model": ErrorResponse, "description": "No such passage"}},
    )
    def get_passage(passage_id: str) -> Response:
        """One passage by id (a hit's ``passage_id``), whole: its text, title, document,
        sentence spans and metadata."""
        try:
            found = service.passage(passage_id)
        except RequestError as e:
            return _error(404, str(e))
        return _json(PassageOut(**found))
