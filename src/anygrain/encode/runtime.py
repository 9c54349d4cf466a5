"""Which runtime encodes queries at search time: a name only, so that the command line can
offer ``--runtime`` without importing NumPy or ONNX Runtime (``anygrain --help`` stays fast)."""

from __future__ import annotations

import enum


class Runtime(str, enum.Enum):
    """What runs the query encoders at search time (never recorded in an index)."""

    AUTO = "auto"
    ONNX = "onnx"
    TORCH = "torch"


def runs_on_onnx(encoder: object) -> bool:
    """Whether ``encoder`` (a model, a graph of one, a question encoder) runs on ONNX Runtime:
    the graph-backed ones say so in their ``runtime`` attribute, torch models have none."""
    return getattr(encoder, "runtime", "torch") == Runtime.ONNX.value


RUNTIME_HELP = (
    "Query encoder runtime: auto (ONNX Runtime on a CPU where onnxruntime is installed, the "
    "graph exported once and cached; else torch), onnx, or torch"
)
