"""What a DPR training run does, as one serialisable record (``train_config.json``).

Everything that changes the optimisation trajectory lives here, so a checkpoint
can refuse to resume under different settings and a saved model says how it was made.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.train.saved_config import SavedConfig

CONFIG_FILE = "train_config.json"

# Settings that only change bookkeeping, never the weights: a resumed run may differ in them.
_BOOKKEEPING = frozenset({"out", "log_every", "checkpoint_every", "keep_checkpoints", "threads"})


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

    train: list[str]
    out: str
    # One per --train (or none): the passages of a question-only source (Multi-CPR's
    # corpus.tsv), "" for the source's own; and a prefix for its question and passage ids.
    corpus: list[str] = field(default_factory=list)
    id_prefix: list[str] = field(default_factory=list)
    model: str = "minilm"
    mode: TrainMode = TrainMode.FULL
    shared: bool = True  # FULL mode: one encoder for both sides (QUERY_SIDE always unties them)
    epochs: int = 1
    batch_size: int = 32
    lr: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    max_grad_norm: float = 2.0
    max_query_length: int = 64
    max_passage_length: int = 256
    include_title: bool = True
    hard_negatives: int = 1
    bm25_depth: int = 20
    seed: int = 12345
    bf16: bool = False
    grad_cache: bool = False
    grad_cache_chunk: int = 16
    max_examples: int | None = None
    # Softmax temperature; None picks 0.05 for L2-normalised encoders (cosine scores in
    # [-1, 1] are too flat for a softmax) and 1.0 (DPR's raw dot product) otherwise.
    temperature: float | None = None
    encode_batch_size: int = 64  # QUERY_SIDE passage caching
    threads: int | None = None  # torch and FAISS threads (None: their defaults)
    log_every: int = 10
    checkpoint_every: int = 100  # steps; 0 = only at the end of each epoch
    keep_checkpoints: bool = False  # keep the last checkpoint after training completes
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.mode = TrainMode(self.mode)
        except ValueError:
            raise AnygrainError(
                f"unknown training mode {self.mode!r}: use {' or '.join(m.value for m in TrainMode)}"
            ) from None
        if isinstance(self.train, str):
            self.train = [self.train]
        self.train = [str(t) for t in self.train]
        for name in ("corpus", "id_prefix"):
            value = getattr(self, name)
            setattr(self, name, [str(v) for v in ([value] if isinstance(value, str) else value)])
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
        for name in (
            "epochs",
            "batch_size",
            "max_query_length",
            "max_passage_length",
            "grad_cache_chunk",
            "encode_batch_size",
            "bm25_depth",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
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
