"""``device`` for DPR training and dense encoding: the CPU path, a refused GPU, and ``.to``.

A tiny random bi-encoder (dense_helpers) trains on four questions written here, so each
test takes about a second.  The GPU tests run only where torch sees one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dense_helpers import tiny_biencoder

import anygrain.train.dpr.trainer as dpr_trainer
from anygrain.errors import AnygrainError
from anygrain.models.biencoder import BiEncoder
from anygrain.train.checkpoint import list_checkpoints
from anygrain.train.dpr import DprTrainConfig, TrainMode
from anygrain.train.dpr.config import CONFIG_FILE
from anygrain.train.dpr.trainer import train_dpr
from anygrain.train.run_dir import LOG_FILE

pytestmark = pytest.mark.usefixtures("torch_one_thread")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")

TEXTS = ["short", "a somewhat longer passage about dense retrieval", "x " * 40, "tiny"]
TITLES = ["T1", "Title two", "Long", "4"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random bi-encoder saved as an anygrain model (a training starting point)."""
    out = tmp_path_factory.mktemp("tiny-biencoder") / "model"
    tiny_biencoder(5, max_length=64).save(out)
    return out


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four DPR-format questions, each with a positive and two hard negatives."""
    rows = []
    for i, (city, export) in enumerate(
        [("Xalor", "copper"), ("Bretan", "wool"), ("Quenby", "salt"), ("Torvik", "timber")]
    ):
        rows.append(
            {
                "question": f"What does {city} export?",
                "answers": [export],
                "positive_ctxs": [
                    {"title": city, "text": f"{city} lives from {export}.", "passage_id": f"p{i}"}
                ],
                "negative_ctxs": [],
                "hard_negative_ctxs": [
                    {"title": "Trade", "text": f"{city} sold glass.", "passage_id": f"hn{i}"},
                    {"title": "Roads", "text": f"{city} has stone roads.", "passage_id": f"hr{i}"},
                ],
            }
        )
    path = tmp_path_factory.mktemp("dpr-data") / "dpr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _config(model_dir: Path, train_file: Path, out: Path, **kw: Any) -> DprTrainConfig:
    base: dict[str, Any] = {
        "train": [str(train_file)],
        "out": str(out),
        "model": str(model_dir),
        "batch_size": 2,
        "lr": 1e-3,
        "epochs": 1,
        "max_query_length": 16,
        "max_passage_length": 32,
        "checkpoint_every": 1,
        "log_every": 1,
    }
    base.update(kw)
    return DprTrainConfig(**base)


def _capture_model(monkeypatch: pytest.MonkeyPatch) -> list[BiEncoder]:
    """The models ``train_dpr`` trains, as it loads them."""
    seen: list[BiEncoder] = []
    load = dpr_trainer.load_model

    def capture(config: DprTrainConfig) -> BiEncoder:
        seen.append(load(config))
        return seen[-1]

    monkeypatch.setattr(dpr_trainer, "load_model", capture)
    return seen


def _start_record(out: Path) -> dict[str, Any]:
    log = [json.loads(ln) for ln in (out / LOG_FILE).read_text().splitlines()]
    return next(r for r in log if r.get("event") == "start")


# --- training -------------------------------------------------------------------------------


def test_config_device_is_bookkeeping(tmp_path: Path) -> None:
    cfg = DprTrainConfig(train=["x.jsonl"], out=str(tmp_path))
    assert cfg.device == "auto"
    assert "device" not in cfg.trajectory()  # a run may resume on another device
    cfg.device = "cpu"
    cfg.save(tmp_path)
    assert DprTrainConfig.load(tmp_path).device == "cpu"
    # a config saved before the field existed reads as auto
    d = json.loads((tmp_path / CONFIG_FILE).read_text())
    del d["device"]
    assert DprTrainConfig.from_dict(d).device == "auto"


@pytest.mark.parametrize("mode", [TrainMode.FULL, TrainMode.QUERY_SIDE])
def test_cpu_trains_on_the_cpu(
    model_dir: Path,
    train_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: TrainMode,
) -> None:
    seen = _capture_model(monkeypatch)
    out = tmp_path / "cpu"
    before = {k: v.clone() for k, v in BiEncoder.load(model_dir).question.state_dict().items()}
    train_dpr(_config(model_dir, train_file, out, device="cpu", mode=mode), progress=False)
    (model,) = seen
    assert model.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert _start_record(out)["device"] == "cpu"
    trained = BiEncoder.load(out)
    after = trained.question.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it did train
    assert np.isfinite(trained.encode_questions(TEXTS)).all()


def test_a_run_resumes_on_another_device_setting(
    model_dir: Path, train_file: Path, tmp_path: Path
) -> None:
    """``device`` is bookkeeping: a checkpoint made with ``cpu`` resumes under ``auto``
    (the CPU here, a GPU where there is one), and its optimizer state follows the model."""
    full = train_dpr(
        _config(model_dir, train_file, tmp_path / "full", device="cpu"), progress=False
    )
    out = tmp_path / "resumed"

    def stop(step: int) -> None:
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_dpr(_config(model_dir, train_file, out, device="cpu"), progress=False, on_step=stop)
    assert [p.name for p in list_checkpoints(out)] == ["step-000000001.pt"]
    train_dpr(_config(model_dir, train_file, out, device="auto"), progress=False)
    a, b = BiEncoder.load(full).state_dict(), BiEncoder.load(out).state_dict()
    assert a.keys() == b.keys()
    if not torch.cuda.is_available():  # same device, same arithmetic: the same weights
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_refused_before_any_work(
    model_dir: Path,
    train_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    device: str,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def no_data(*a: Any, **k: Any) -> None:
        raise AssertionError("training data read before the device was checked")

    monkeypatch.setattr(dpr_trainer, "load_training_data", no_data)
    out = tmp_path / "refused"
    with pytest.raises(AnygrainError, match="torch sees no CUDA GPU"):
        train_dpr(_config(model_dir, train_file, out, device=device), progress=False)
    assert not out.exists()  # not even the run directory


def test_an_unknown_device_is_refused(model_dir: Path, train_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "tpu"
    with pytest.raises(AnygrainError, match="unknown device 'tpu'"):
        train_dpr(_config(model_dir, train_file, out, device="tpu"), progress=False)
    assert not out.exists()


# --- encoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False])
def test_biencoder_encodes_the_same_after_to_cpu(shared: bool) -> None:
    m = tiny_biencoder(3, shared=shared)
    assert m.device == torch.device("cpu")
    q0, p0 = m.encode_questions(TEXTS), m.encode_passages(TEXTS, TITLES, batch_size=3)
    assert m.to("cpu") is m
    assert m.device == m.question.device == m.passage.device == torch.device("cpu")
    q1, p1 = m.encode_questions(TEXTS), m.encode_passages(TEXTS, TITLES, batch_size=3)
    assert q1.dtype == p1.dtype == np.float32
    np.testing.assert_array_equal(q0, q1)
    np.testing.assert_array_equal(p0, p1)


@needs_cuda
@pytest.mark.parametrize("bf16", [False, True])
def test_biencoder_encodes_on_a_gpu(bf16: bool) -> None:
    m = tiny_biencoder(3)
    q0, p0 = m.encode_questions(TEXTS), m.encode_passages(TEXTS, TITLES)
    m.to("cuda")
    assert m.device.type == "cuda" and m.passage.device.type == "cuda"
    q1, p1 = m.encode_questions(TEXTS, bf16=bf16), m.encode_passages(TEXTS, TITLES, bf16=bf16)
    assert isinstance(q1, np.ndarray) and q1.dtype == p1.dtype == np.float32
    tol = 3e-2 if bf16 else 1e-4
    np.testing.assert_allclose(q1, q0, atol=tol)
    np.testing.assert_allclose(p1, p0, atol=tol)


@needs_cuda
@pytest.mark.parametrize(
    "kw",
    [
        {"mode": TrainMode.FULL},
        {"mode": TrainMode.FULL, "grad_cache": True, "grad_cache_chunk": 2, "bf16": True},
        {"mode": TrainMode.QUERY_SIDE},
    ],
)
def test_training_on_a_gpu_resumes_on_the_cpu(
    model_dir: Path,
    train_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kw: dict[str, Any],
) -> None:
    seen = _capture_model(monkeypatch)
    out = tmp_path / "gpu"

    def stop(step: int) -> None:
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_dpr(
            _config(model_dir, train_file, out, device="cuda", **kw), progress=False, on_step=stop
        )
    assert all(p.device.type == "cuda" for p in seen[0].parameters())
    assert _start_record(out)["device"].startswith("cuda")
    ckpt = torch.load(list_checkpoints(out)[-1], map_location="cpu", weights_only=True)
    assert "cuda_rng" in ckpt
    train_dpr(_config(model_dir, train_file, out, device="cpu", **kw), progress=False)
    assert all(p.device.type == "cpu" for p in seen[1].parameters())
    assert np.isfinite(BiEncoder.load(out).encode_questions(TEXTS)).all()
