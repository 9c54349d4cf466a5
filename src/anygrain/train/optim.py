"""Optimizer set-up and gradient clipping shared by the trainers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from anygrain.train.options import GradClip


def param_groups(module: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay on biases and normalisation weights (BERT/DPR practice).

    Every one-dimensional parameter of a transformer is a bias or a LayerNorm weight,
    so the test is by shape and name, whatever the model calls its norms.
    """
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        plain = p.ndim < 2 or name.endswith("bias") or "norm" in name.lower()
        (no_decay if plain else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def apply_update(
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    *,
    clip: Iterable[torch.nn.Parameter] = (),
    max_grad_norm: float = 0.0,
    step_optimizer: bool = True,
) -> None:
    """Clip ``clip``'s gradients to one global norm (when ``max_grad_norm > 0``), step
    the optimizer and the LR schedule, then clear the gradients.

    ``step_optimizer=False`` (a batch with no loss) still advances the schedule, which
    counts batches rather than updates.  The optimizer is stepped then too, with every
    gradient cleared first: AdamW passes over parameters without a gradient, so that step
    changes no weight and no optimizer state, and the schedule still follows an
    ``optimizer.step()`` as PyTorch expects.  (Skipping it made PyTorch warn that
    ``lr_scheduler.step()`` ran before ``optimizer.step()`` when a run's first batch had
    no loss -- query-side training, a batch without a positive.  The warning was right
    that the schedule's first value went unused, which is the intent: the learning rate
    of batch k is the schedule's value k, whether or not batch 0 made an update.)
    """
    if step_optimizer:
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(clip), max_grad_norm)
    else:
        optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def clip_gradients(
    sides: Mapping[str, Sequence[torch.nn.Parameter]], max_norm: float, mode: GradClip
) -> dict[str, float]:
    """Clip gradients to ``max_norm`` and return each side's norm before clipping.

    Per side, a large gradient on one side no longer shrinks the other side's step.
    ``max_norm <= 0`` only measures.
    """
    norms = {
        name: float(torch.nn.utils.get_total_norm([p.grad for p in ps if p.grad is not None]))
        for name, ps in sides.items()
    }
    if max_norm > 0:
        if mode is GradClip.PER_SIDE:
            for name, ps in sides.items():
                torch.nn.utils.clip_grads_with_norm_(ps, max_norm, torch.tensor(norms[name]))
        else:
            # the plain call, so a global-clip run takes the very steps it always did
            torch.nn.utils.clip_grad_norm_([p for ps in sides.values() for p in ps], max_norm)
    return norms
