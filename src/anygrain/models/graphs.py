"""A model's exported ONNX graph, found in the graph cache or exported: one routine for every
model that runs on ONNX Runtime (the phrase model's questions, the bi-encoder, the reader).

The graph cache (:class:`~anygrain.encode.onnx_runtime.GraphCache`) keeps each graph under
the fingerprint of the weights and settings it computes with, and a table from the *files*
a model is loaded from to what loading them found (that key, fingerprints, settings).
:func:`graph_or_export` asks that table first -- a model whose files are unchanged since
its graph was exported is not loaded at all (no torch) -- then a shipped model's graph
stored without weights (rebuilt with NumPy), then, before loading, a caller's way of
exporting elsewhere (a child process, so that the export's memory goes back to the
system); only then is the model loaded (and checked, as the caller's loader does), its
graph exported and its files recorded for the next open.  Every cache entry is checked
file by file as it is opened (:mod:`anygrain.encode.cache_checks`): a damaged one is made
again, never used.

A graph that cannot be made falls back to torch with one warning, unless ONNX Runtime was
asked for by name (:attr:`~anygrain.models.runtime.RuntimeChoice.strict`): then it is an
error in one line saying what to do instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from anygrain.encode.onnx_runtime import GraphCache, digest, files_signature
from anygrain.errors import AnygrainError

__all__ = ["Exported", "GraphSource", "Opened", "graph_or_export"]

M = TypeVar("M")  # the model, loaded (torch, or a model on its shipped graphs)
R = TypeVar("R")  # what runs it on ONNX Runtime

#: what a failed export raises (the exporter's, ONNX Runtime's, a file's, a missing library)
EXPORT_ERRORS = (AnygrainError, ImportError, OSError, RuntimeError, ValueError)


@dataclass(frozen=True)
class GraphSource:
    """Where a saved model's graph is looked for.

    ``files``: what the model is loaded from (its directory; a packed model's backbone too);
    ``kind``: the graph's kind (a shipped model's ``graphs/KIND``); ``namespaced``: the
    files table is keyed by kind and files (a model kind whose records hold other fields
    than its siblings'), else by the files alone; ``shipped``: a model directory that may
    ship the graph without weights."""

    files: Sequence[Path]
    kind: str
    namespaced: bool = False
    shipped: Path | None = None

    def signature(self) -> str | None:
        """The files table's key for the files as they are now; None when they cannot be
        read (loading the model then says what is wrong)."""
        try:
            sig = files_signature(list(self.files))
        except (AnygrainError, OSError, ValueError, KeyError):
            return None
        return f"{self.kind}-{digest(sig)}" if self.namespaced else sig

    def record(self, cache: GraphCache, signature: str | None) -> dict[str, Any] | None:
        """What the files table holds for ``signature`` (its graph intact), else what a
        shipped graph gives once rebuilt into ``cache``; None when neither."""
        if signature is None:
            return None
        found = cache.files_record(signature)
        if found is None and self.shipped is not None:
            from anygrain.models.shipped import shipped_graph_record

            found = shipped_graph_record(self.shipped, self.kind, cache, signature)
        return found


@dataclass(frozen=True)
class Exported(Generic[R]):
    """A graph just exported: its cache key, what the files table records beside it (what
    loading found: fingerprints, settings) and what runs it."""

    key: str
    runner: R
    record: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Opened(Generic[M, R]):
    """What :func:`graph_or_export` opened: ``runner`` on ONNX Runtime (None: the graph could
    not be made, the model runs on torch) and ``model`` when it had to be loaded (None: the
    graph was found without loading it)."""

    runner: R | None
    model: M | None


def graph_or_export(
    source: GraphSource | None,
    cache: GraphCache,
    *,
    use: Callable[[dict[str, Any]], R | None],
    load: Callable[[], M],
    export: Callable[[M], Exported[R]],
    strict: bool,
    refused: str,
    warned: str,
    elsewhere: Callable[[], bool] | None = None,
) -> Opened[M, R]:
    """The runner of a model's graph: ``use(record)`` of the files table's record for
    ``source`` (None when the model must be loaded after all: a fingerprint other than the
    index's, a side graph missing); else, when ``elsewhere()`` exported it (and recorded its
    files), the record it left; else ``export(load())``, its record kept for the next open.

    ``source`` None: a model given as an object, which is loaded (``load``) and exported.
    A failed export is an error when ``strict`` (``refused``, the error in brackets inserted
    before its ``;``: "PATH: cannot run the reader on ONNX Runtime; read with --runtime
    torch"), else a warning (``warned``, likewise) and the loaded model runs on torch."""
    signature = source.signature() if source is not None else None
    if source is not None:
        found = source.record(cache, signature)
        runner = use(found) if found is not None else None
        if runner is None and elsewhere is not None and elsewhere():
            found = source.record(cache, signature)
            runner = use(found) if found is not None else None
        if runner is not None:
            return Opened(runner, None)
    model = load()
    try:
        done = export(model)
    except EXPORT_ERRORS as e:
        why = f"({type(e).__name__}: {e})"
        if strict:
            raise AnygrainError(_with_reason(refused, why)) from e
        warnings.warn(_with_reason(warned, why), stacklevel=3)
        return Opened(None, model)
    if signature is not None:
        cache.remember_files(signature, done.key, **dict(done.record))
    return Opened(done.runner, model)


def _with_reason(message: str, why: str) -> str:
    head, sep, tail = message.partition(";")
    return f"{head} {why}{sep}{tail}"
