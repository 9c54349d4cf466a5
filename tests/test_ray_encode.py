"""Encoding on Ray: the same index and dump as the local executor, resume, and retries.

A local Ray with two CPUs is started once for the module; every encode runs on a pool of
actors built from it.  Skipped where Ray is not installed (``pip install anygrain[ray]``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dense_helpers import tiny_biencoder
from test_encode_engine import N, _rows, _snapshot, _spec, _stop_at
from test_phrase_helpers import make_tiny_model

from anygrain.corpus.store import CorpusStore
from anygrain.encode import ShardedEncode, ShardJob, ShardListManifest
from anygrain.encode.ray_executor import RayConfig, RayExecutor
from anygrain.index.base import Index
from anygrain.phrase.dump import dump_phrases
from anygrain.phrase.model import PhraseEncoder

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    # workers unpickle the test encoders below: send this module's code with them
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # Ray's agents must start within 15 s, which a saturated machine can miss: one retry,
    # then the tests fail (with Ray installed they must run, not skip)
    for attempt in (1, 2):
        try:
            ray.init(num_cpus=2, include_dashboard=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()


def _ray(workers: int = 2, retries: int = 2) -> RayExecutor:
    return RayExecutor(RayConfig(workers=workers, retries=retries))


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path; timings dropped from the JSON ones."""
    files = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.suffix == ".json":
            data = json.dumps(_untimed(json.loads(data)), sort_keys=True).encode()
        files[str(p.relative_to(root))] = data
    return files


def _untimed(x: Any) -> Any:
    """``x`` without wall-clock fields, and without the recorded checksums of JSON files
    (which hold such fields); every other file's checksum stays compared."""
    if isinstance(x, dict):
        return {
            k: _untimed(v)
            for k, v in x.items()
            if k not in ("timings", "created") and not k.endswith(("seconds", ".json"))
        }
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def test_a_dense_index_on_ray_is_the_local_one(squad: Path, tmp_path: Path) -> None:
    built = {}
    for name, executor in (("local", None), ("ray", _ray())):
        built[name] = Index.build(
            f"squad:{squad}",
            kind="dense",
            out=tmp_path / name,
            model=tiny_biencoder(0),
            shard_size=2,  # several shards, so both workers encode some
            progress=False,
            executor=executor,
            # Ray's actors run torch; locally auto would encode on ONNX Runtime, equal to
            # ~1e-7 but not byte for byte, and this test compares the files' bytes
            runtime="torch",
        )
    local, on_ray = _tree(tmp_path / "local"), _tree(tmp_path / "ray")
    assert len([f for f in local if f.startswith("dense/vectors/vectors-")]) > 2
    assert on_ray == local
    q = "Who created Python?"
    assert built["ray"].search(q, k=3) == built["local"].search(q, k=3)


def test_a_phrase_dump_on_ray_is_the_local_one(squad: Path, tmp_path: Path) -> None:
    tiny = make_tiny_model(tmp_path / "tiny-bert")
    torch.manual_seed(0)
    model = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)
    store = Index.build(f"squad:{squad}", kind="bm25", out=tmp_path / "bm25", progress=False)
    corpus: CorpusStore = store.corpus
    stats = {}
    for name, executor in (("local", None), ("ray", _ray())):
        stats[name] = dump_phrases(
            corpus,
            model,
            tmp_path / name / "work",
            tmp_path / name / "out",
            shard_size=2,
            progress=False,
            executor=executor,
        )
    assert stats["ray"] == stats["local"] and stats["local"].n_kept > 0
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")


@dataclass
class MarkedEncoder:
    """Row ``r`` becomes ``[r, r * r]``; every encode leaves a marker file (workers are
    other processes, so what they did is read from disk).  With ``fail_once``, shard 1's
    first attempt fails after writing its array."""

    marks: Path
    fail_once: bool = False

    def files(self, job: ShardJob) -> tuple[str, ...]:
        return (f"part-{job.index:05d}.npy",)

    def encode(self, job: ShardJob, into: Path) -> dict[str, Any]:
        rows = np.arange(job.start, job.end, dtype=np.int64)
        np.save(into / self.files(job)[0], np.stack([rows, rows * rows], axis=1))
        n = len(list(self.marks.glob(f"{job.index}.*")))
        (self.marks / f"{job.index}.{n}").touch()
        if self.fail_once and job.index == 1 and n == 0:
            raise RuntimeError("power cut")
        return {}

    def attempts(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for p in self.marks.iterdir():
            i = int(p.name.split(".")[0])
            found[i] = found.get(i, 0) + 1
        return found


def _engine(out: Path, marks: Path, executor: Any, **kw: Any) -> ShardedEncode:
    marks.mkdir(exist_ok=True)
    enc = MarkedEncoder(marks, **kw)
    return ShardedEncode(out, N, enc, _spec(ShardListManifest()), executor=executor)


def test_a_rerun_on_ray_skips_finished_shards(tmp_path: Path) -> None:
    _engine(tmp_path / "ref", tmp_path / "m0", None).run()
    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):  # the engine stops once shard 0 is recorded
        _engine(out, tmp_path / "m1", _ray(workers=1)).run(_stop_at(0))
    again = _engine(out, tmp_path / "m2", _ray())
    assert again.run().resumed == 1
    assert MarkedEncoder(tmp_path / "m2").attempts() == {1: 1, 2: 1}
    assert _snapshot(out) == _snapshot(tmp_path / "ref")


def test_a_failed_shard_is_retried(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "o", tmp_path / "m", _ray(retries=1), fail_once=True)
    assert engine.run().resumed == 0
    assert MarkedEncoder(tmp_path / "m").attempts() == {0: 1, 1: 2, 2: 1}
    np.testing.assert_array_equal(_rows(tmp_path / "o")[:, 1], np.arange(N) ** 2)
    # without retries the shard's error stops the run, as it would run locally
    failing = _engine(tmp_path / "f", tmp_path / "mf", _ray(retries=0), fail_once=True)
    with pytest.raises(RuntimeError, match="power cut"):
        failing.run()
    assert not (tmp_path / "f" / "part-00001.npy").exists()
