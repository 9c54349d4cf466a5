"""A training run's time budget (``--max-minutes``), shared by the phrase and reader trainers.

The budget counts from the start of the command.  With ``fit_budget`` the schedule is
fitted to it from the measured step time (after ``PROBE`` steps, then every ``REFIT``
steps), so the learning rate decays within the budget rather than being cut off; when
the time is up the loop stops cleanly (checkpoint, then the model).
"""

from __future__ import annotations

import time
from typing import Protocol

from anygrain.train.runlog import TrainLog

PROBE = 20  # steps timed before the schedule is first fitted to max_minutes
REFIT = 200  # steps between later fits (contention on a shared CPU changes)
SAVE_SECONDS = 60.0  # kept for the final save (and the phrase filter's calibration)


class BudgetedTrainer(Protocol):
    global_step: int
    total_steps: int
    planned_steps: int

    def fit_to_budget(self, seconds_per_step: float, seconds_left: float) -> bool: ...


class BudgetedConfig(Protocol):
    max_minutes: float | None
    max_steps: int | None
    fit_budget: bool


class TimeBudget:
    """``max_minutes`` and ``max_steps`` for :func:`anygrain.train.loop.run_loop`
    (``after_step`` and ``should_stop``)."""

    def __init__(
        self, trainer: BudgetedTrainer, cfg: BudgetedConfig, log: TrainLog, t_origin: float
    ) -> None:
        self.trainer, self.cfg, self.log, self.t_origin = trainer, cfg, log, t_origin
        self.budget = cfg.max_minutes * 60 if cfg.max_minutes is not None else None
        self.t_probe = 0.0

    def after_step(self, steps_run: int) -> None:
        if steps_run == 2:
            self.t_probe = time.time()  # the first steps are slower (allocation, caches)
        if (
            self.budget is None
            or not self.cfg.fit_budget
            or steps_run <= 2
            or not (steps_run == PROBE or steps_run % REFIT == 0)
        ):
            return
        trainer = self.trainer
        per_step = (time.time() - self.t_probe) / (steps_run - 2)
        left = self.budget - (time.time() - self.t_origin) - SAVE_SECONDS
        if trainer.fit_to_budget(per_step, left):
            self.log.say(
                f"schedule fitted to the time budget: {trainer.total_steps} steps "
                f"(planned {trainer.planned_steps}; {per_step:.2f} s/step)",
                trainer.global_step,
                total_steps=trainer.total_steps,
            )

    def should_stop(self) -> str:
        if self.cfg.max_steps is not None and self.trainer.global_step >= self.cfg.max_steps:
            return f"max_steps {self.cfg.max_steps}"
        if self.budget is not None and time.time() - self.t_origin >= self.budget:
            return f"time budget of {self.cfg.max_minutes} minutes"
        return ""


def fitted_total(global_step: int, seconds_per_step: float, seconds_left: float) -> int:
    """Total steps that end within ``seconds_left`` (3% kept for saving), at least one more."""
    return max(
        global_step + int(0.97 * seconds_left / max(seconds_per_step, 1e-9)), global_step + 1
    )


def linear_schedule(step: int, warmup: int, total: int) -> float:
    """Linear warm-up then linear decay to 0 at ``total`` (read at each step, so a schedule
    fitted to a time budget takes effect at once)."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))
