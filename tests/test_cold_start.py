"""Cold start: the runtime is decided once, without torch; one routine finds or exports every
model's graph; a command imports its own module only.

- ``native_bf16`` answers as torch's oneDNN does (the CPU's flags, the ISA cap oneDNN reads)
  without importing torch, so on a CPU without native bfloat16 an answer search in an
  install with torch reads on ONNX Runtime and never imports it;
- ``choose_runtime`` is the one decision for questions, readers and passages;
- ``graph_or_export`` opens a graph its files recorded without loading the model, else
  loads, exports and records it, and a failed export is one line (``onnx``) or a warning;
- ``anygrain search`` imports no other command's module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anygrain.encode.onnx_runtime import GraphCache, files_signature
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError
from anygrain.models.graphs import Exported, GraphSource, graph_or_export
from anygrain.models.runtime import Role, RuntimeChoice, choose_runtime

HEAVY = ("torch", "transformers")


def _python(code: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@pytest.mark.parametrize("isa", ["", "AVX2", "AVX512_CORE", "SSE41"])
def test_native_bf16_answers_as_torch_without_importing_it(isa: str) -> None:
    pytest.importorskip("torch")
    code = (
        "import sys, json\n"
        "from anygrain.utils.precision import native_bf16\n"
        "ours = native_bf16()\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'})\n"
        "import torch\n"
        "theirs = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())\n"
        "print(json.dumps([ours, theirs, heavy]))\n"
    )
    ours, theirs, heavy = json.loads(_python(code, {"ONEDNN_MAX_CPU_ISA": isa}))
    assert heavy == [] and ours == theirs


@pytest.mark.parametrize(
    ("native", "runtime", "want"),
    [
        (True, None, RuntimeChoice(Runtime.TORCH, bf16=True)),
        (False, None, RuntimeChoice(Runtime.ONNX)),
        (True, "onnx", RuntimeChoice(Runtime.ONNX, strict=True)),
        (False, "torch", RuntimeChoice(Runtime.TORCH)),
    ],
)
def test_a_reader_runs_where_it_reads_fastest(
    monkeypatch: pytest.MonkeyPatch, native: bool, runtime: str | None, want: RuntimeChoice
) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: native)
    assert choose_runtime(runtime, None, role=Role.READER) == want


@pytest.mark.parametrize(
    ("native", "runtime", "bf16", "want"),
    [
        (True, None, None, "torch"),  # the reader reads on torch: so do the questions
        (True, "auto", False, "auto"),  # --fp32: the reader on ONNX Runtime, questions too
        (False, None, None, None),
        (True, "onnx", None, "onnx"),
        (False, "torch", None, "torch"),
    ],
)
def test_an_evaluation_encodes_questions_where_the_reader_reads(
    monkeypatch: pytest.MonkeyPatch,
    native: bool,
    runtime: str | None,
    bf16: bool | None,
    want: str | None,
) -> None:
    pytest.importorskip("onnxruntime")
    from anygrain.api import _reading_runtime

    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: native)
    assert _reading_runtime(runtime, bf16) == want


def test_questions_and_passages_decide_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr("anygrain.utils.precision.native_bf16", lambda: True)
    assert choose_runtime(None, "cpu") == RuntimeChoice(Runtime.ONNX)  # questions: never bf16
    assert choose_runtime(None, "cuda").runtime is Runtime.TORCH
    with pytest.raises(AnygrainError, match="runs on the CPU"):
        choose_runtime("onnx", "cuda")
    assert choose_runtime(None, None, role=Role.PASSAGES, bf16=True) == RuntimeChoice(
        Runtime.TORCH, bf16=True
    )
    with pytest.raises(AnygrainError, match="encodes passages with torch only"):
        choose_runtime("onnx", None, role=Role.PASSAGES, bf16=True)


def _entry(cache: GraphCache, key: str) -> None:
    def fill(d: Path) -> None:
        (d / "graph.onnx").write_bytes(b"not read by this test")
        (d / "meta.json").write_text("{}")

    cache.write(key, fill)


def test_one_routine_finds_or_exports_a_graph(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "weights.bin").write_bytes(b"w")
    cache = GraphCache(tmp_path / "cache")
    source = GraphSource([model_dir], "test-kind")
    loads: list[int] = []

    def load() -> str:
        loads.append(1)
        return "model"

    def export(model: str) -> Exported[str]:
        _entry(cache, "test-kind-key")
        return Exported("test-kind-key", f"graph of {model}", {"fingerprint": "f1"})

    def use(record: dict[str, Any]) -> str | None:
        return f"cached {record['key']}" if record.get("fingerprint") == "f1" else None

    kw: dict[str, Any] = {"strict": False, "refused": "x: no; y", "warned": "x; y"}
    first = graph_or_export(source, cache, use=use, load=load, export=export, **kw)
    assert (first.runner, first.model, loads) == ("graph of model", "model", [1])
    again = graph_or_export(source, cache, use=use, load=load, export=export, **kw)
    assert (again.runner, again.model, loads) == ("cached test-kind-key", None, [1])
    assert cache.files_record(files_signature([model_dir])) == {
        "key": "test-kind-key",
        "fingerprint": "f1",
    }

    # a record the caller does not accept (another fingerprint): the model is loaded
    def refuse(record: dict[str, Any]) -> None:
        return None

    other = graph_or_export(source, cache, use=refuse, load=load, export=export, **kw)
    assert other.model == "model" and loads == [1, 1]


def test_a_failed_export_is_one_line_or_a_warning(tmp_path: Path) -> None:
    cache = GraphCache(tmp_path / "cache")

    def export(model: str) -> Exported[str]:
        raise RuntimeError("the exporter broke")

    kw: dict[str, Any] = {
        "use": lambda record: None,
        "load": lambda: "model",
        "export": export,
        "refused": "m: cannot run the reader on ONNX Runtime; read with --runtime torch",
        "warned": "reader not exported to ONNX; reading with torch",
    }
    with pytest.raises(AnygrainError) as e:
        graph_or_export(None, cache, strict=True, **kw)
    assert str(e.value) == (
        "m: cannot run the reader on ONNX Runtime (RuntimeError: the exporter broke); "
        "read with --runtime torch"
    )
    with pytest.warns(UserWarning, match=r"reader not exported to ONNX \(RuntimeError"):
        opened = graph_or_export(None, cache, strict=False, **kw)
    assert (opened.runner, opened.model) == (None, "model")


# --- the command line -------------------------------------------------------------------

RUN_CLI = """
import json, runpy, sys
sys.argv = ["anygrain", *sys.argv[1:]]
try:
    runpy.run_module("anygrain.cli", run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
mods = sorted(m for m in sys.modules if m.startswith("anygrain.cli."))
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers"})
print("\\nMODULES=" + json.dumps({"cli": mods, "heavy": heavy, "code": code}), file=sys.stderr)
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, "-c", RUN_CLI, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})},
        timeout=600,
    )
    report = json.loads(r.stderr.rpartition("MODULES=")[2])
    assert report["code"] in (0, None), r.stdout + r.stderr
    return r.stdout, report


