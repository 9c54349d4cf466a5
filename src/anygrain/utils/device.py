"""Where models run: ``--device auto|cpu|cuda`` for training, encoding and search.

``auto`` takes CUDA when torch sees a GPU, else the CPU (the tested default).  Asking
for ``cuda`` where torch sees none is an error that says so, never a silent CPU run.
On a GPU, ``bf16`` autocasts to bfloat16 (native on every GPU anygrain targets); on
the CPU it goes through :func:`anygrain.utils.precision.cpu_autocast`, which warns
when the CPU would emulate it.
"""

from __future__ import annotations

import enum
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from anygrain.errors import AnygrainError

if TYPE_CHECKING:
    import torch

# torch is imported inside each function: the options (DeviceChoice, DEVICE_HELP) and the
# modules that only name resolve_device (the updater, every config) start without it


class DeviceChoice(str, enum.Enum):
    """What the user asks for."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


DEVICE_HELP = "auto: a CUDA GPU when torch sees one, else the CPU; cpu; cuda (cuda:N for one GPU)"


class CpuDevice:
    """The CPU where torch is not installed (a base install, whose models run on ONNX
    Runtime): what callers read of a ``torch.device`` (``type``, ``index``)."""

    type = "cpu"
    index = None

    def __str__(self) -> str:
        return "cpu"


def _without_torch(choice: object) -> CpuDevice:
    name = "auto" if choice is None else str(getattr(choice, "value", choice)).strip().lower()
    if name in (DeviceChoice.AUTO.value, DeviceChoice.CPU.value):
        return CpuDevice()
    raise AnygrainError(
        f"--device {name} needs torch and transformers, not installed: pip install 'anygrain[train]'"
    )


def resolve_device(choice: str | DeviceChoice | torch.device | None = None) -> torch.device:
    """The torch device for ``choice`` (None means ``auto``); without torch, the CPU (a
    :class:`CpuDevice`) for ``auto`` and ``cpu``, else an error saying how to get torch."""
    import importlib.util

    try:
        installed = importlib.util.find_spec("torch") is not None
    except ImportError:
        installed = False
    if not installed:
        return _without_torch(choice)  # type: ignore[return-value]
    import torch

    if isinstance(choice, torch.device):
        return choice
    name = "auto" if choice is None else str(getattr(choice, "value", choice)).strip().lower()
    if name == DeviceChoice.AUTO.value:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == DeviceChoice.CPU.value:
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            built = (
                "without CUDA" if torch.version.cuda is None else f"with CUDA {torch.version.cuda}"
            )
            raise AnygrainError(
                f"--device {name}: torch sees no CUDA GPU here (torch {torch.__version__}, "
                f"built {built}); use --device cpu or auto"
            )
        try:
            dev = torch.device(name)
        except RuntimeError as e:
            raise AnygrainError(f"--device {name}: {e}") from None
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise AnygrainError(
                f"--device {name}: only {torch.cuda.device_count()} CUDA GPU(s) are visible"
            )
        return dev
    raise AnygrainError(f"unknown device {name!r}: use auto, cpu or cuda (cuda:N)")


def check_device(choice: str | DeviceChoice | torch.device | None = None) -> None:
    """Refuse a device that is not here (a missing GPU, an unknown name) before any work is
    done: :func:`resolve_device`'s checks, without importing torch for ``auto`` and ``cpu``,
    which are always here (a BM25 build, add or search needs no torch)."""
    name = "auto" if choice is None else str(getattr(choice, "value", choice)).strip().lower()
    if name not in (DeviceChoice.AUTO.value, DeviceChoice.CPU.value):
        resolve_device(choice)


def autocast(device: torch.device, bf16: bool) -> AbstractContextManager[object]:
    """bfloat16 autocast on ``device`` when ``bf16`` (a no-op context otherwise)."""
    import torch

    from anygrain.utils.precision import cpu_autocast

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)
    return cpu_autocast(bf16)


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (the CPU for one without parameters)."""
    import torch

    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def place(model: torch.nn.Module, choice: str | DeviceChoice | torch.device | None) -> torch.device:
    """Move ``model`` to the device ``choice`` names (None: auto) unless it is there; its
    encode methods follow the weights.  In a Ray actor, auto finds the GPU it reserved."""
    dev = resolve_device(choice)
    if module_device(model) != dev:
        model.to(dev)
    return dev
