"""How a manifest records finished shards on disk: one layout per on-disk format.

The engine keeps a manifest as the JSON dict it reads and writes, so a file written by
an earlier version is resumed with its keys and their order untouched; a layout reads
and marks shards in it.  Two layouts exist because two formats shipped:

* :class:`ShardListManifest` (``shards.json`` of dense vectors): every planned shard
  listed with its ``file``, rows and ``nbytes`` (null until finished), and a
  ``complete`` flag; one file per shard.
* :class:`DoneMapManifest` (``dump.json`` of a phrase dump): ``done`` maps each finished
  shard's number to its ``rows`` and what its encoder reported; no sizes are recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from anygrain.encode.jobs import ShardJob, ShardRecord


class ManifestLayout(Protocol):
    """Reads and marks shards in a manifest dict of one on-disk format."""

    @property
    def file(self) -> str:
        """The manifest's file name in the shard directory."""
        ...

    def new(
        self, identity: Mapping[str, Any], shards: Sequence[tuple[ShardJob, tuple[str, ...]]]
    ) -> dict[str, Any]:
        """A fresh manifest: ``identity`` and nothing finished; ``shards`` are ``(job, files)``."""
        ...

    def record(
        self, manifest: dict[str, Any], job: ShardJob, files: tuple[str, ...]
    ) -> ShardRecord | None:
        """What the manifest says ``job`` left, or None when it is not recorded as finished."""
        ...

    def mark_done(self, manifest: dict[str, Any], record: ShardRecord) -> None: ...

    def finish(self, manifest: dict[str, Any]) -> bool:
        """Mark every shard finished; whether that changed the manifest."""
        ...


@dataclass(frozen=True)
class ShardListManifest:
    file: str = "shards.json"

    def new(
        self, identity: Mapping[str, Any], shards: Sequence[tuple[ShardJob, tuple[str, ...]]]
    ) -> dict[str, Any]:
        entries = [self._entry(job, files, None) for job, files in shards]
        return {**identity, "complete": False, "shards": entries}

    def record(
        self, manifest: dict[str, Any], job: ShardJob, files: tuple[str, ...]
    ) -> ShardRecord | None:
        listed = manifest["shards"]
        if job.index >= len(listed):
            return None
        s = listed[job.index]
        if s.get("nbytes") is None or s != self._entry(job, files, s["nbytes"]):
            return None
        return ShardRecord(job, {s["file"]: int(s["nbytes"])})

    def mark_done(self, manifest: dict[str, Any], record: ShardRecord) -> None:
        ((name, size),) = record.sizes.items()
        manifest["shards"][record.job.index] = self._entry(record.job, (name,), size)

    def finish(self, manifest: dict[str, Any]) -> bool:
        if manifest.get("complete"):
            return False
        manifest["complete"] = True
        return True

    @staticmethod
    def _entry(job: ShardJob, files: tuple[str, ...], nbytes: int | None) -> dict[str, Any]:
        if len(files) != 1:
            raise ValueError(f"a shard list records one file per shard, not {files}")
        return {"file": files[0], "start": job.start, "end": job.end, "nbytes": nbytes}


@dataclass(frozen=True)
class DoneMapManifest:
    file: str = "dump.json"

    def new(
        self, identity: Mapping[str, Any], shards: Sequence[tuple[ShardJob, tuple[str, ...]]]
    ) -> dict[str, Any]:
        return {**identity, "done": {}}

    def record(
        self, manifest: dict[str, Any], job: ShardJob, files: tuple[str, ...]
    ) -> ShardRecord | None:
        entry = manifest["done"].get(str(job.index))
        if entry is None or entry.get("rows") != [job.start, job.end]:
            return None
        info = {k: v for k, v in entry.items() if k != "rows"}
        return ShardRecord(job, dict.fromkeys(files), info)

    def mark_done(self, manifest: dict[str, Any], record: ShardRecord) -> None:
        done = manifest["done"]
        done[str(record.job.index)] = {"rows": [record.job.start, record.job.end], **record.info}
        # shard order, whichever order an executor finished them in
        manifest["done"] = dict(sorted(done.items(), key=lambda kv: int(kv[0])))

    def finish(self, manifest: dict[str, Any]) -> bool:
        return False  # a dump records no completion: every shard being done is enough
