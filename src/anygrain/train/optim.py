"""Optimizer set-up shared by the trainers."""

from __future__ import annotations

from typing import Any

import torch


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
