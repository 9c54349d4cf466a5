"""Who runs an encode's shard jobs: the :class:`Executor` protocol and its registry.

The engine (:mod:`anygrain.encode.engine`) hands an executor the shards still to encode
and a task that encodes one of them into a temporary directory; the executor runs the
task on each, anywhere, in any order, and yields each result as it finishes.  The engine
alone renames finished shards into place and records them, so an executor never touches
the manifest.

:class:`LocalExecutor` runs the tasks in this process, one after another.  Another kind
(a Ray cluster, say) is a member of :class:`ExecutorKind`, a line in
:data:`EXECUTOR_MODULES`, and a module defining a class decorated
``@register_executor(ExecutorKind.X)``; the engine does not change.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from anygrain.errors import AnygrainError

J = TypeVar("J")
R = TypeVar("R")


class Executor(Protocol):
    """Runs ``task`` on every job; yields ``(job, result)`` as each finishes, in any order.

    A task that raises stops the run: the error reaches the engine, which keeps the
    shards already yielded.  Tasks must not depend on each other or on their order.
    """

    def run(self, task: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[J, R]]: ...


T = TypeVar("T", bound=Executor)


class ExecutorKind(str, enum.Enum):
    LOCAL = "local"  # in this process, one shard after another
    RAY = "ray"  # a pool of Ray actors, one model each (the optional ``ray`` extra)


# ExecutorKind value -> module that registers the kind's executor on import
EXECUTOR_MODULES: dict[str, str] = {
    "local": "anygrain.encode.executor",
    "ray": "anygrain.encode.ray_executor",
}

_REGISTRY: dict[ExecutorKind, Callable[[], Executor]] = {}


def register_executor(kind: ExecutorKind) -> Callable[[type[T]], type[T]]:
    """Class decorator: make :func:`make_executor` build this class for ``kind``."""

    def deco(cls: type[T]) -> type[T]:
        _REGISTRY[kind] = cls
        return cls

    return deco


def make_executor(kind: ExecutorKind | str = ExecutorKind.LOCAL) -> Executor:
    """A new executor of ``kind``, importing the module that defines it on first use."""
    try:
        kind = ExecutorKind(kind)
    except ValueError:
        names = ", ".join(k.value for k in ExecutorKind)
        raise AnygrainError(f"unknown executor {kind!r}; one of: {names}") from None
    if kind not in _REGISTRY:
        importlib.import_module(EXECUTOR_MODULES[kind.value])  # registers itself
    return _REGISTRY[kind]()


def as_executor(executor: Executor | ExecutorKind | str | None) -> Executor:
    """``executor`` itself, or a new one of the kind named (None: the local one)."""
    if executor is None:
        return make_executor(ExecutorKind.LOCAL)
    if isinstance(executor, str):  # an ExecutorKind is a str too
        return make_executor(executor)
    return executor


def is_remote(executor: object) -> bool:
    """Whether ``executor`` runs shards elsewhere (Ray actors), not in this process: there
    the CPU (its bfloat16, its int8 instructions) is not this one's."""
    return executor is not None and str(getattr(executor, "value", executor)) != "local"


@register_executor(ExecutorKind.LOCAL)
class LocalExecutor:
    """Every shard in this process, in row order: what a single machine does."""

    def run(self, task: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[J, R]]:
        for job in jobs:
            yield job, task(job)
