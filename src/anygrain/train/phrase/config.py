"""What a phrase training run and a query-side fine-tuning run do, each as one
serialisable record saved beside the model it makes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.phrase.options import QuestionEncoderKind
from anygrain.train.options import GradClip, InBatchNegatives, freeze_embeddings_option
from anygrain.train.saved_config import (
    BF16_HELP,
    CHECKPOINT_EVERY_HELP,
    THREADS_HELP,
    SavedConfig,
    option,
)
from anygrain.utils.device import DEVICE_HELP

# Settings that never change the weights: a resumed run may differ in them.
_BOOKKEEPING = frozenset(
    {
        "out",
        "log_every",
        "checkpoint_every",
        "keep_checkpoints",
        "max_minutes",
        "max_steps",
        "fit_budget",
        "threads",
        "device",
    }
)


@dataclass
class PhraseTrainConfig(SavedConfig):
    """A phrase training run (saved as ``train_config.json`` beside the model)."""

    # FILE: SavedConfig's train_config.json, as the DPR trainer's
    WHAT = "phrase training config"
    BOOKKEEPING = _BOOKKEEPING
    ADDED = {
        "grad_clip": "global",
        "in_batch_negatives": "gold",
        "freeze_embeddings": False,
        "hard_negatives": 0,
    }

    train: list[str] = option(help="SQuAD-format training data, FORMAT:PATH or PATH; repeatable")
    out: str = option(help="Model directory to write (also checkpoints and log)", path=True)
    model: str = option("minilm", help="Starting encoder: minilm, me5-small, hub name or directory")
    question_encoder: str = option(
        "shared",
        help="shared: one encoder, two heads; separate: two encoders (paper)",
        flags="--question-encoder",
    )  # shared | separate
    question_pooling: str | None = None  # shared encoder: mean | cls (default: the model's)
    epochs: int = option(3, help="Passes over the training questions")
    batch_size: int = option(32, help="Questions per step")
    lr: float = option(
        1e-4, help="Peak learning rate (linear warm-up and decay)"
    )  # minilm: higher peaks than 5e-5 trained better in short runs
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    grad_clip: str = option(
        "global",
        help="global: one gradient norm; per-side: phrase and question encoders apart",
        choices=GradClip,
    )  # global | per-side (phrase and question encoders apart)
    max_passage_length: int = option(384, help="Tokens per window")
    doc_stride: int = option(128, help="Overlap between windows (tokens)")
    max_query_length: int = 64
    max_phrase_words: int = 20
    include_title: bool = True
    lambda_single: float = 1.0
    lambda_distill: float = 2.0
    lambda_neg: float = 4.0
    lambda_filter: float = 1.0
    in_batch: bool = option(True, help="In-batch negatives", flags="--inbatch/--no-inbatch")
    in_batch_negatives: str = option(
        "gold",
        help="gold: other questions' gold starts/ends (paper); tokens: every token of the other passages in the batch",
        flags="--inbatch-negatives",
        choices=InBatchNegatives,
    )  # gold | tokens (see InBatchNegatives)
    hard_negatives: int = option(
        0,
        help="BM25 hard-negative passages per question: their tokens are negatives (0: none)",
        flags="--hard-negatives",
    )
    pre_batch: int = 2  # C preceding batches as negatives; 0 = off
    pre_batch_from: float = 0.5  # fraction of all steps before pre-batch negatives start
    teacher: str | None = option(None, help="Cross-attention reader directory to distil from")
    freeze_embeddings: bool = freeze_embeddings_option("model")
    bf16: bool = option(False, help=BF16_HELP)
    device: str = option("auto", help=DEVICE_HELP)
    seed: int = option(12345, help="Seed for data order, heads and dropout")
    max_examples: int | None = option(
        None, help="Train on a seeded subset of this many questions, taken passage by passage"
    )
    max_minutes: float | None = option(
        None, help="Stop cleanly (checkpoint + model) after this long"
    )  # stop cleanly (checkpoint + model) after this long
    fit_budget: bool = option(
        True, help="With --max-minutes: shrink the LR schedule (and pre-batch start) to end in time"
    )  # with max_minutes: fit the LR/pre-batch schedule into it
    max_steps: int | None = None  # stop (and checkpoint) after this many steps in total
    # torch intra-op threads (None: torch's default).  On a CPU shared with other jobs use 1:
    # every multi-threaded op then waits for a descheduled partner (several times slower).
    threads: int | None = option(None, help=THREADS_HELP)
    log_every: int = 10
    checkpoint_every: int = option(200, help=CHECKPOINT_EVERY_HELP)  # steps; 0 = each epoch only
    keep_checkpoints: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.train = self.str_list(self.train)
        self.out = str(self.out)
        self.model = str(self.model)

    def validate(self) -> None:
        """Reject settings that cannot train, before any data is read."""
        problems = []
        if not self.train:
            problems.append("no training data (--train)")
        try:
            QuestionEncoderKind(self.question_encoder)
        except ValueError:
            problems.append(
                f"question_encoder must be shared or separate, not {self.question_encoder!r}"
            )
        try:
            InBatchNegatives(self.in_batch_negatives)
        except ValueError:
            problems.append(
                f"in_batch_negatives must be gold or tokens, not {self.in_batch_negatives!r}"
            )
        try:
            GradClip(self.grad_clip)
        except ValueError:
            problems.append(f"grad_clip must be global or per-side, not {self.grad_clip!r}")
        if self.question_pooling is not None and self.question_pooling not in ("mean", "cls"):
            problems.append("question_pooling must be mean or cls")
        problems += self.below_one(
            "epochs", "batch_size", "max_passage_length", "max_query_length", "max_phrase_words"
        )
        if not 0 <= self.doc_stride < self.max_passage_length // 2:
            problems.append("doc_stride must be in [0, max_passage_length / 2)")
        if self.lr <= 0:
            problems.append("lr must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            problems.append("warmup_ratio must be in [0, 1)")
        if not 0 <= self.pre_batch_from <= 1:
            problems.append("pre_batch_from must be in [0, 1]")
        if self.pre_batch < 0:
            problems.append("pre_batch must be >= 0")
        if self.hard_negatives < 0:
            problems.append("hard_negatives must be >= 0")
        for name in ("lambda_single", "lambda_distill", "lambda_neg", "lambda_filter"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.threads is not None and self.threads < 1:
            problems.append("threads must be >= 1")
        if self.max_minutes is not None and self.max_minutes <= 0:
            problems.append("max_minutes must be > 0")
        if problems:
            raise AnygrainError("invalid phrase training config: " + "; ".join(problems))


QUERY_SIDE_CONFIG_FILE = "query_side_config.json"
_QUERY_SIDE_BOOKKEEPING = frozenset({"out", "log_every", "checkpoint_every", "threads"})


class QuerySideLoss(str, enum.Enum):
    """Which retrieved phrases are positives."""

    PHRASE = "phrase"  # text matches an answer
    PASSAGE = "passage"  # inside a gold passage (document-level loss)
    BOTH = "both"


@dataclass
class PhraseQuerySideConfig(SavedConfig):
    """A query-side fine-tuning run (saved as ``query_side_config.json`` beside the model)."""

    FILE = QUERY_SIDE_CONFIG_FILE
    WHAT = "query-side config"
    BOOKKEEPING = _QUERY_SIDE_BOOKKEEPING

    index: str = option(
        help="Phrase index over the TRAINING passages (never the test set)",
        argument=True,
        path=True,
    )  # phrase index over the training passages
    train: list[str] = option(
        help="Questions with answers (SQuAD format); repeatable"
    )  # question sets with answers and gold passages (SQuAD format)
    out: str = option(help="Phrase model directory to write", path=True)
    loss: str = option(
        QuerySideLoss.PHRASE.value,
        help="Positives: phrase (answer text), passage (gold passage), or both",
        choices=QuerySideLoss,
    )
    epochs: int = option(1, help="Passes over the questions")
    batch_size: int = option(16, help="Questions per step")
    lr: float = option(3e-5, help="Peak learning rate")
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    top_k: int = option(
        100, help="MIPS depth per side"
    )  # MIPS depth per side when retrieving candidates
    max_candidates: int = 100  # retrieved phrases per question in the softmax
    bf16: bool = option(False, help=BF16_HELP)
    seed: int = 12345
    max_examples: int | None = option(None, help="Train on a seeded random subset of questions")
    threads: int | None = option(None, help=THREADS_HELP)
    log_every: int = 10
    checkpoint_every: int = 200  # steps; 0 = each epoch only

    def __post_init__(self) -> None:
        self.train = self.str_list(self.train)
        self.index, self.out = str(self.index), str(self.out)

    def validate(self) -> None:
        problems = []
        if not self.train:
            problems.append("no training questions (--train)")
        try:
            QuerySideLoss(self.loss)
        except ValueError:
            known = ", ".join(v.value for v in QuerySideLoss)
            problems.append(f"loss must be one of {known}, not {self.loss!r}")
        problems += self.below_one("epochs", "batch_size", "top_k", "max_candidates")
        if self.lr <= 0:
            problems.append("lr must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            problems.append("warmup_ratio must be in [0, 1)")
        if self.threads is not None and self.threads < 1:
            problems.append("threads must be >= 1")
        if problems:
            raise AnygrainError("invalid query-side config: " + "; ".join(problems))
