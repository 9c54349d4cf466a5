"""``anygrain serve``: an HTTP API and a web page over one index, loaded once.

* :mod:`anygrain.serve.service` -- the index behind its worker threads (no web code)
* :mod:`anygrain.serve.requests` -- what a request may ask: limits and checks
* :mod:`anygrain.serve.access` -- the optional API key, CORS origins, ``/docs``
* :mod:`anygrain.serve.schemas` -- request and response models (the OpenAPI schema)
* :mod:`anygrain.serve.app` -- :func:`create_app`, the FastAPI application
* :mod:`anygrain.serve.page` -- the self-contained search page served at ``/``

FastAPI is imported only by ``app``, ``access`` and ``schemas``, so ``import anygrain`` stays light.
"""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    """See :func:`anygrain.serve.app.create_app`."""
    from anygrain.serve.app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["create_app"]
