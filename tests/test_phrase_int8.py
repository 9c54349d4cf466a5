"""int8 phrase passages on ONNX Runtime (issue 49): the passage graph's int8 sibling in the
graph cache (made once, checksummed, only the encoder layers' weight matmuls quantized);
``int8`` asked, refused, or resolved (auto) beside ``bf16``; a build on it recording it and
writing vectors close to float32's; an add recording its own precision."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.encode.onnx_runtime import GRAPH_FILE, META_FILE, GraphCache
from anygrain.encode.quantize import quantize_entry, quantize_graph, weight_matmuls
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.index.settings import BuildOptions
from anygrain.phrase import PhraseEncoder
from anygrain.phrase.dump import _identity, resolve_int8
from anygrain.phrase.onnx import export_passages
from anygrain.utils import precision

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("torch_one_thread", "cache_root")

HEADS = ("/start_head/MatMul", "/end_head/MatMul", "/filter/MatMul")
# every token kept, whatever its filter logit: the two builds keep the same tokens
ALL_TOKENS = {"threshold": -1000.0, "compress": "none", "keep_dump": True}


def _settings(out: Path) -> dict[str, object]:
    return json.loads((out / "index.json").read_text())["settings"]


@pytest.fixture(scope="module")
def float_graph(model_dir: Path, cache_root: Path) -> Path:
    return export_passages(PhraseEncoder.load(model_dir), GraphCache(cache_root))


def test_the_int8_entry_is_made_once_and_quantizes_the_layers_weight_matmuls(
    float_graph: Path, cache_root: Path
) -> None:
    cache = GraphCache(cache_root)
    q = quantize_entry(cache, float_graph)
    meta = json.loads((q / META_FILE).read_text())
    float_key = json.loads((float_graph / META_FILE).read_text())["key"]
    assert q.name == meta["key"] == f"{float_key}-int8"
    assert meta["precision"] == "int8" and meta["float_key"] == float_key
    # every file of the float entry but the graph linked as it is (not a copy of its bytes)
    for f in float_graph.iterdir():
        if f.name not in (GRAPH_FILE, META_FILE, "checksums.json", "verified.json"):
            assert (q / f.name).read_bytes() == f.read_bytes(), f.name
            assert (q / f.name).stat().st_ino == f.stat().st_ino, f.name
    stamp = (q / GRAPH_FILE).stat().st_mtime_ns
    assert quantize_entry(cache, float_graph) == q
    assert (q / GRAPH_FILE).stat().st_mtime_ns == stamp  # cached: not quantized again

    f = onnx.load(str(float_graph / GRAPH_FILE)).graph
    g = onnx.load(str(q / GRAPH_FILE)).graph
    weights = {t.name for t in f.initializer}
    float_weights = [
        n.name
        for n in f.node
        if n.op_type == "MatMul" and "/encoder/layer." in n.name and n.input[1] in weights
    ]
    assert (
        float_weights and weight_matmuls(onnx.load(str(float_graph / GRAPH_FILE))) == float_weights
    )
    ops = [n.op_type for n in g.node]
    assert ops.count("MatMulInteger") == len(float_weights)
    assert ops.count("DynamicQuantizeLinear") >= 1
    left = {n.name for n in g.node if n.op_type == "MatMul"}
    # the heads and the attention's activation matmuls stay float
    assert set(HEADS) <= left
    assert any(n.endswith("/attention/self/MatMul") for n in left)
    assert len(left) == sum(n.op_type == "MatMul" for n in f.node) - len(float_weights)


def test_a_damaged_int8_graph_is_made_again(
    float_graph: Path, cache_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = GraphCache(cache_root)
    q = quantize_entry(cache, float_graph)
    good = (q / GRAPH_FILE).read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0xFF
    (q / GRAPH_FILE).write_bytes(bytes(damaged))
    with caplog.at_level(logging.WARNING):
        again = quantize_entry(cache, float_graph)
    assert (again / GRAPH_FILE).read_bytes() == good
    said = [r.getMessage() for r in caplog.records if GRAPH_FILE in r.getMessage()]
    assert len(said) == 1 and "made again" in said[0]


def test_a_graph_that_cannot_be_quantized_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / GRAPH_FILE
    bad.write_bytes(b"not an onnx graph")
    with pytest.raises(AnygrainError, match="cannot quantize") as e:
        quantize_graph(bad, tmp_path / "out.onnx")
    assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_int8_dot_reads_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    for flags, want in (
        ({"avx2", "avx512_vnni"}, True),
        ({"avx2", "avx_vnni"}, True),
        ({"fp", "asimd", "asimddp"}, True),
        ({"avx2", "avx512f"}, False),
        (None, False),
    ):
        monkeypatch.setattr(precision, "_cpu_flags", lambda flags=flags: flags)
        precision.int8_dot.cache_clear()
        assert precision.int8_dot() is want, flags
    precision.int8_dot.cache_clear()


def test_auto_and_the_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "int8_dot", lambda: True)
    assert resolve_int8(None, False, BuildOptions(device="cpu", runtime="onnx")) is False  # off
    monkeypatch.setattr(precision, "AUTO_INT8", True)
    cpu, onnx_rt = BuildOptions(device="cpu"), BuildOptions(device="cpu", runtime="onnx")
    assert resolve_int8(None, False, onnx_rt) is True
    assert resolve_int8(None, False, cpu) is True  # auto's torch float32 becomes int8
    assert resolve_int8(None, True, cpu) is False  # bf16 resolved: left as it is
    assert resolve_int8(None, False, BuildOptions(device="cpu", runtime="torch")) is False
    assert resolve_int8(None, False, BuildOptions(device="cpu", executor="ray")) is False
    assert resolve_int8(False, False, onnx_rt) is False
    monkeypatch.setattr(precision, "int8_dot", lambda: False)
    assert resolve_int8(None, False, onnx_rt) is False
    assert resolve_int8(True, False, onnx_rt) is True  # asked: runs without the instructions
    for bf16, options, word in (
        (True, cpu, "--bf16"),
        (False, BuildOptions(runtime="torch"), "torch"),
        (False, BuildOptions(executor="ray"), "--ray"),
        (False, BuildOptions(device="cuda"), "--device cuda"),
    ):
        with pytest.raises(AnygrainError, match=word):
            resolve_int8(True, bf16, options)


def test_an_int8_dump_never_resumes_a_float32_one() -> None:
    class Store:
        checksum = "c"

        def __len__(self) -> int:
            return 3

    model = SimpleNamespace(config=SimpleNamespace(phrase_fingerprint="f"), dim=4)
    f32 = _identity(Store(), model, None, 10, False)  # type: ignore[arg-type]
    i8 = _identity(Store(), model, None, 10, False, True)  # type: ignore[arg-type]
    assert f32 != i8 and "int8" not in f32  # a float32 dump from before still resumes


def _starts(out: Path) -> tuple[np.ndarray, np.ndarray]:
    base = out / "phrase"
    return np.load(base / "tokens.npy"), np.load(base / "start.npy").astype(np.float32)


def test_an_int8_build_records_it_and_writes_vectors_close_to_float32s(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    built = {}
    for int8 in (False, True):
        out = tmp_path / f"int8-{int8}"
        idx = Index.build(
            f"squad:{squad}",
            kind="phrase",
            out=out,
            model=str(model_dir),
            progress=False,
            device="cpu",
            runtime="onnx",
            int8=int8,
            **ALL_TOKENS,  # type: ignore[arg-type]
        )
        s = _settings(out)
        assert s["int8"] is int8 and s["bf16"] is False
        assert s["build"]["int8"] is int8  # type: ignore[index]
        want = {"precision": "int8" if int8 else "float32", "runtime": "onnx", "device": "cpu"}
        assert idx.summary()["encoding"] == want
        built[int8] = _starts(out)
    (t32, s32), (t8, s8) = built[False], built[True]
    assert np.array_equal(t32, t8) and len(s32) > 10
    cos = (s32 * s8).sum(1) / (np.linalg.norm(s32, axis=1) * np.linalg.norm(s8, axis=1))
    assert cos.mean() > 0.999 and cos.min() > 0.99, (cos.mean(), cos.min())
    assert not np.allclose(s32, s8, atol=1e-4)  # int8 did run


def test_the_command_line_asks_and_refuses(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    base = ["index", f"squad:{squad}", "--kind", "phrase", "--model", str(model_dir)]
    base += ["--compress", "none", "--keep", "1", "--device", "cpu", "-q"]
    out = tmp_path / "asked"
    r = run(app, [*base, "--out", str(out), "--int8"])
    assert r.exit_code == 0, r.output
    assert _settings(out)["int8"] is True
    for refused in (["--bf16"], ["--runtime", "torch"]):
        out = tmp_path / refused[-1]
        r = run(app, [*base, "--out", str(out), "--int8", *refused])
        lines = r.output.strip().splitlines()
        assert r.exit_code != 0 and len(lines) == 1, r.output
        assert "--int8" in lines[0] and refused[-1].lstrip("-") in lines[0], lines
        assert "Traceback" not in r.output and not (out / "index.json").exists()


def test_an_add_records_its_own_precision(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_phrase_helpers import PARAGRAPHS, squad_parts

    first, more, last = squad_parts(tmp_path, 2, 3)
    out = tmp_path / "idx"
    Index.build(
        f"squad:{first}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        progress=False,
        device="cpu",
        int8=True,
        compress="none",
        keep=1.0,
    )
    run = CliRunner().invoke
    r = run(app, ["add", str(out), f"squad:{more}", "--runtime", "torch", "-q"])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    monkeypatch.setattr(precision, "int8_dot", lambda: True)
    monkeypatch.setattr(precision, "AUTO_INT8", True)
    r = run(app, ["add", str(out), f"squad:{last}", "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    s = _settings(out)
    assert s["int8"] is True
    n_more, n_last = len(PARAGRAPHS[2:3]), len(PARAGRAPHS[3:])
    assert s["adds"] == [
        {"passages": n_more, "bf16": False, "int8": False},
        {"passages": n_last, "bf16": False, "int8": True},
    ]


def test_no_int8_is_kept_by_adds(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index asked ``int8=False`` gets float32 adds on a CPU where auto would pick int8."""
    from test_phrase_helpers import squad_parts

    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    monkeypatch.setattr(precision, "int8_dot", lambda: True)
    monkeypatch.setattr(precision, "AUTO_INT8", True)
    first, more = squad_parts(tmp_path, 2)
    out = tmp_path / "idx"
    run = CliRunner().invoke
    args = ["index", f"squad:{first}", "--kind", "phrase", "--out", str(out), "--no-int8"]
    r = run(app, [*args, "--model", str(model_dir), "--compress", "none", "--keep", "1", "-q"])
    assert r.exit_code == 0, r.output
    r = run(app, ["add", str(out), f"squad:{more}", "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    s = _settings(out)
    assert s["int8"] is False and s["adds"][0]["int8"] is False  # type: ignore[index]


def test_an_onnx_build_of_a_shipped_model_loads_no_torch_model(
    squad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that encodes on ONNX Runtime (``--runtime onnx``, ``--int8``) takes a shipped
    model on its passage graph: the torch model is neither imported nor loaded for it."""

    def refuse(cls: type, *args: object, **kw: object) -> None:
        raise AssertionError("the torch phrase model was loaded")

    monkeypatch.setattr(PhraseEncoder, "load", classmethod(refuse))
    for int8 in (False, True):
        out = tmp_path / f"shipped-{int8}"
        Index.build(
            f"squad:{squad}",
            kind="phrase",
            out=out,
            model="phrase-minilm",
            progress=False,
            runtime="onnx",
            int8=int8,
            **ALL_TOKENS,  # type: ignore[arg-type]
        )
        want = {"precision": "int8" if int8 else "float32", "runtime": "onnx", "device": "cpu"}
        assert json.loads((out / "index.json").read_text())["timings"]["encoding"] == want
    with pytest.raises(AssertionError, match="torch phrase model was loaded"):
        Index.build(
            f"squad:{squad}",
            kind="phrase",
            out=tmp_path / "torch",
            model="phrase-minilm",
            progress=False,
            runtime="torch",
            **ALL_TOKENS,  # type: ignore[arg-type]
        )
