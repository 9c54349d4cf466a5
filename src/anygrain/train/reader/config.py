"""What a reader training run does, as one serialisable record (``reader_train_config.json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from anygrain.errors import AnygrainError
from anygrain.train.options import freeze_embeddings_option
from anygrain.train.saved_config import (
    BF16_HELP,
    CHECKPOINT_EVERY_HELP,
    THREADS_HELP,
    SavedConfig,
    option,
)
from anygrain.utils.device import DEVICE_HELP

CONFIG_FILE = "reader_train_config.json"
# Settings that only change bookkeeping, never the weights: a resumed run may differ in them.
_BOOKKEEPING = frozenset(
    {
        "out",
        "log_every",
        "checkpoint_every",
        "keep_checkpoints",
        "threads",
        "max_minutes",
        "max_steps",
        "fit_budget",
        "device",
    }
)


@dataclass
class ReaderTrainConfig(SavedConfig):
    """A reader training run (saved as ``reader_train_config.json`` beside the reader)."""

    FILE = CONFIG_FILE
    WHAT = "reader training config"
    BOOKKEEPING = _BOOKKEEPING
    # distillation came later: runs made before it match at these values
    ADDED: ClassVar[dict[str, Any]] = {
        "teacher": None,
        "distill": 1.0,
        "temperature": 2.0,
        "layers": None,
        "hidden_distill": 0.0,
    }

    train: list[str] = option(help="SQuAD-format training data, FORMAT:PATH or PATH; repeatable")
    out: str = option(help="Reader directory to write (also holds checkpoints and log)", path=True)
    model: str = option(
        "minilm",
        help="Starting encoder: alias (minilm, me5-small), hub name, directory, or a reader",
    )
    epochs: int = option(1, help="Passes over the training questions")
    batch_size: int = option(4, help="Questions per step")  # questions per step
    negatives: int = option(
        7, help="Negative passages per question (DPR m-1 = 23)"
    )  # passages per question = negatives + 1 (DPR's m = 24)
    # Small encoders at 4 questions a step learn the randomly initialised heads slowly: a
    # higher peak than 5e-5 reached a clearly better F1 in a short run.
    lr: float = option(1e-4, help="Peak learning rate (linear warm-up, then linear decay)")
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 2.0
    max_length: int = option(256, help="Tokens per passage window")
    # A per-passage "holds the answer" loss beside DPR's softmax: the softmax only ranks a
    # question's passages, so its logits cannot be compared across questions or thresholded.
    selection_bce: float = option(
        0.0,
        help="Weight of a per-passage sigmoid loss (answer here or not) on the selection "
        "head: makes its scores absolute, for confidence and abstention (0: softmax only)",
    )
    teacher: str | None = option(
        None,
        help="A trained reader (directory or shipped name) to distil from: its start, end "
        "and selection scores on the same windows are soft targets (same tokenizer)",
    )
    distill: float = option(
        1.0, help="With --teacher: weight of the distillation loss beside the gold one"
    )
    temperature: float = option(
        2.0, help="With --teacher: softens the teacher's and the student's span distributions"
    )
    hidden_distill: float = option(
        0.0,
        help="With --teacher: weight of a loss pulling each student layer's token vectors "
        "towards those of the teacher layer it was kept from (TinyBERT's; 0: off)",
    )
    layers: int | None = option(
        None,
        help="Keep this many of the starting model's transformer layers, evenly spaced "
        "(a smaller, faster reader; use with --teacher)",
    )
    # Windows per forward pass, sorted by length: on one core with bf16, 4 trained MiniLM
    # fastest (attention's memory; docs/benchmarks.md).
    micro_batch: int = option(4, help="Windows per forward pass (sorted by length)")
    max_question_length: int = 64
    max_answer_length: int = 30
    stride: int = 64
    include_title: bool = True
    retriever_depth: int = 30  # retrieved passages per question to sample negatives from
    seed: int = option(12345, help="Seed for data order, negatives and dropout")
    freeze_embeddings: bool = freeze_embeddings_option("reader")
    bf16: bool = option(False, help=BF16_HELP)
    device: str = option("auto", help=DEVICE_HELP)
    max_examples: int | None = option(
        None, help="Train on a seeded random subset of this many questions"
    )
    threads: int | None = option(
        None, help=THREADS_HELP
    )  # torch and FAISS threads (None: their defaults)
    max_minutes: float | None = option(
        None, help="Stop cleanly (checkpoint + reader) after this long"
    )
    fit_budget: bool = option(
        True, help="With --max-minutes: shrink the LR schedule to end in time"
    )
    max_steps: int | None = None  # stop (and checkpoint) after this many steps in total
    log_every: int = 10
    checkpoint_every: int = option(
        200, help=CHECKPOINT_EVERY_HELP
    )  # steps; 0 = only at the end of each epoch
    keep_checkpoints: bool = False

    def __post_init__(self) -> None:
        self.train = self.str_list(self.train)
        self.out = str(self.out)

    def validate(self) -> None:
        """Reject settings that cannot train, before any data is read."""
        problems = []
        if not self.train:
            problems.append("no training data (--train)")
        problems += self.below_one(
            "epochs",
            "batch_size",
            "micro_batch",
            "max_length",
            "max_answer_length",
            "retriever_depth",
        )
        if self.negatives < 0:
            problems.append("negatives must be >= 0")
        if self.lr <= 0:
            problems.append("lr must be > 0")
        if not 0 <= self.selection_bce <= 100:
            problems.append("selection_bce must be in [0, 100]")
        if not 0 <= self.distill <= 100:
            problems.append("distill must be in [0, 100]")
        if not 0 < self.temperature <= 100:
            problems.append("temperature must be in (0, 100]")
        if self.teacher is None and (self.distill, self.temperature) != (1.0, 2.0):
            problems.append("distill and temperature need a teacher (--teacher)")
        if not 0 <= self.hidden_distill <= 100:
            problems.append("hidden_distill must be in [0, 100]")
        if self.teacher is None and self.hidden_distill > 0:
            problems.append("hidden_distill needs a teacher (--teacher)")
        if self.teacher is not None and self.distill == 0 and self.hidden_distill == 0:
            problems.append("a teacher with distill 0 and hidden_distill 0 would not be used")
        if self.layers is not None and self.layers < 1:
            problems.append("layers must be >= 1")
        if not 0 <= self.warmup_ratio < 1:
            problems.append("warmup_ratio must be in [0, 1)")
        if self.max_examples is not None and self.max_examples < 1:
            problems.append("max_examples must be >= 1")
        if self.threads is not None and self.threads < 1:
            problems.append("threads must be >= 1")
        if self.max_minutes is not None and not self.max_minutes > 0:
            problems.append("max_minutes must be > 0")
        if self.max_steps is not None and self.max_steps < 1:
            problems.append("max_steps must be >= 1")
        if problems:
            raise AnygrainError("invalid reader training config: " + "; ".join(problems))

    def reader_settings(self) -> dict[str, Any]:
        return {
            "max_length": self.max_length,
            "max_question_length": self.max_question_length,
            "max_answer_length": self.max_answer_length,
            "stride": self.stride,
            "include_title": self.include_title,
        }
