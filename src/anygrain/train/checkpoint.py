"""Training checkpoints: everything needed to continue a run exactly where it stopped.

Shared by the DPR, reader and phrase trainers; each tags its files with its own
``format`` (:func:`checkpoint_format`), so one trainer never resumes another's.

A checkpoint holds the trainable weights, optimizer and scheduler states, the
torch RNG state (dropout) and the position (epoch, step within it, global step),
plus the run's trajectory settings and data fingerprint so it never resumes a
different run.  Files are written atomically (``step-000000123.pt``); older ones
are pruned.  Loading uses ``weights_only`` unpickling: nothing but tensors and
plain data is read back.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_path

CHECKPOINT_DIR = "checkpoints"
FORMAT = "anygrain.dpr-checkpoint"  # the default kind; each trainer names its own
FORMAT_VERSION = 1
_NAME = re.compile(r"^step-(\d+)\.pt$")


def checkpoint_format(kind: str) -> str:
    """The ``format`` tag of a trainer's checkpoints (``dpr``, ``reader``, ``phrase``)."""
    return f"anygrain.{kind}-checkpoint"


def checkpoint_dir(out: Path) -> Path:
    return Path(out) / CHECKPOINT_DIR


def list_checkpoints(out: Path) -> list[Path]:
    """Checkpoints of a run, oldest first."""
    d = checkpoint_dir(out)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(out: Path) -> Path | None:
    found = list_checkpoints(out)
    return found[-1] if found else None


def save_checkpoint(
    out: Path,
    state: dict[str, Any],
    *,
    global_step: int,
    keep: int = 2,
    fmt: str = FORMAT,
) -> Path:
    """Write ``state`` for ``global_step`` atomically; keep the newest ``keep`` checkpoints."""
    path = checkpoint_dir(out) / f"step-{global_step:09d}.pt"
    payload = {
        **state,
        "format": fmt,
        "format_version": FORMAT_VERSION,
        "global_step": global_step,
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    for old in list_checkpoints(out)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: Path, *, fmt: str = FORMAT) -> dict[str, Any]:
    """A checkpoint of the trainer whose format tag is ``fmt``, or a clear error."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign file
        raise AnygrainError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or state.get("format") != fmt:
        kind = fmt.removeprefix("anygrain.").removesuffix("-checkpoint")
        raise AnygrainError(f"{path}: not an anygrain {kind} training checkpoint")
    if state.get("format_version") != FORMAT_VERSION:
        raise AnygrainError(
            f"{path}: checkpoint format {state.get('format_version')}, expected {FORMAT_VERSION}"
        )
    return state


def run_identity(trajectory: dict[str, Any], data_fingerprint: str) -> dict[str, Any]:
    """What a checkpoint records of its run, for :func:`check_compatible` to compare."""
    return {
        "trajectory": json.dumps(trajectory, sort_keys=True),
        "data_fingerprint": data_fingerprint,
    }


def check_compatible(
    state: dict[str, Any], trajectory: dict[str, Any], data_fingerprint: str, path: Path
) -> None:
    """Refuse to resume under other settings or data: the result would match neither run."""
    saved = json.loads(state["trajectory"])
    now = json.loads(json.dumps(trajectory, sort_keys=True))  # tuples etc. as saved
    if saved != now:
        diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        raise AnygrainError(
            f"{path}: checkpoint was made with different settings ({', '.join(diff)}); "
            "train into a new directory, or restart with --no-resume"
        )
    if state["data_fingerprint"] != data_fingerprint:
        raise AnygrainError(
            f"{path}: checkpoint was made on different training data; "
            "train into a new directory, or restart with --no-resume"
        )


def remove_checkpoints(out: Path) -> None:
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
