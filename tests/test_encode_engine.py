"""The shard engine with a numpy-only fake encoder: planning, resume, failures, executors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from anygrain.encode import (
    DoneMapManifest,
    EncodeSpec,
    ExecutorKind,
    LocalExecutor,
    ManifestLayout,
    OnMismatch,
    ShardedEncode,
    ShardJob,
    ShardListManifest,
    make_executor,
    plan_shards,
)
from anygrain.errors import AnygrainError, IndexMismatchError

J = TypeVar("J")
R = TypeVar("R")
N = 23
DEAD_PID = 999_999_999  # above any pid_max: no such process


@dataclass
class FakeEncoder:
    """Row ``r`` becomes ``[r, r * r]``; with ``two_files`` a shard also writes its row count."""

    two_files: bool = False
    fail_on: int | None = None
    encoded: list[int] = field(default_factory=list)

    def files(self, job: ShardJob) -> tuple[str, ...]:
        names = (f"part-{job.index:05d}.npy",)
        return (*names, f"count-{job.index:05d}.npy") if self.two_files else names

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        rows = np.arange(job.start, job.end, dtype=np.int64)
        np.save(into / self.files(job)[0], np.stack([rows, rows * rows], axis=1))
        if job.index == self.fail_on:
            raise RuntimeError("power cut")  # after writing: the half shard must not survive
        if self.two_files:
            np.save(into / self.files(job)[1], np.asarray([job.n]))
        self.encoded.append(job.index)
        return {"rows_seen": job.n} if self.two_files else {}


class ReverseExecutor:
    """Runs the shards last first: the output must not depend on the order."""

    def run(self, task: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[J, R]]:
        for job in reversed(jobs):
            yield job, task(job)


LAYOUTS: dict[str, tuple[ManifestLayout, bool]] = {
    "shard-list": (ShardListManifest(), False),
    "done-map": (DoneMapManifest(), True),
}


def _spec(
    layout: ManifestLayout, on_mismatch: OnMismatch = OnMismatch.REFUSE, **ident: Any
) -> EncodeSpec:
    return EncodeSpec(
        identity={"format": "fake", "n": N, **ident},
        shard_size=10,
        layout=layout,
        on_mismatch=on_mismatch,
        progress=False,
    )


def _engine(out: Path, layout: str = "shard-list", **kw: Any) -> tuple[ShardedEncode, FakeEncoder]:
    lay, two = LAYOUTS[layout]
    enc = FakeEncoder(two_files=two, fail_on=kw.pop("fail_on", None))
    mismatch = kw.pop("on_mismatch", OnMismatch.REFUSE)
    executor = kw.pop("executor", None)
    return ShardedEncode(out, N, enc, _spec(lay, mismatch, **kw), executor=executor), enc


def _stop_at(k: int) -> Callable[[int, int], None]:
    def hook(i: int, n: int) -> None:
        if i == k:
            raise KeyboardInterrupt

    return hook


def _rows(out: Path) -> np.ndarray:
    return np.concatenate([np.load(p) for p in sorted(out.glob("part-*.npy"))])


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_plan_shards() -> None:
    assert [(j.start, j.end) for j in plan_shards(23, 10)] == [(0, 10), (10, 20), (20, 23)]
    assert {j.n_shards for j in plan_shards(23, 10)} == {3} and plan_shards(20, 10)[-1].n == 10
    assert plan_shards(0, 10) == [] and plan_shards(3, 10)[0].rows == range(3)
    with pytest.raises(AnygrainError, match="positive"):
        plan_shards(5, 0)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_run_writes_every_shard_and_records_it(tmp_path: Path, layout: str) -> None:
    engine, enc = _engine(tmp_path / "o", layout)
    result = engine.run()
    assert enc.encoded == [0, 1, 2] and result.resumed == 0
    assert [(r.job.start, r.job.end) for r in result.records] == [(0, 10), (10, 20), (20, 23)]
    np.testing.assert_array_equal(_rows(tmp_path / "o")[:, 0], np.arange(N))
    m = json.loads(engine.manifest_path.read_text())
    if layout == "shard-list":
        assert m["complete"] and [s["file"] for s in m["shards"]] == result.files()
        assert all(s["nbytes"] == (tmp_path / "o" / s["file"]).stat().st_size for s in m["shards"])
    else:
        assert m["done"]["2"] == {"rows": [20, 23], "rows_seen": 3}
    assert not [p for p in (tmp_path / "o").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_resume_skips_finished_shards(tmp_path: Path, layout: str) -> None:
    ref, _ = _engine(tmp_path / "ref", layout)
    ref.run()
    engine, enc = _engine(tmp_path / "o", layout)
    with pytest.raises(KeyboardInterrupt):
        engine.run(_stop_at(1))
    assert enc.encoded == [0, 1]
    if layout == "shard-list":  # the manifest says the run is unfinished
        assert not json.loads(engine.manifest_path.read_text())["complete"]
    again, enc2 = _engine(tmp_path / "o", layout)
    result = again.run()
    assert enc2.encoded == [2] and result.resumed == 2
    assert _snapshot(tmp_path / "o") == _snapshot(tmp_path / "ref")


def test_half_written_shards_are_redone(tmp_path: Path) -> None:
    out = tmp_path / "o"
    _engine(out)[0].run()
    # a killed run's temporary shard directory, a recorded shard truncated since, and a
    # shard whose files were renamed into place but never recorded
    stale = out / f".shard.pid{DEAD_PID}.abc123.tmp"
    stale.mkdir()
    (stale / "part-00001.npy").write_bytes(b"half")
    (out / "part-00000.npy").write_bytes((out / "part-00000.npy").read_bytes()[:50])
    m = json.loads((out / "shards.json").read_text())
    m["shards"][2]["nbytes"] = None
    (out / "shards.json").write_text(json.dumps(m))
    engine, enc = _engine(out)
    assert engine.run().resumed == 1
    assert enc.encoded == [0, 2] and not stale.exists()
    np.testing.assert_array_equal(_rows(out)[:, 1], np.arange(N) ** 2)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_failing_shard_keeps_the_finished_ones(tmp_path: Path, layout: str) -> None:
    out = tmp_path / "o"
    engine, enc = _engine(out, layout, fail_on=1, executor=ReverseExecutor())
    with pytest.raises(RuntimeError, match="power cut"):
        engine.run()
    assert enc.encoded == [2]
    # shard 2 whole and recorded; nothing of shard 1, not even its temporary directory
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [engine.spec.layout.file, *engine.encoder.files(engine.jobs[2])]
    )
    m = json.loads(engine.manifest_path.read_text())
    if layout == "shard-list":
        assert [s["nbytes"] is not None for s in m["shards"]] == [False, False, True]
    else:
        assert list(m["done"]) == ["2"]
    again, enc2 = _engine(out, layout)
    assert again.run().resumed == 1 and enc2.encoded == [0, 1]
    np.testing.assert_array_equal(_rows(out)[:, 0], np.arange(N))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_output_does_not_depend_on_the_executor(tmp_path: Path, layout: str) -> None:
    _engine(tmp_path / "local", layout, executor=ExecutorKind.LOCAL)[0].run()
    engine, enc = _engine(tmp_path / "rev", layout, executor=ReverseExecutor())
    engine.run()
    assert enc.encoded == [2, 1, 0]
    assert _snapshot(tmp_path / "rev") == _snapshot(tmp_path / "local")


def test_another_identity_is_refused_or_restarted(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):
        _engine(out, model="a")[0].run(_stop_at(0))
    with pytest.raises(IndexMismatchError, match="model: 'a' there, 'b' now"):
        _engine(out, model="b")[0].run()
    engine, enc = _engine(out, model="b", on_mismatch=OnMismatch.RESTART)
    assert engine.run().resumed == 0 and enc.encoded == [0, 1, 2]
    (out / "shards.json").write_text("{not json")
    with pytest.raises(AnygrainError, match="unreadable"):
        _engine(out, model="b")[0].run()


def test_executors_by_kind() -> None:
    assert isinstance(make_executor("local"), LocalExecutor)
    # the Ray executor's module imports without Ray: only running an encode needs it
    assert type(make_executor(ExecutorKind.RAY)).__name__ == "RayExecutor"
    with pytest.raises(AnygrainError, match="unknown executor 'dask'"):
        make_executor("dask")


def test_the_bar_counts_rows_with_resumed_shards_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By rows, not shards: a one-shard encode would read 0/1 until the end."""
    lay, two = LAYOUTS["shard-list"]
    spec = EncodeSpec(identity={"format": "fake", "n": N}, shard_size=10, layout=lay, unit="row")
    with pytest.raises(KeyboardInterrupt):
        ShardedEncode(tmp_path / "o", N, FakeEncoder(two_files=two), spec).run(_stop_at(1))
    capsys.readouterr()
    ShardedEncode(tmp_path / "o", N, FakeEncoder(two_files=two), spec).run()
    err = capsys.readouterr().err
    assert f"{N}/{N}" in err and "row" in err and "shard" not in err
    assert f"20/{N}" in err  # the two shards done before count from the start
