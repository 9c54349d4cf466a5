"""Backward passes for contrastive batches, plain or with gradient caching.

Gradient caching (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup") decouples the in-batch size from activation memory:

1. encode every chunk *without* a graph and keep only the representations;
2. compute the loss on those and its gradient w.r.t. each representation;
3. re-encode each chunk *with* a graph and backpropagate its cached gradient.

Both paths encode the same length-sorted chunks in the same order, and the cached
path replays each chunk's RNG state (dropout), so they give the same gradients and
leave the RNG in the same state: a run may switch paths and stay reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from anygrain.models.encoder import TextEncoder
from anygrain.train.batching import Tokenized, encode_with_grad, forward_rows

LossFn = Callable[..., torch.Tensor]


@dataclass
class Side:
    """One encoder and the tokenised texts it encodes in this batch."""

    encoder: TextEncoder
    tok: Tokenized


def backward_plain(
    sides: list[Side], loss_fn: LossFn, *, chunk_size: int, bf16: bool = False
) -> float:
    """Encode with a graph, ``loss_fn(*reps).backward()``; returns the loss."""
    reps = [encode_with_grad(s.encoder, s.tok, chunk_size, bf16=bf16) for s in sides]
    loss = loss_fn(*reps)
    loss.backward()
    return float(loss.detach())


def backward_grad_cache(
    sides: list[Side], loss_fn: LossFn, *, chunk_size: int, bf16: bool = False
) -> float:
    """Same gradients as :func:`backward_plain`, holding one chunk's activations at a time."""
    plans: list[tuple[list[np.ndarray], list[torch.Tensor]]] = []
    leaves: list[torch.Tensor] = []
    with torch.no_grad():
        for s in sides:
            chunks = s.tok.chunks(chunk_size)
            states: list[torch.Tensor] = []
            reps = None
            for rows in chunks:
                states.append(torch.get_rng_state())
                r = forward_rows(s.encoder, s.tok, rows, bf16=bf16)
                if reps is None:
                    reps = torch.empty((len(s.tok), r.shape[1]), dtype=r.dtype)
                reps[torch.from_numpy(rows)] = r
            assert reps is not None
            plans.append((chunks, states))
            leaves.append(reps.requires_grad_())
    rng_after = torch.get_rng_state()
    loss = loss_fn(*leaves)
    loss.backward()
    for s, (chunks, states), leaf in zip(sides, plans, leaves, strict=True):
        grad = leaf.grad
        if grad is None:  # this side does not reach the loss
            continue
        for rows, state in zip(chunks, states, strict=True):
            torch.set_rng_state(state)
            rep = forward_rows(s.encoder, s.tok, rows, bf16=bf16)
            rep.backward(grad[torch.from_numpy(rows)])
    torch.set_rng_state(rng_after)
    return float(loss.detach())
