"""How a phrase build spends its memory budget, so its peak stays flat in corpus size.

Besides what is resident before any work (Python, torch, FAISS and the model:
:meth:`BuildBudget.for_model`, from the model's own weights and vocabulary), a build holds
one dump shard, one encoder batch's activations, the FAISS training sample and the codes
being filled; :class:`BuildBudget` bounds each from one number, the budget, and refuses a
budget that leaves too little before any encoding.  ``bench/build_memory.py`` measures it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from anygrain.errors import AnygrainError

#: The default budget of a phrase build (bytes of resident memory).
DEFAULT_MEMORY_BUDGET = 1_500_000_000
#: Resident before any work: Python, torch, FAISS, tokenizer and a MiniLM-sized phrase model
#: (measured with ``phrase-minilm`` loaded: docs/benchmarks.md).
BASELINE_BYTES = 750_000_000
#: Resident besides a model's weights and vocabulary: Python, torch, FAISS, transformers'
#: model code and the allocator's slack (measured with ``phrase-me5-zh`` loaded, less its
#: weights and vocabulary: docs/benchmarks.md).
RUNTIME_BYTES = 450_000_000
#: Resident per entry of a model's tokenizer vocabulary (a fast tokenizer; measured on
#: XLM-R's and BERT's vocabularies: docs/benchmarks.md).
TOKENIZER_ENTRY_BYTES = 1_200
#: Working memory below which a CPU build encodes 4 windows at a time instead of 8.
SMALL_BATCH_BELOW = 300_000_000
#: The least a build is given to work with, whatever the budget says.
MIN_WORKING_BYTES = 150_000_000
#: Tokens a passage is budgeted for (one 384-token window, the models' usual; longer
#: passages make shards proportionally larger).
TOKENS_PER_PASSAGE = 384
#: The largest shard: beyond it a shard only delays the first resumable checkpoint.
MAX_SHARD_SIZE = 500

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bytes(value: str | int | float) -> int:
    """``1.5G``, ``800M``, ``2e9`` or a number of bytes -> bytes."""
    if isinstance(value, int | float):
        n = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)i?b?\s*", value.lower())
        if m is None:
            raise AnygrainError(f"memory budget {value!r}: give bytes, or a number with K, M or G")
        n = float(m.group(1)) * _UNITS[m.group(2)]
    if n <= 0:
        raise AnygrainError(f"memory budget must be positive, got {value!r}")
    return int(n)


def resident_bytes(model: Any) -> int:
    """What a loaded model keeps resident: its weights (each tensor once, however many
    encoders share it) and its tokenizer's vocabulary, plus the runtime."""
    own = getattr(model, "resident_bytes", None)  # a model on its shipped graphs (no torch)
    if own is not None:
        return RUNTIME_BYTES + int(own())
    sizes = {
        t.data_ptr(): t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())
    }
    tokenizer = getattr(model, "tokenizer", None)
    vocab = len(tokenizer) if tokenizer is not None else 0
    return RUNTIME_BYTES + sum(sizes.values()) + vocab * TOKENIZER_ENTRY_BYTES


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


@dataclass(frozen=True)
class BuildBudget:
    """The shares of a build's memory budget (``total`` bytes); ``baseline`` is what is
    resident before the work (:meth:`for_model`)."""

    total: int = DEFAULT_MEMORY_BUDGET
    baseline: int = BASELINE_BYTES

    def for_model(self, model: Any, name: str = "") -> BuildBudget:
        """This budget with the baseline of ``model`` (:func:`resident_bytes`, at least
        ``BASELINE_BYTES``); an error naming the budget needed when the rest is less than
        ``MIN_WORKING_BYTES``."""
        resident = resident_bytes(model)
        if self.total - resident < MIN_WORKING_BYTES:
            need = resident + MIN_WORKING_BYTES
            raise AnygrainError(
                f"memory budget {_gb(self.total)} is too small for a phrase build with "
                f"{name or 'this model'}: the model, its tokenizer and the runtime take about "
                f"{_gb(resident)}, and the build needs at least {_gb(need)} "
                f"(--memory-budget {need / 1e9:.2f}G)"
            )
        return replace(self, baseline=max(self.baseline, resident))

    @property
    def working(self) -> int:
        """What is left for the work once Python, torch and the model are loaded."""
        return max(self.total - self.baseline, MIN_WORKING_BYTES)

    def shard_size(self, dim: int) -> int:
        """Passages per dump shard: a third of the working memory holds a shard's vectors
        (float32 start and end while encoded, then their float16 copies, kept and joined)."""
        per_passage = TOKENS_PER_PASSAGE * dim * (2 * 4 + 2 * 2 + 2 * 2)
        return max(8, min(MAX_SHARD_SIZE, self.working // 3 // per_passage))

    def batch_size(self, device: str | None) -> int:
        """Encoder batch (windows): 8 on a CPU, where larger batches are no faster, or 4
        when the model leaves less than ``SMALL_BATCH_BELOW`` of working memory (a 12-layer
        model's attention over a batch of long windows is large at once); 32 on an accelerator,
        whose memory is not this budget's."""
        if device and device != "cpu":
            return 32
        return 8 if self.working >= SMALL_BATCH_BELOW else 4

    def train_vectors(self, dim: int) -> int:
        """The most FAISS training vectors (float32) held at once: a fifth of the work
        (97k of 384 dimensions at the default: 77 per cell of a 20k-passage index)."""
        return max(10_000, self.working // 5 // (4 * dim))

    def add_vectors(self, dim: int) -> int:
        """Vectors read and added to FAISS at once: a twentieth of the work, as float16 read
        and float32 added (16k of 384 dimensions at the default)."""
        return max(1024, self.working // 20 // (6 * dim))

    @property
    def faiss_block_bytes(self) -> int:
        """The most FAISS codes (and ids) in memory at once: a third of the work."""
        return max(self.working // 3, 16_000_000)
