"""An exported graph's int8 sibling in the graph cache: ONNX Runtime dynamic quantization.

Where the CPU has int8 dot-product instructions (VNNI, Arm's dot product:
:func:`anygrain.utils.precision.int8_dot`), a transformer's weight matmuls run much faster
on int8 weights and activations quantized per batch than in float32.  Quantizing every
matmul costs accuracy, so :func:`quantize_entry` quantizes only the matmuls whose second
input is a weight initializer inside the encoder's layers (node names holding
:data:`LAYER_MARK`: the attention's query/key/value and output projections and the
feed-forward ones), per output channel, to signed int8; the attention's own
activation-by-activation matmuls (``.../self/MatMul``) and every head outside the layers
(start, end, filter) stay float32.

The int8 graph is an entry of its own (key ``f"{key}-int8"``) beside the float one, made
once from it through :meth:`GraphCache.write` (atomically, checksummed, made again when
damaged): every file of the float entry linked (or copied) but ``graph.onnx`` (quantized) and its
checksums, and ``meta.json`` with ``"precision": "int8"`` and ``"float_key"``.  Torch-free:
onnx and onnxruntime only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anygrain.encode.cache_checks import NOT_RECORDED
from anygrain.encode.onnx_runtime import GRAPH_FILE, META_FILE, GraphCache
from anygrain.errors import AnygrainError

#: what names a node inside a Hugging Face encoder's transformer layers, as torch exports it
LAYER_MARK = "/encoder/layer."
INT8_SUFFIX = "-int8"


def int8_key(key: str) -> str:
    """The cache key of the int8 sibling of the graph ``key``."""
    return f"{key}{INT8_SUFFIX}"


def weight_matmuls(model: Any) -> list[str]:
    """The names of ``model``'s (an ``onnx.ModelProto``) MatMul nodes inside the encoder
    layers whose second input is a weight initializer: what :func:`quantize_entry` quantizes."""
    weights = {t.name for t in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul" and LAYER_MARK in n.name and n.input[1] in weights
    ]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # the quantizer logs advice (pre-processing) on the root logger: not the user's concern
    was = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(was)


def quantize_graph(source: Path, target: Path) -> int:
    """Write ``source`` (a float32 ONNX graph) to ``target`` with its encoder layers' weight
    matmuls quantized to int8 (dynamic, per channel); returns how many.  A graph that cannot
    be quantized is one AnygrainError line naming it."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        model = onnx.load(str(source))
        nodes = weight_matmuls(model)
        if not nodes:
            raise ValueError(f"no weight MatMul under {LAYER_MARK!r} to quantize")
        with _quiet():
            quantize_dynamic(
                model,
                target,
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=nodes,
            )
    except Exception as e:  # the quantizer's and protobuf's own types, whatever they are
        raise AnygrainError(
            f"{source}: cannot quantize this graph to int8 ({type(e).__name__}: {e})"
        ) from None
    return len(nodes)


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (the float entry's token table is tens of MB,
    and neither entry's files are written in place again: a damaged entry is made anew),
    else a copy where the file system has no hard links."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def quantize_entry(cache: GraphCache, directory: Path) -> Path:
    """The directory of the int8 sibling of the float graph entry ``directory`` (in
    ``cache``), made from it unless already cached intact."""
    src = Path(directory)
    meta = json.loads((src / META_FILE).read_text(encoding="utf-8"))
    key = str(meta.get("key") or src.name)

    def fill(d: Path) -> None:
        for f in sorted(src.iterdir()):
            if f.is_file() and f.name not in (GRAPH_FILE, META_FILE, *NOT_RECORDED):
                _link_or_copy(f, d / f.name)
        quantize_graph(src / GRAPH_FILE, d / GRAPH_FILE)
        out = {**meta, "key": int8_key(key), "precision": "int8", "float_key": key}
        (d / META_FILE).write_text(json.dumps(out, indent=2), encoding="utf-8")

    return cache.write(int8_key(key), fill)
