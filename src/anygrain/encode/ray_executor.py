"""Encoding shards on a Ray cluster: a pool of actors, one model each.

The engine (:mod:`anygrain.encode.engine`) hands :class:`RayExecutor` the shards still to
encode and the task that encodes one.  The task (with the shard encoder and its model) is
put in Ray's object store once; each of ``workers`` actors deserializes it once, so a
worker loads one model however many shards it encodes.  Shards go to whichever actor is
free, and each finished one comes back to the engine, which renames its files into place
and records it exactly as for a local encode: same shard files, same manifest, and a
rerun skips the shards already finished.

A task that raises is retried ``retries`` times (Ray's ``retry_exceptions``), and an
actor that dies (a pre-empted node, a killed process) is restarted and its shard
retried as often (``max_restarts`` / ``max_task_retries``).  Since a shard is always
encoded whole into a fresh temporary directory, a retry redoes it from scratch.

Workers write their shards straight into the output directory, so every worker must
see it at the same path: on one machine that is always so; a cluster of several
machines needs the output directory (and the corpus and model) on a shared filesystem.

Ray is an optional dependency (``pip install anygrain[ray]``): this module imports
without it, and only running an encode needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from anygrain.encode.executor import ExecutorKind, register_executor
from anygrain.errors import AnygrainError

try:
    import ray
except ImportError:  # an optional extra: the error comes when an encode needs it
    ray = None  # type: ignore[assignment]

J = TypeVar("J")
R = TypeVar("R")

INSTALL_HINT = "the Ray executor needs Ray: pip install anygrain[ray]"


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide a Ray encode runs.

    ``address``: None starts a local Ray for the encode (and stops it after); ``"auto"``
    joins the cluster running on this machine; ``HOST:PORT`` or ``ray://HOST:PORT`` a
    given one.  Ray already initialised in this process (a test, a notebook) is used as is.
    """

    address: str | None = None
    workers: int = 2  # actors, each with its own model
    retries: int = 2  # times a failed or lost shard is tried again before the run stops
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None  # None: one per worker when the cluster has GPUs

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise AnygrainError(f"Ray workers must be at least 1, not {self.workers}")
        if self.retries < 0:
            raise AnygrainError(f"Ray retries must be 0 or more, not {self.retries}")


class _ShardWorker:
    """One actor: the task (shard encoder and model) deserialized once, then run per shard."""

    def __init__(self, task: Callable[[Any], Any]) -> None:
        self.task = task  # Ray resolved the object ref: deserialized here, once per actor

    def run(self, job: Any) -> tuple[Any, Any]:
        return job, self.task(job)


@register_executor(ExecutorKind.RAY)
class RayExecutor:
    """Runs shard tasks on a pool of Ray actors; see the module docstring."""

    def __init__(self, config: RayConfig | None = None) -> None:
        self.config = config or RayConfig()

    def run(self, task: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[J, R]]:
        if not jobs:
            return
        if ray is None:
            raise AnygrainError(INSTALL_HINT)
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.config.address, include_dashboard=False, log_to_driver=True)
        try:
            yield from self._run(task, jobs)
        finally:
            if started:
                ray.shutdown()

    def _gpus(self) -> float:
        if self.config.gpus_per_worker is not None:
            return self.config.gpus_per_worker
        # the cluster's GPUs, not this process's: the driver may be a CPU-only head node
        return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0

    def _run(self, task: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[J, R]]:
        cfg = self.config
        retries = cfg.retries
        actor_cls = ray.remote(
            num_cpus=cfg.cpus_per_worker,
            num_gpus=self._gpus(),
            max_restarts=retries,  # an actor that died comes back (and loads its model again)
            max_task_retries=retries,  # and the shard it was encoding is run again
        )(_ShardWorker)
        task_ref = ray.put(task)  # serialized once for every worker
        actors: list[Any] = [actor_cls.remote(task_ref) for _ in range(min(cfg.workers, len(jobs)))]
        todo = list(reversed(jobs))  # popped from the end: shards start in row order
        running: dict[Any, Any] = {}  # object ref -> the actor running it

        def submit(actor: Any) -> None:
            method = actor.run.options(retry_exceptions=retries > 0)
            running[method.remote(todo.pop())] = actor

        try:
            for actor in actors:
                if todo:
                    submit(actor)
            while running:
                (ref,), _ = ray.wait(list(running), num_returns=1)
                actor = running.pop(ref)
                try:
                    job, result = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    # the task's own error (after its retries), as if it had run here
                    raise e.as_instanceof_cause() from None
                if todo:
                    submit(actor)
                yield job, result
        finally:
            # stop what is still running: a failed run, or the engine stopped reading;
            # their half-written temporary shards die with them and a rerun clears them
            for actor in actors:
                ray.kill(actor)
