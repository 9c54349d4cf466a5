"""Who may call a server, and what describes its API to them: an optional API key, CORS
origins, and the interactive API docs at ``/docs`` (Swagger UI from the files the
``swagger-ui-bundle`` package ships: nothing is loaded from a CDN).

The API key (``anygrain serve --api-key KEY``) is checked on every path but the search
page (``/``, which asks for the key itself and sends it with each search), the docs
(``/docs``, ``/openapi.json``) and the health probe (``/health``, ``/v1/health``, so a load
balancer needs no key); a request without ``X-API-Key: KEY`` or ``Authorization: Bearer
KEY`` gets a 401 ``{"error": ...}``.  The key is compared in constant time.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from anygrain.errors import AnygrainError

#: Paths served without the API key: the page, the docs, the schema and the health probe.
OPEN_PATHS = frozenset({"/", "/docs", "/openapi.json", "/health", "/v1/health"})
DOCS_ASSETS = "/docs/assets"
# an origin: scheme://host[:port], no path ("*": any origin)
_ORIGIN = re.compile(r"^https?://[^/\s?#]+$")


def check_api_key(key: str | None) -> str | None:
    """``--api-key``: None (no key), or printable ASCII without spaces (a header's value)."""
    if key is None:
        return None
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        raise AnygrainError("--api-key must be a non-empty string of printable ASCII, no spaces")
    return key


def check_cors_origins(origins: Sequence[str] | None) -> list[str]:
    """``--cors-origin``: each ``*`` or an origin, ``scheme://host[:port]``."""
    out = []
    for o in origins or ():
        o = o.strip().rstrip("/")
        if o != "*" and not _ORIGIN.match(o):
            raise AnygrainError(
                f"--cors-origin {o!r}: give an origin as scheme://host[:port] "
                "(e.g. http://localhost:3000), or * for any"
            )
        out.append(o)
    return out


class APIKeyGate:
    """ASGI middleware: a 401 for a request to a guarded path without the key."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    def _allowed(self, scope: Scope) -> bool:
        path = scope.get("path", "")
        if path in OPEN_PATHS or path.startswith(DOCS_ASSETS + "/"):
            return True
        for name, value in scope.get("headers", ()):
            if name == b"x-api-key":
                given = value.strip()
            elif name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            else:
                continue
            if hmac.compare_digest(given, self.key):
                return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {
                "error": "this server needs its API key: send the header X-API-Key: KEY "
                "or Authorization: Bearer KEY"
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)


def guard(app: FastAPI, *, api_key: str | None, cors_origins: Sequence[str]) -> None:
    """The key gate (when a key is given) inside CORS (when origins are given), so a
    browser's preflight is answered without the key and a 401 carries CORS headers."""
    if api_key is not None:
        app.add_middleware(APIKeyGate, key=api_key)
        document_key(app)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "X-API-Key", "Authorization"],
        )


def document_key(app: FastAPI) -> None:
    """The schema says every guarded operation takes the key (Swagger UI's Authorize)."""
    make = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = make()
            spec.setdefault("components", {})["securitySchemes"] = {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "bearer": {"type": "http", "scheme": "bearer"},
            }
            for path, ops in spec.get("paths", {}).items():
                if path not in OPEN_PATHS:
                    for op in ops.values():
                        op["security"] = [{"apiKey": []}, {"bearer": []}]
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def swagger_dir() -> Path | None:
    """Where the ``swagger-ui-bundle`` package keeps Swagger UI's files (None: not
    installed)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    path = Path(swagger_ui_path)
    return path if (path / "swagger-ui-bundle.js").is_file() else None


def add_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI over ``/openapi.json``, its scripts served from here; without
    the package, a 404 saying what to install."""
    from starlette.staticfiles import StaticFiles

    assets = swagger_dir()
    if assets is not None:
        app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> Response:
        if assets is None:
            return JSONResponse(
                {
                    "error": "the API docs need the swagger-ui-bundle package: "
                    "pip install 'anygrain[serve]'"
                },
                status_code=404,
            )
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} · API",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon-32x32.png",
        )
