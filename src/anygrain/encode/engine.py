"""One resumable encode-to-disk loop for every kind that encodes a corpus in shards.

Encoding a large corpus takes hours, so it is cut into shards of consecutive rows
(:func:`~anygrain.encode.jobs.plan_shards`) that are encoded and saved one by one:

* a shard is encoded into a temporary directory (``.shard.pidPID.XXXX.tmp``) and its
  files are renamed into place only once all of them are written, then recorded in
  the manifest (written atomically): a crash leaves whole shards or none;
* a rerun skips the shards the manifest records whose files are still there (and of
  the recorded size), redoes the others, and removes what killed runs left half
  written; because a shard is always encoded as one unit, the result is the same as
  that of an uninterrupted run;
* a directory started under another identity (model, corpus, settings) is never
  mixed in: it is refused or started again (:class:`OnMismatch`).

What a shard holds is the concern of a :class:`ShardEncoder` (dense vectors, phrase
token arrays, a training cache), how the manifest records it that of a
:class:`~anygrain.encode.manifest.ManifestLayout`, and where shards are encoded that
of an :class:`~anygrain.encode.executor.Executor`.  Nothing here knows about models.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from anygrain.encode.executor import Executor, ExecutorKind, as_executor
from anygrain.encode.jobs import ShardJob, ShardRecord, plan_shards
from anygrain.encode.manifest import ManifestLayout
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.utils.atomic import atomic_write_text, remove_stale, remove_stale_files
from anygrain.utils.progress import progress_counter

TMP_STEM = "shard"  # temporary shard directories are .shard.pidPID.XXXX.tmp


class ShardEncoder(Protocol):
    """The per-kind work: which files a shard is, and how to write them."""

    def files(self, job: ShardJob) -> tuple[str, ...]:
        """The names of the files shard ``job`` consists of (in the shard directory)."""
        ...

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        """Encode rows ``job.rows`` and write ``files(job)`` into the empty directory ``into``;
        return what the manifest should record about the shard (JSON values; may be empty)."""
        ...


class OnMismatch(str, enum.Enum):
    """What to do with a directory whose manifest has another identity (or is unreadable)."""

    REFUSE = "refuse"  # raise: the directory may hold hours of someone else's work
    RESTART = "restart"  # delete it and start again: a private scratch directory


@dataclass(frozen=True)
class EncodeSpec:
    """What an encode is and how it presents itself."""

    identity: Mapping[str, Any]  # manifest fields that must match to resume
    shard_size: int
    layout: ManifestLayout
    on_mismatch: OnMismatch = OnMismatch.REFUSE
    what: str = "shards"  # what the directory holds, for messages
    desc: str = "encoding"  # the progress bar's label
    # a bar over the rows (advanced as each shard is saved, with an ETA; off when the
    # encoder reports within shards), counted in ``unit``
    progress: bool = True
    unit: str = "passage"


@dataclass(frozen=True)
class EncodeResult:
    """Every shard's record, in row order, and how many an earlier run had finished."""

    records: list[ShardRecord]
    resumed: int
    manifest: dict[str, Any]

    def files(self) -> list[str]:
        """All shard files, in row order."""
        return [name for r in self.records for name in r.sizes]


