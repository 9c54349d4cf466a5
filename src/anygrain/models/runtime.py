"""Which runtime a model runs on, decided once when it is opened: torch or ONNX Runtime, in
bfloat16 or float32.

:func:`choose_runtime` is the one place that turns ``--runtime auto|onnx|torch`` and
``--device`` into a :class:`RuntimeChoice` for a model's role (:class:`Role`): question
encoders run on ONNX Runtime on a CPU where it is installed; a reader too, except on a CPU
with native bfloat16, where torch reads faster; passages of a build or ``add`` on ONNX
Runtime unless only torch can (bfloat16 vectors, remote executors, a GPU).  The choice is
kept on what is opened (:class:`RuntimeChoice` is what an encoder's ``runtime`` says).

Nothing here imports torch: whether the CPU has native bfloat16 is read from the CPU's
flags as oneDNN reads them (:func:`anygrain.utils.precision.native_bf16`), so that a search on a CPU without it
takes ONNX Runtime without paying for torch's import to learn that it should.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

from anygrain.encode.runtime import (
    Runtime,
    parse_runtime,
    wants_onnx,
)
from anygrain.errors import AnygrainError

__all__ = ["Role", "RuntimeChoice", "choose_runtime", "reader_bf16"]


class Role(str, enum.Enum):
    """What a model does once opened, which decides what ``auto`` runs it on."""

    QUESTIONS = "questions"  # a query encoder: ONNX Runtime on a CPU
    READER = "reader"  # torch in bfloat16 on a CPU with native bfloat16, else ONNX Runtime
    PASSAGES = "passages"  # a build's or add's passages: ONNX Runtime unless only torch can


@dataclass(frozen=True)
class RuntimeChoice:
    """What a model runs on, decided once (:func:`choose_runtime`) and kept with it.

    ``runtime``: ONNX or TORCH, never AUTO; ``bf16``: torch computes in bfloat16 (always
    False on ONNX Runtime, whose graphs run in float32); ``strict``: ONNX Runtime was asked
    for by name, so a graph that cannot be made is an error rather than torch instead."""

    runtime: Runtime
    bf16: bool = False
    strict: bool = False

    @property
    def onnx(self) -> bool:
        return self.runtime is Runtime.ONNX

    def on_torch(self) -> RuntimeChoice:
        """The fallback when the graph cannot be made: torch, in bfloat16 where that is
        native (as a reader on torch reads)."""
        return RuntimeChoice(Runtime.TORCH, self.bf16)


def choose_runtime(
    runtime: Runtime | str | None,
    device: str | None = None,
    *,
    role: Role = Role.QUESTIONS,
    bf16: bool | None = None,
    executor: object = None,
) -> RuntimeChoice:
    """What a model of ``role`` runs on for ``runtime`` (None: auto) and ``device``.

    ``onnx`` always (an error here when it cannot: a GPU, onnxruntime missing, bfloat16 or
    a remote executor for passages); ``torch`` always; ``auto``: ONNX Runtime on a CPU where
    it is installed, except a reader on a CPU with native bfloat16 (torch reads faster
    there) and passages that only torch can encode.  ``bf16``: asked for (passages: the
    build's setting); None lets the role decide (a reader on torch: native bfloat16)."""
    r = parse_runtime(runtime)
    if role is Role.PASSAGES:
        from anygrain.encode.executor import is_remote

        remote = is_remote(executor)
        if bf16 or remote:
            if r is Runtime.ONNX:
                why = "bf16 (bfloat16 vectors)" if bf16 else f"the {executor} executor"
                raise AnygrainError(f"--runtime onnx: {why} encodes passages with torch only")
            return RuntimeChoice(Runtime.TORCH, bool(bf16))
    torch_bf16 = reader_bf16(bf16) if role is Role.READER else bool(bf16)
    if not wants_onnx(r, device):  # torch asked for, or a GPU, or no onnxruntime
        return RuntimeChoice(Runtime.TORCH, torch_bf16)
    if r is Runtime.ONNX:
        return RuntimeChoice(Runtime.ONNX, strict=True)
    if role is Role.READER and torch_bf16:
        return RuntimeChoice(Runtime.TORCH, True)
    if role is Role.PASSAGES and device in (None, "auto") and "torch" in sys.modules:
        import torch  # a build has it loaded already; a torch-free add never imports it

        if torch.cuda.is_available():  # device auto takes the GPU: torch runs there
            return RuntimeChoice(Runtime.TORCH, bool(bf16))
    return RuntimeChoice(Runtime.ONNX)


def reader_bf16(bf16: bool | None = None) -> bool:
    """Whether a reader on torch reads in bfloat16: ``bf16`` when given, else (auto) where
    the CPU has native bfloat16 (elsewhere it is emulated, slower than float32)."""
    if bf16 is not None:
        return bool(bf16)
    from anygrain.utils import precision  # looked up here: tests patch its answer

    return precision.native_bf16()
