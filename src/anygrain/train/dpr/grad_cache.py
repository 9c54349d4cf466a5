"""Backward passes for contrastive batches, plain or with gradient caching.

Gradient caching (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup") decouples the in-batch size from activation memory:

1. encode every chunk *without* a graph and keep only the representations;
2. compute the loss on those and its gradient w.r.t. each representation;
3. re-encode each chunk *with* a graph and backpropagate its cached gradient.

Both paths encode the same length-sorted chunks in the same order, and the cached
path replays each chunk's RNG state (dropout), so they give the same gradients and
leave the RNG in the same state: a run may switch paths and stay reproducible.  On a
GPU, dropout draws from that GPU's generator, so its state is replayed as well.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from anygrain.models.encoder import TextEncoder
from anygrain.train.dpr.batching import Tokenized, encode_with_grad, forward_rows
from anygrain.utils.device import module_device

LossFn = Callable[..., torch.Tensor]
RngState = tuple[torch.Tensor, torch.Tensor | None]


def _get_rng(device: torch.device) -> RngState:
    """The CPU generator's state, and ``device``'s when it is a GPU (dropout draws there)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng(state: RngState, device: torch.device) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


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
    dev = module_device(sides[0].encoder) if sides else torch.device("cpu")
    plans: list[tuple[list[np.ndarray], list[RngState]]] = []
    leaves: list[torch.Tensor] = []
    with torch.no_grad():
        for s in sides:
            chunks = s.tok.chunks(chunk_size)
            states: list[RngState] = []
            reps = None
            for rows in chunks:
                states.append(_get_rng(dev))
                r = forward_rows(s.encoder, s.tok, rows, bf16=bf16)
                if reps is None:
                    reps = torch.empty((len(s.tok), r.shape[1]), dtype=r.dtype, device=r.device)
                reps[torch.from_numpy(rows).to(r.device)] = r
            assert reps is not None
            plans.append((chunks, states))
            leaves.append(reps.requires_grad_())
    rng_after = _get_rng(dev)
    loss = loss_fn(*leaves)
    loss.backward()
    for s, (chunks, states), leaf in zip(sides, plans, leaves, strict=True):
        grad = leaf.grad
        if grad is None:  # this side does not reach the loss
            continue
        for rows, state in zip(chunks, states, strict=True):
            _set_rng(state, dev)
            rep = forward_rows(s.encoder, s.tok, rows, bf16=bf16)
            rep.backward(grad[torch.from_numpy(rows).to(grad.device)])
    _set_rng(rng_after, dev)
    return float(loss.detach())