def test_a_command_imports_its_module_only() -> None:
    out, report = _cli("search", "--help")
    assert "Usage: anygrain search" in out
    assert "anygrain.cli.search" in report["cli"]
    assert not {"anygrain.cli.index", "anygrain.cli.train", "anygrain.cli.serve"} & set(
        report["cli"]
    )
    out, _ = _cli("--help")  # the app's help lists every command
    assert "search" in out and "train" in out and "eval-reader" in out


CORPUS = """Python was created by Guido van Rossum and first released in 1991. Python uses \
indentation to delimit blocks.

The Great Wall of China was built over many centuries to protect against raids.
"""


@pytest.fixture(scope="module")
def phrase_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A phrase index over a small corpus with the shipped phrase-minilm (its sparse part
    too, as by default)."""
    pytest.importorskip("onnxruntime")
    d = tmp_path_factory.mktemp("cold-start")
    (d / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    _cli("index", str(d / "corpus.txt"), "--kind", "phrase", "--out", str(d / "idx"), "-q")
    return d / "idx"


def test_an_answer_search_without_native_bf16_imports_no_torch(
    phrase_index: Path, tmp_path: Path
) -> None:
    """torch installed, but oneDNN capped below AVX-512 (as on a CPU without native
    bfloat16): the phrase index and the reader open on ONNX Runtime and torch is never
    imported, not even to ask the CPU."""
    pytest.importorskip("torch")
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out, report = _cli(
        "search", str(phrase_index), "Who created Python?", "--unit", "answer", env=env
    )
    assert "Guido van Rossum" in out
    assert report["heavy"] == []
