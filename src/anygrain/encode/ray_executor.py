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

Joining a cluster is bounded by ``RayConfig.timeout`` (``--ray-timeout``): ``ray.init``
itself retries a silent address for ever.  A ``HOST:PORT`` (or ``ray://HOST:PORT``)
address must first accept a TCP connection -- tried again until the timeout, so a cluster
still starting is waited for -- and then ``ray.init`` runs in a helper thread that is
given the rest of the time (an address that accepts connections but is no Ray GCS, or
``auto`` finding a stale cluster file, hangs there).  When it does not return in time the
encode fails with one line; the helper thread is left behind (a daemon: it does not keep
the process alive).  Starting a local Ray (``None`` or ``local``) is not bounded.

Ray is an optional dependency (``pip install anygrain[ray]``): this module imports
without it, and only running an encode needs it.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
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
#: seconds ``RayConfig.timeout`` gives joining a cluster by default
DEFAULT_TIMEOUT = 30.0
#: addresses that start a Ray of their own instead of joining one
_LOCAL = (None, "local")


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide a Ray encode runs.

    ``address``: None starts a local Ray for the encode (and stops it after); ``"auto"``
    joins the cluster running on this machine; ``HOST:PORT`` or ``ray://HOST:PORT`` a
    given one.  Ray already initialised in this process (a test, a notebook) is used as is.
    ``timeout``: seconds to wait for a cluster to join (see the module docstring).
    """

    address: str | None = None
    workers: int = 2  # actors, each with its own model
    retries: int = 2  # times a failed or lost shard is tried again before the run stops
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None  # None: one per worker when the cluster has GPUs
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise AnygrainError(f"Ray workers must be at least 1, not {self.workers}")
        if self.retries < 0:
            raise AnygrainError(f"Ray retries must be 0 or more, not {self.retries}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise AnygrainError(
                f"the Ray timeout must be a number of seconds > 0, not {self.timeout}"
            )


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address (IPv6 in
    brackets); None for ``auto`` or anything else without a port."""
    a = address.strip()
    if a.startswith("ray://"):
        a = a[len("ray://") :]
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _wait_reachable(address: str, host: str, port: int, deadline: float, timeout: float) -> None:
    """Return once ``host:port`` accepts a TCP connection; raise at ``deadline``."""
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(left, 5.0))):
                return
        except socket.gaierror as e:
            raise AnygrainError(
                f"cannot join the Ray cluster at {address}: unknown host {host} ({e.strerror})"
            ) from None
        except OSError as e:
            why = e.strerror or str(e) or type(e).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise AnygrainError(
                f"no Ray cluster answers at {address} within {timeout:g} s ({why}): start one "
                f"there (`ray start --head --port {port}`) or fix the address; --ray-timeout "
                "sets the wait"
            )
        time.sleep(min(0.5, left))


class _NoSigtermWarning(logging.Filter):
    """Ray warns that it sets no SIGTERM handler when ``ray.init`` runs outside the main
    thread; anygrain keeps its own (SIGTERM stops a command like Ctrl-C), so that is right."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _init_within(address: str, deadline: float, timeout: float, **kwargs: Any) -> None:
    """``ray.init(address, **kwargs)`` in a helper thread, waited for until ``deadline``
    (at least a few seconds once the address answered: joining takes one or two)."""
    box: dict[str, BaseException] = {}

    def init() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as e:  # handed to the waiting thread, raised there
            box["error"] = e

    quiet = _NoSigtermWarning()
    ray_log = logging.getLogger("ray._private.worker")
    ray_log.addFilter(quiet)
    try:
        thread = threading.Thread(target=init, name="anygrain-ray-init", daemon=True)
        thread.start()
        thread.join(max(deadline - time.monotonic(), min(timeout, 5.0)))
    finally:
        ray_log.removeFilter(quiet)
    if thread.is_alive():
        raise AnygrainError(
            f"the Ray cluster at {address} did not answer within {timeout:g} s (its address "
            "accepts connections, but Ray could not join it: is it a Ray head's GCS port, of "
            f"Ray {getattr(ray, '__version__', '?')}?); --ray-timeout sets the wait"
        )
    err = box.get("error")
    if err is None:
        return
    if not isinstance(err, Exception):
        raise err
    raise AnygrainError(f"cannot join the Ray cluster at {address}: {err}") from err


def check_reachable(config: RayConfig) -> None:
    """Fail now, in one line, when ``config`` names a ``HOST:PORT`` that accepts no
    connection within ``config.timeout`` (before a build reads its corpus and model)."""
    hp = None if config.address in _LOCAL else _host_port(config.address or "")
    if hp is not None:
        assert config.address is not None
        deadline = time.monotonic() + config.timeout
        _wait_reachable(config.address, hp[0], hp[1], deadline, config.timeout)


def connect(config: RayConfig) -> None:
    """``ray.init`` for ``config``: a local Ray is started as Ray starts it; joining a
    cluster (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``, or ``RAY_ADDRESS`` when no
    address is given) waits at most ``config.timeout`` seconds, then fails in one line."""
    if ray is None:
        raise AnygrainError(INSTALL_HINT)
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    address = config.address
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None  # what ray.init(None) would join
    if address in _LOCAL:
        try:
            ray.init(address=config.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise AnygrainError(f"cannot start a local Ray: {e}") from e
        return
    assert address is not None
    deadline = time.monotonic() + config.timeout
    hp = _host_port(address)
    if hp is not None:
        _wait_reachable(address, hp[0], hp[1], deadline, config.timeout)
    _init_within(address, deadline, config.timeout, **kwargs)


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
            connect(self.config)  # joining a cluster is bounded by config.timeout
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
