"""The checkpoint side shared by the phrase trainers: what every checkpoint holds, and
resuming a run from its newest one.

A trainer keeps its state in ``cfg.out``'s checkpoints tagged with its own ``CKPT_FORMAT``
(only the newest is kept: the model is saved at the end anyway).  Subclasses add their
weights and position to :meth:`Resumable.state` and restore them after
:meth:`Resumable.restore`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from anygrain.train.checkpoint import (
    check_compatible,
    load_checkpoint,
    run_identity,
    save_checkpoint,
)
from anygrain.train.run_dir import RunDir


class Resumable:
    CKPT_FORMAT: ClassVar[str]
    cfg: Any  # a SavedConfig with ``out``
    fingerprint: str  # the training data's
    global_step: int
    rng_state: torch.Tensor
    optimizer: torch.optim.Optimizer
    scheduler: Any

    def state(self, data_fingerprint: str) -> dict[str, Any]:
        """Optimizer, schedule, RNG and step, with what a resumed run must match."""
        return {
            **run_identity(self.cfg.trajectory(), data_fingerprint),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": self.rng_state,
            "global_step": self.global_step,
        }

    def restore(self, state: dict[str, Any], data_fingerprint: str, path: Path) -> None:
        """Refuse a checkpoint of other settings or data, else load what :meth:`state` saved."""
        check_compatible(state, self.cfg.trajectory(), data_fingerprint, path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.rng_state = state["rng"]
        self.global_step = int(state["global_step"])

    def save_checkpoint(self) -> Path:
        return save_checkpoint(
            Path(self.cfg.out),
            self.state(self.fingerprint),
            global_step=self.global_step,
            keep=1,
            fmt=self.CKPT_FORMAT,
        )

    def resume(self, run: RunDir, *, resume: bool) -> bool:
        """Open ``run`` and continue from its newest checkpoint (True), or leave a fresh
        start to the caller (False)."""
        ckpt = run.open(resume=resume)
        if ckpt is None:
            return False
        self.restore(load_checkpoint(ckpt, fmt=self.CKPT_FORMAT), self.fingerprint, ckpt)
        run.resumed(ckpt, self.global_step)
        return True
