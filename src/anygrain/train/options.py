"""The trainers' option types that their configs name, importable without torch.

A config (``train/*/config.py``) is what ``anygrain train ... --help`` is generated from,
so it and the Enums it names import no torch (the trainers, :mod:`anygrain.train.optim`
and :mod:`anygrain.train.phrase.trainer`, act on them).
"""

from __future__ import annotations

import enum
from typing import Any

from anygrain.train.saved_config import option


class GradClip(str, enum.Enum):
    """How the gradient norm is limited before each update."""

    GLOBAL = "global"  # one norm over all parameters (the usual clip_grad_norm_)
    PER_SIDE = "per-side"  # each side (e.g. phrase and question encoders) on its own norm


class InBatchNegatives(str, enum.Enum):
    """What the other passages of a batch contribute as negatives for a question."""

    GOLD = "gold"  # their questions' gold start/end vectors (the paper)
    # every token that may start (end) a phrase in them: the question's gold must beat all of
    # them, which is what ranking phrases across passages asks of it
    TOKENS = "tokens"


def freeze_embeddings_option(what: str) -> Any:
    """The ``--freeze-embeddings`` field of a trainer whose result is ``what`` (a model)."""
    # Frozen token embeddings keep the result a small delta over its backbone (packing stores
    # only the transformer layers) and skip the largest AdamW update.
    return option(
        False,
        help=f"Keep the backbone's embedding layers fixed (the {what} can then be packed small)",
        flags="--freeze-embeddings",
    )
