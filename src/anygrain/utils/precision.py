"""bfloat16 autocast on the CPU, and whether this CPU makes it worth having.

bf16 autocast speeds CPUs with native bfloat16 (AVX-512 BF16, AMX), but on CPUs without
it (AVX2-only parts, many AMD EPYC and older Intel) every matmul is emulated, many times
*slower*.  So every bf16
switch in anygrain goes through :func:`cpu_autocast`, which warns once when bf16 is
asked for on such a CPU.  It does not quietly switch to float32: the saved configs say
what ran, and resuming compares them.

For inference on a CPU with native bfloat16, :func:`bf16_linears` gives a module's copy whose linear layers
hold bfloat16 weights: autocast casts every weight again on every call, which at the small
batches of a search server costs most of what bf16 saves.

:func:`int8_dot` says whether the CPU has int8 dot-product instructions, where a phrase
build's passages run faster on ONNX Runtime's int8 graph (:mod:`anygrain.encode.quantize`);
:func:`auto_int8` whether auto picks it.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import platform
import warnings
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

# torch is imported where used: the server and the reader ask native_bf16() whether to read
# in bfloat16, and a base install (no torch: ONNX Runtime reads) must answer without it
if TYPE_CHECKING:
    from torch import nn


class SlowBf16Warning(UserWarning):
    """bf16 autocast requested on a CPU without native bfloat16."""


# oneDNN's cap on the instruction sets it uses (the second name is its former one); a cap
# below AVX-512 leaves it no bfloat16 kernels, and torch then answers no as well
_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# the x86 flags torch asks of the CPU before it says oneDNN has bfloat16 kernels
_X86_BF16_FLAGS = frozenset({"avx512bw", "avx512vl", "avx512dq"})
_CPUINFO = Path("/proc/cpuinfo")


def _isa_capped_below_avx512() -> bool:
    # oneDNN reads this variable itself; reading it here answers what oneDNN will do
    for name in _ISA_VARIABLES:
        value = os.environ.get(name, "").strip().upper()
        if value:
            return value.startswith(("SSE", "AVX")) and not value.startswith(("AVX512", "AVX10"))
    return False


def _cpu_flags() -> set[str] | None:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from /proc/cpuinfo; None
    where there is no such file (not Linux) or it cannot be read."""
    try:
        text = _CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether torch's oneDNN has native bfloat16 kernels on this CPU (False without torch),
    answered as torch answers it (AVX-512 BW/VL/DQ on x86 within oneDNN's instruction-set
    cap, BF16 on Arm) but from the CPU's flags, without importing torch; where the flags
    cannot be read, torch is asked."""
    try:
        if importlib.util.find_spec("torch") is None:
            return False
    except (ImportError, ValueError):  # a finder that refuses torch: not installed
        return False
    flags = _cpu_flags()
    machine = platform.machine().lower()
    if flags is not None and machine in ("x86_64", "amd64", "i686", "i386"):
        return flags >= _X86_BF16_FLAGS and not _isa_capped_below_avx512()
    if flags is not None and machine in ("aarch64", "arm64"):
        return "bf16" in flags
    return _torch_native_bf16()


#: the CPU flags of int8 dot-product instructions ONNX Runtime's int8 matmuls use: x86
#: AVX-512 VNNI or AVX-VNNI, Arm's dot product
_INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "asimddp"})


#: whether a phrase build's auto picks int8 passages where the CPU has int8 dot products: off
#: while the int8 index loses more open EM than the bar for it (docs/benchmarks.md); --int8 asks
AUTO_INT8 = False


def auto_int8() -> bool:
    """Whether auto encodes a build's float32 passages in int8 here (:data:`AUTO_INT8` and
    :func:`int8_dot`)."""
    return AUTO_INT8 and int8_dot()


@functools.lru_cache(maxsize=1)
def int8_dot() -> bool:
    """Whether this CPU has int8 dot-product instructions (:data:`_INT8_DOT_FLAGS`), where
    int8 matmuls run much faster than float32 ones; False where its flags cannot be read."""
    flags = _cpu_flags()
    return flags is not None and not flags.isdisjoint(_INT8_DOT_FLAGS)


def _torch_native_bf16() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


#: the environment variable oneDNN reads its primitive cache's capacity from
ONEDNN_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
#: primitives a passage dump's oneDNN keeps (its default is 1,024)
DUMP_ONEDNN_CACHE = 8


def cap_onednn_cache(capacity: int = DUMP_ONEDNN_CACHE) -> None:
    """Cap oneDNN's primitive cache at ``capacity`` unless the environment sets it already.

    bf16 autocast runs each matmul as a oneDNN primitive made for its shape, and a dump's
    batches come in ever new shapes (windows sorted by length), so the cache only grows:
    at oneDNN's default capacity a phrase build peaks far higher than capped, and encoding
    is as fast capped (bench/onednn_cache.py, docs/onednn_cache.json).  oneDNN
    reads the variable when its cache is first used (not at import), so this runs before a
    dump's first encode; not when anygrain is imported: a process that repeats a few shapes
    (a server's bf16 reader) makes its primitives again, capped."""
    os.environ.setdefault(ONEDNN_CACHE_VARIABLE, str(capacity))


_warned = False


def bf16_note() -> str | None:
    """A sentence for the user when bf16 would be slow here, else None."""
    if native_bf16():
        return None
    import torch

    cap = torch.backends.cpu.get_cpu_capability()
    return (
        f"--bf16: this CPU ({cap}) has no native bfloat16, so bf16 autocast is emulated and "
        "typically several times slower than float32; drop --bf16 on this machine"
    )


def cpu_autocast(bf16: bool) -> AbstractContextManager[object]:
    """``torch.autocast("cpu", bfloat16)`` when ``bf16``; warns once if it will be slow."""
    global _warned
    if bf16 and not _warned:
        note = bf16_note()
        if note:
            warnings.warn(note, SlowBf16Warning, stacklevel=2)
        _warned = True
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


@functools.lru_cache(maxsize=1)
def _bf16_linear_class() -> Any:
    """:class:`Bf16Linear`, defined at first use (it subclasses torch's ``nn.Module``)."""
    import torch
    from torch import nn

    class Bf16Linear(nn.Module):
        """A linear layer computed in bfloat16 from weights cast once; float32 in and out, so
        the layer norms, softmax and pooling around it stay in float32."""

        def __init__(self, linear: nn.Linear) -> None:
            super().__init__()
            self.weight = nn.Parameter(
                linear.weight.detach().to(torch.bfloat16), requires_grad=False
            )
            bias = linear.bias
            self.bias = (
                None
                if bias is None
                else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = nn.functional.linear(x.to(torch.bfloat16), self.weight, self.bias)
            return out.to(x.dtype)

    return Bf16Linear


def __getattr__(name: str) -> Any:
    if name == "Bf16Linear":
        return _bf16_linear_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bf16_linears(module: nn.Module) -> nn.Module:
    """A copy of ``module`` (for inference) with every ``nn.Linear`` a :class:`Bf16Linear`.

    Everything else (embeddings, norms) is shared with ``module``, not copied: the copy
    costs the linear weights in bfloat16, half their float32 size."""
    from torch import nn

    linear_class = _bf16_linear_class()
    shared = {id(t): t for t in (*module.parameters(), *module.buffers())}
    out = copy.deepcopy(module, memo=shared)
    for parent in list(out.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, linear_class(child))
    return out.eval()


def weights_version(module: nn.Module) -> tuple[tuple[int, int], ...]:
    """Changes whenever a parameter of ``module`` is replaced or changed in place: what a
    cached copy of its weights (:func:`bf16_linears`) is checked against."""
    return tuple((id(p), p._version) for p in module.parameters())
