"""Issue 34: PyTorch's "lr_scheduler.step() before optimizer.step()" warning.

A batch without a loss (query-side training: no positive in it) still advances the
schedule, which counts batches.  :func:`anygrain.train.optim.apply_update` steps the
optimizer then too, with no gradient, so the order is PyTorch's and no weight moves.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from anygrain.train.optim import apply_update, param_groups

CASES = [
    # (batches with a loss, in order) -> weights changed by the end
    ([False], False),
    ([False, False], False),
    ([False, True], True),
    ([True, False], True),
    ([True, True], True),
]


@pytest.mark.parametrize(("losses", "moved"), CASES)
def test_no_scheduler_warning_and_no_update_without_a_loss(losses: list[bool], moved: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (k + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch's UserWarning would fail the test
        for has_loss in losses:
            if has_loss:
                model(torch.ones(1, 4)).sum().backward()
            else:
                # a stale gradient must not be applied by the no-loss step
                model.weight.grad = torch.ones_like(model.weight)
            apply_update(opt, sched, clip=model.parameters(), step_optimizer=has_loss)
    after = list(model.parameters())
    changed = any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert changed is moved
    # the schedule counts batches, with or without a loss
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / (len(losses) + 1))
