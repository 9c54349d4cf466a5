"""Which runtime encodes queries at search time: a name only, so that the command line can
offer ``--runtime`` without importing NumPy or ONNX Runtime (``anygrain --help`` stays fast)."""

from __future__ import annotations

import enum


class Runtime(str, enum.Enum):
    """What runs the query encoders at search time (never recorded in an index)."""

    AUTO = "auto"
    ONNX = "onnx"
    TORCH = "torch"


RUNTIME_HELP = (
    "Query encoder runtime: auto (ONNX Runtime on a CPU where onnxruntime is installed, the "
    "graph exported once and cached; else torch), onnx, or torch"
)
