"""The step loop every trainer runs: progress bar, log records, checkpoints, stopping.

A trainer owns its model, data and update rule and exposes them through
:class:`LoopTrainer`; :func:`run_loop` drives it.  The loop writes a log record every
``log_every`` steps (means of the step values over the interval, NaN skipped, plus
throughput), checkpoints at the end of each epoch and every ``checkpoint_every``
steps, asks ``should_stop`` for an early stop (time or step budgets), and on Ctrl-C
or SIGTERM writes a checkpoint before the interrupt goes on to the caller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from anygrain.train.optim import apply_update
from anygrain.train.runlog import TrainLog, defer_sigint

StepCallback = Callable[[int], None]


@dataclass
class StepResult:
    """What one update reports: values to average in the log, the questions (or examples)
    it trained on, and whether it ended an epoch."""

    values: dict[str, float]
    items: int
    end_of_epoch: bool


class EpochPosition:
    """A trainer's place: epoch, step within it, updates in all, and the torch RNG as of the
    last finished update (a checkpoint taken after an interrupted forward pass must not
    record that pass's dropout draws)."""

    epoch: int
    step_in_epoch: int
    global_step: int
    rng_state: torch.Tensor

    def epoch_fraction(self, steps_this_epoch: int) -> float:
        """Epochs done, fractional (e.g. 1.25), for the log."""
        return round(self.epoch + self.step_in_epoch / steps_this_epoch, 4)

    def count_update(self, steps_this_epoch: int) -> bool:
        """Record one finished update; True when it ended the epoch."""
        self.global_step += 1
        self.rng_state = torch.get_rng_state()
        self.step_in_epoch += 1
        if self.step_in_epoch == steps_this_epoch:
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            return True
        return False


class EpochTrainer(EpochPosition):
    """An :class:`EpochPosition` whose every update is one optimizer step over ``params``,
    clipped to ``cfg.max_grad_norm``, in epochs of ``steps_per_epoch`` (DPR, reader)."""

    cfg: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    params: list[torch.nn.Parameter]
    steps_per_epoch: int

    def update(self) -> bool:
        """Apply the gradients and count the update, with Ctrl-C held off until the
        position matches the weights; True when it ended the epoch."""
        with defer_sigint():
            apply_update(
                self.optimizer,
                self.scheduler,
                clip=self.params,
                max_grad_norm=self.cfg.max_grad_norm,
            )
            return self.count_update(self.steps_per_epoch)

    def log_fields(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch_fraction(self.steps_per_epoch),
            "lr": self.scheduler.get_last_lr()[0],
        }


class LoopTrainer(Protocol):
    global_step: int
    total_steps: int

    def train_step(self) -> StepResult: ...

    def save_checkpoint(self) -> Path: ...

    def log_fields(self) -> dict[str, Any]:
        """Fields for each log record besides the averaged values (epoch, lr, ...)."""
        ...


@dataclass
class LoopSettings:
    desc: str = "training"
    items: str = "questions"  # what a step's ``items`` count; names the rate field
    log_every: int = 10
    checkpoint_every: int = 0  # steps; 0 = at the end of each epoch only
    # False when the caller saves the model right after the last step anyway
    checkpoint_after_last: bool = True
    progress: bool = True
    postfix: str = "loss"  # the value shown beside the progress bar


@dataclass
class LoopStats:
    items: int
    seconds: float
    stopped: str  # why the loop ended early; "" when it ran to total_steps

    def as_dict(self, items: str) -> dict[str, Any]:
        return {
            items: self.items,
            "seconds": round(self.seconds, 2),
            f"{items}_per_s": round(self.items / self.seconds, 3) if self.seconds > 0 else None,
        }


class _Means:
    """Running means of step values over a log interval; NaN (no value that step) skipped."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, values: dict[str, float]) -> None:
        for k, v in values.items():
            if not math.isnan(v):
                self.sums[k] = self.sums.get(k, 0.0) + v
                self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: round(v / self.counts[k], 5) for k, v in self.sums.items()}


def run_loop(
    trainer: LoopTrainer,
    log: TrainLog,
    settings: LoopSettings,
    *,
    on_step: StepCallback | None = None,
    after_step: Callable[[int], None] | None = None,
    should_stop: Callable[[], str] | None = None,
    on_interrupt: Callable[[], str] | None = None,
) -> LoopStats:
    """Train until ``trainer.total_steps`` (which may change while running) or a stop.

    ``after_step(steps_run)`` runs after each update (budget fitting);
    ``on_step(global_step)`` after each update's bookkeeping (tests interrupt there);
    ``should_stop()`` returns a reason to stop early, after which a checkpoint is
    written; ``on_interrupt()`` runs after the interrupt checkpoint and returns words
    for the log message (e.g. " and model saved").
    """
    bar = tqdm(
        total=trainer.total_steps,
        initial=trainer.global_step,
        desc=settings.desc,
        unit="step",
        disable=not settings.progress,
        dynamic_ncols=True,
    )
    t_start = t_log = time.time()
    window = _Means()
    n_window = done = steps_run = 0
    stopped = ""
    try:
        while trainer.global_step < trainer.total_steps:
            r = trainer.train_step()
            steps_run += 1
            done += r.items
            n_window += r.items
            window.add(r.values)
            bar.update(1)
            if settings.postfix in r.values:
                bar.set_postfix(loss=f"{r.values[settings.postfix]:.3f}", refresh=False)
            if after_step is not None:
                after_step(steps_run)
                bar.total = trainer.total_steps
            step = trainer.global_step
            if step % settings.log_every == 0 or r.end_of_epoch:
                dt = max(time.time() - t_log, 1e-9)
                log.write(
                    {
                        "step": step,
                        **trainer.log_fields(),
                        **window.means(),
                        f"{settings.items}_per_s": round(n_window / dt, 3),
                        "elapsed_s": round(time.time() - t_start, 2),
                    }
                )
                t_log, n_window, window = time.time(), 0, _Means()
            last = step >= trainer.total_steps
            if (not last or settings.checkpoint_after_last) and (
                r.end_of_epoch
                or (settings.checkpoint_every and step % settings.checkpoint_every == 0)
            ):
                trainer.save_checkpoint()
            if on_step is not None:
                on_step(step)
            if last:
                break
            stopped = should_stop() if should_stop is not None else ""
            if stopped:
                path = trainer.save_checkpoint()
                log.say(f"stopped after {stopped}: checkpoint {path.name}; rerun to resume", step)
                break
    except KeyboardInterrupt:
        path = trainer.save_checkpoint()
        also = on_interrupt() if on_interrupt is not None else ""
        log.say(
            f"interrupted: checkpoint {path}{also} (rerun to resume)",
            trainer.global_step,
            event_kind="interrupted",
        )
        raise
    finally:
        bar.close()
    return LoopStats(items=done, seconds=time.time() - t_start, stopped=stopped)
