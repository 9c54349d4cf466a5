"""What a DPR training run does, as one serialisable record (``train_config.json``).

Everything that changes the optimisation trajectory lives here, so a checkpoint
can refuse to resume under different settings and a saved model says how it was made.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.train.saved_config import (
    BF16_HELP,
    CHECKPOINT_EVERY_HELP,
    THREADS_HELP,
    SavedConfig,
    option,
)
from anygrain.utils.device import DEVICE_HELP

CONFIG_FILE = "train_config.json"

# Settings that only change bookkeeping, never the weights: a resumed run may differ in them
# (a run checkpointed on a GPU may go on on the CPU, and the other way round).
_BOOKKEEPING = frozenset(
    {"out", "log_every", "checkpoint_every", "keep_checkpoints", "threads", "device"}
)


class TrainMode(str, enum.Enum):
    """FULL trains both encoders; QUERY_SIDE trains the question encoder against frozen,
    cached passage vectors, so an index built with the base model still fits."""

    FULL = "full"
    QUERY_SIDE = "query-side"


@dataclass
class DprTrainConfig(SavedConfig):
    """A DPR training run.  Defaults follow DPR (lr 2e-5, clip 2.0, one BM25 hard negative)."""

    FILE = CONFIG_FILE
    WHAT = "training config"
    BOOKKEEPING = _BOOKKEEPING
    ADDED = {"corpus": [], "id_prefix": []}

    train: list[str] = option(
        help="Training data, FORMAT:PATH or PATH (dpr-train JSON/JSONL, SQuAD-format JSON, or qrels-based questions: multicpr, beir); repeatable"
    )
    out: str = option(
        help="Model directory to write (also holds checkpoints, cache and log)", path=True
    )
    # One per --train (or none): the passages of a question-only source (Multi-CPR's
    # corpus.tsv), "" for the source's own; and a prefix for its question and passage ids.
    corpus: list[str] = option(
        help="Passages for the --train source at the same position (e.g. multicpr:DIR/corpus.tsv); '' for the source's own; repeatable",
        factory=list,
    )
    id_prefix: list[str] = option(
        help="Prefix for the question and passage ids of the --train source at the same position (e.g. ecom-); repeatable",
        factory=list,
    )
    model: str = option(
        "minilm",
        help="Starting encoder: alias (minilm, me5-small), hub name, directory, or an anygrain model",
    )
    mode: TrainMode = option(
        TrainMode.FULL,
        help="full: train both encoders; query-side: only the question encoder, so an index built with the base model still fits",
    )
    shared: bool = True  # FULL mode: one encoder for both sides (QUERY_SIDE always unties them)
    epochs: int = option(1, help="Passes over the training data")
    batch_size: int = option(32, help="Questions per step (in-batch negatives)")
    lr: float = option(2e-5, help="Peak learning rate (linear warm-up, then linear decay)")
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    max_grad_norm: float = 2.0
    max_query_length: int = 64
    max_passage_length: int = 256
    include_title: bool = True
    hard_negatives: int = option(1, help="BM25 hard negatives per question (full mode)")
    bm25_depth: int = 20
    seed: int = option(12345, help="Seed for data order, negatives and dropout")
    bf16: bool = option(False, help=BF16_HELP)
    device: str = option("auto", help=DEVICE_HELP)
    grad_cache: bool = option(
        False,
        help="Gradient caching: batch size not bounded by memory (each batch is encoded twice: ~1.5x time)",
    )
    grad_cache_chunk: int = 16
    max_examples: int | None = option(None, help="Train on a seeded random subset of this size")
    # Softmax temperature; None picks 0.05 for L2-normalised encoders (cosine scores in
    # [-1, 1] are too flat for a softmax) and 1.0 (DPR's raw dot product) otherwise.
    temperature: float | None = option(
        None, help="Softmax temperature (default: 0.05 for normalised encoders, else 1)"
    )
    encode_batch_size: int = 64  # QUERY_SIDE passage caching
    threads: int | None = option(None, help=THREADS_HELP)
    log_every: int = 10
    checkpoint_every: int = option(100, help=CHECKPOINT_EVERY_HELP)
    keep_checkpoints: bool = False  # keep the last checkpoint after training completes
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.mode = TrainMode(self.mode)
        except ValueError:
            raise AnygrainError(
                f"unknown training mode {self.mode!r}: use {' or '.join(m.value for m in TrainMode)}"
            ) from None
        self.train = self.str_list(self.train)
        self.corpus, self.id_prefix = self.str_list(self.corpus), self.str_list(self.id_prefix)
        self.out = str(self.out)

    def validate(self) -> None:
        """Reject settings that cannot train, before any data is read."""
        problems = []
        if not self.train:
            problems.append("no training data (--train)")
        for name in ("corpus", "id_prefix"):
            n = len(getattr(self, name))
            if n and n != len(self.train):
                problems.append(f"{n} {name} value(s) for {len(self.train)} --train source(s)")
        problems += self.below_one(
            "epochs",
            "batch_size",
            "max_query_length",
            "max_passage_length",
            "grad_cache_chunk",
            "encode_batch_size",
            "bm25_depth",
        )
        if self.hard_negatives < 0:
            problems.append("hard_negatives must be >= 0")
        if self.lr <= 0:
            problems.append("lr must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            problems.append("warmup_ratio must be in [0, 1)")
        if self.temperature is not None and self.temperature <= 0:
            problems.append("temperature must be > 0")
        if self.max_examples is not None and self.max_examples < 1:
            problems.append("max_examples must be >= 1")
        if self.threads is not None and self.threads < 1:
            problems.append("threads must be >= 1")
        if problems:
            raise AnygrainError("invalid training config: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["mode"] = self.mode.value
        return d
