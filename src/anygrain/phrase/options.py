"""A phrase index's and model's option types, importable without torch, FAISS or transformers.

The command line builds its options from these Enums (``--compress``, a trainer's
``--question-encoder``), so ``anygrain --help`` starts without the libraries the phrase
model and index need; :mod:`anygrain.phrase.compress` and :mod:`anygrain.phrase.model`
re-export them where they are used.
"""

from __future__ import annotations

import enum


class Compress(str, enum.Enum):
    """How a phrase index's FAISS indexes store vectors."""

    NONE = "none"
    SQ8 = "sq8"
    SQ4 = "sq4"
    PQ = "pq"  # product quantization, no rotation (OPQ trains slowly on a CPU)
    OPQ_PQ = "opq-pq"


class QuestionEncoderKind(str, enum.Enum):
    """How questions become ``(q_start, q_end)``."""

    SEPARATE = "separate"  # two encoders, [CLS] each (the paper)
    SHARED = "shared"  # one encoder, pooled, two linear heads
