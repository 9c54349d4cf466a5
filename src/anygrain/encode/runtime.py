"""Which runtime encodes queries at search time, and what is installed to run them: names and
probes only (no NumPy, no ONNX Runtime, no torch imported), so that the command line offers
``--runtime`` cheaply (``anygrain --help`` stays fast) and deciding a model's runtime
(:mod:`anygrain.models.runtime`) imports nothing heavy."""

from __future__ import annotations

import enum
import importlib.util

from anygrain.errors import AnygrainError, parse_enum


class Runtime(str, enum.Enum):
    """What runs the query encoders at search time (never recorded in an index)."""

    AUTO = "auto"
    ONNX = "onnx"
    TORCH = "torch"


def runs_on_onnx(encoder: object) -> bool:
    """Whether ``encoder`` (a model, a graph of one, a question encoder) runs on ONNX Runtime:
    each says so in its ``runtime`` (:class:`anygrain.models.roles.Runs`; torch models
    inherit ``"torch"`` from the model base); anything else, a model given by name, runs on
    torch once loaded."""
    return getattr(encoder, "runtime", "torch") == Runtime.ONNX.value


RUNTIME_HELP = (
    "Query encoder runtime: auto (ONNX Runtime on a CPU where onnxruntime is installed, the "
    "graph exported once and cached; else torch), onnx, or torch"
)

#: how to get torch and transformers: the base install runs the shipped models without them
TRAIN_EXTRA = "pip install 'anygrain[train]'"


def onnxruntime_installed() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def torch_installed() -> bool:
    """Whether torch and transformers can be imported (not imported here: that takes
    seconds; a finder that refuses them counts as not installed)."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    except (ImportError, ValueError):
        return False


def require_torch(what: str) -> None:
    """An error, in one line saying how to install them, when torch or transformers is
    missing; ``what`` says what needed them."""
    if not torch_installed():
        raise AnygrainError(f"{what} needs torch and transformers, not installed: {TRAIN_EXTRA}")


def parse_runtime(value: Runtime | str | None) -> Runtime:
    """The runtime asked for; ``torch`` where torch is missing is refused here, in one line,
    rather than left to run on the graphs or fail deep inside."""
    r = Runtime.AUTO if value is None else parse_enum(Runtime, value)
    if r is Runtime.TORCH:
        require_torch("--runtime torch")
    return r


def on_cpu(device: str | None) -> bool:
    """Whether ``device`` (None, ``auto`` or ``cpu``) leaves a model on the CPU, where the
    ONNX graphs run."""
    return device is None or str(device) in ("auto", "cpu")


def wants_onnx(runtime: Runtime | str | None, device: str | None) -> bool:
    """Whether queries should be encoded with ONNX Runtime: ``onnx`` always (an error here
    when it cannot), ``auto`` on a CPU (``device`` None, ``auto`` or ``cpu``; the ONNX graph
    runs on the CPU only) where onnxruntime is installed."""
    r = parse_runtime(runtime)
    if r is Runtime.TORCH:
        return False
    if r is Runtime.ONNX:
        if not on_cpu(device):
            raise AnygrainError(
                f"--runtime onnx runs on the CPU; --device {device} needs --runtime torch"
            )
        if not onnxruntime_installed():
            raise AnygrainError(
                "--runtime onnx: onnxruntime is not installed (pip install onnxruntime)"
            )
        return True
    return on_cpu(device) and onnxruntime_installed()