def _task(out: Path, encoder: ShardEncoder) -> Callable[[ShardJob], tuple[Path, dict[str, Any]]]:
    """Encode one shard into a fresh temporary directory under ``out``; removed on failure."""

    def run(job: ShardJob) -> tuple[Path, dict[str, Any]]:
        tmp = Path(
            tempfile.mkdtemp(dir=out, prefix=f".{TMP_STEM}.pid{os.getpid()}.", suffix=".tmp")
        )
        try:
            info = encoder.encode(job, tmp)
            missing = [f for f in encoder.files(job) if not (tmp / f).is_file()]
            if missing:
                raise RuntimeError(f"shard {job.index}: the encoder wrote no {', '.join(missing)}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp, info

    return run


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class ShardedEncode:
    """Encode ``n_rows`` rows into shards under ``out``; :meth:`run` resumes where it stopped."""

    def __init__(
        self,
        out: str | Path,
        n_rows: int,
        encoder: ShardEncoder,
        spec: EncodeSpec,
        *,
        executor: Executor | ExecutorKind | str | None = None,
    ) -> None:
        self.out = Path(out)
        self.encoder = encoder
        self.spec = spec
        self.jobs = plan_shards(n_rows, spec.shard_size)
        self.executor = as_executor(executor)

    @property
    def manifest_path(self) -> Path:
        return self.out / self.spec.layout.file

    def run(self, on_shard: Callable[[int, int], None] | None = None) -> EncodeResult:
        """Encode every shard not finished yet.  ``on_shard(i, n_shards)`` is called once
        shard ``i`` is safely on disk and recorded (progress, or tests interrupting)."""
        self.out.mkdir(parents=True, exist_ok=True)
        remove_stale_files(self.out)  # shard files half written by killed runs
        remove_stale(self.out / TMP_STEM)  # and their temporary shard directories
        manifest = self._open_manifest()
        layout = self.spec.layout
        records: dict[int, ShardRecord] = {}
        for job in self.jobs:
            rec = layout.record(manifest, job, self.encoder.files(job))
            if rec is not None and self._intact(rec):
                records[job.index] = rec
        resumed = len(records)
        pending = [j for j in self.jobs if j.index not in records]
        # by rows, not shards: one shard of a small corpus would read 0/1 until the end
        with progress_counter(
            desc=self.spec.desc,
            unit=self.spec.unit,
            total=sum(j.n for j in self.jobs),
            initial=sum(self.jobs[i].n for i in records),
            disable=not self.spec.progress,
        ) as bar:
            for job, (tmp, info) in self.executor.run(
                # absolute: an executor may run the task in a process with another cwd
                _task(self.out.absolute(), self.encoder),
                pending,
            ):
                records[job.index] = self._commit(manifest, job, tmp, info)
                bar.update(job.n)
                if on_shard is not None:
                    on_shard(job.index, len(self.jobs))
        # every shard is recorded, so a temporary shard left now is a killed worker's whose
        # process was still exiting when this run began (Ray kills actors asynchronously)
        for entry in self.out.glob(f".{TMP_STEM}.pid*.tmp"):
            shutil.rmtree(entry, ignore_errors=True)
        if layout.finish(manifest):
            self._write(manifest)
        return EncodeResult([records[j.index] for j in self.jobs], resumed, manifest)

    # --- manifest -------------------------------------------------------------------------
    def _open_manifest(self) -> dict[str, Any]:
        path = self.manifest_path
        if path.exists():
            try:
                found = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                found = None
            if not isinstance(found, dict):
                found, diff = None, []
            else:
                diff = [k for k, v in self.spec.identity.items() if found.get(k) != v]
                if not diff:
                    return found
            if self.spec.on_mismatch is OnMismatch.REFUSE:
                raise self._mismatch(found, diff)
            shutil.rmtree(self.out)  # RESTART: never mix shards of two identities
            self.out.mkdir(parents=True)
        fresh = self.spec.layout.new(
            self.spec.identity, [(j, self.encoder.files(j)) for j in self.jobs]
        )
        self._write(fresh)
        return fresh

    def _mismatch(self, found: dict[str, Any] | None, diff: list[str]) -> AnygrainError:
        if found is None:
            return AnygrainError(
                f"{self.manifest_path}: unreadable; delete {self.out} or pick another "
                "directory to start afresh"
            )
        details = ", ".join(
            f"{k}: {found.get(k)!r} there, {self.spec.identity[k]!r} now" for k in diff
        )
        return IndexMismatchError(
            f"{self.out}: holds {self.spec.what} from a different run ({details}); refusing "
            "to mix them. Delete the directory or pick another one to start afresh."
        )

    def _write(self, manifest: dict[str, Any]) -> None:
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2))

    # --- shards ---------------------------------------------------------------------------
    def _intact(self, rec: ShardRecord) -> bool:
        """Whether a recorded shard's files are all there, of their recorded sizes."""
        for name, size in rec.sizes.items():
            f = self.out / name
            if not f.is_file() or (size is not None and f.stat().st_size != size):
                return False
        return True

    def _commit(
        self, manifest: dict[str, Any], job: ShardJob, tmp: Path, info: dict[str, Any]
    ) -> ShardRecord:
        """Rename a shard's files into place, then record it: until the manifest says so,
        a later run redoes the shard, so a crash in between costs a shard, never mixes one."""
        try:
            sizes: dict[str, int | None] = {}
            for name in self.encoder.files(job):
                _fsync(tmp / name)  # on disk before its name says it is finished
                os.replace(tmp / name, self.out / name)
                sizes[name] = (self.out / name).stat().st_size
            rec = ShardRecord(job, sizes, info)
            self.spec.layout.mark_done(manifest, rec)
            self._write(manifest)
            return rec
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
