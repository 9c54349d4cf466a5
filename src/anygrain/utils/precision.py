"""bfloat16 autocast on the CPU, and whether this CPU makes it worth having.

bf16 autocast speeds CPUs with native bfloat16 (AVX-512 BF16, AMX) by about 1.3x, but
on CPUs without it (AVX2-only parts, many AMD EPYC and older Intel) every matmul is
emulated: a MiniLM forward+backward measured 15x *slower* here.  So every bf16
switch in anygrain goes through :func:`cpu_autocast`, which warns once when bf16 is
asked for on such a CPU.  It does not quietly switch to float32: the saved configs say
what ran, and resuming compares them.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import AbstractContextManager

import torch


class SlowBf16Warning(UserWarning):
    """bf16 autocast requested on a CPU without native bfloat16."""


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """True when oneDNN has native bfloat16 kernels on this CPU."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


_warned = False


def bf16_note() -> str | None:
    """A sentence for the user when bf16 would be slow here, else None."""
    if native_bf16():
        return None
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
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
