"""DensePhrases' training losses (Lee et al., 2021, Sec. 4), each a small pure function.

* :func:`span_ce` -- the single-passage loss (Eq. 5-6): cross-entropy of the gold
  start (or end) over the valid positions of its passage.
* :func:`negatives_ce` -- in-batch and pre-batch negatives (Eq. 8-9): the gold
  start (end) vectors of other questions, and of the C preceding batches, are
  negatives for each question.  Golds from the same passage are masked: they are
  already in the single-passage softmax, and a shared answer would be a false negative.
* :func:`distill_kl` -- distillation (Eq. 7): KL from a cross-attention reader's
  start/end distribution to the phrase model's, over the student's positions.
* :func:`filter_bce` -- the phrase filter: binary cross-entropy of start/end filter
  logits against the gold starts/ends of the passage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

_NEG_INF = -1e9  # masks a logit; finite, so a fully masked row gives no NaN


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~mask, _NEG_INF)


def span_ce(logits: torch.Tensor, mask: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``gold`` positions (B,) over the valid positions ``mask`` (B, T)."""
    return F.cross_entropy(masked_logits(logits, mask), gold)


def negatives_ce(
    q: torch.Tensor,
    pos: torch.Tensor,
    groups: torch.Tensor,
    *,
    in_batch: bool = True,
    extra: torch.Tensor | None = None,
    extra_groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """-log softmax of each question's own gold vector among the negatives.

    ``q`` (B, d) question side, ``pos`` (B, d) gold phrase side; with ``in_batch`` the
    other rows of ``pos`` are negatives; ``extra`` (M, d) are more negatives (the
    pre-batch queue).  Negatives with the question's ``groups`` id (its passage) are
    masked out.
    """
    b = q.shape[0]
    own = (q * pos).sum(-1, keepdim=True)
    cols = [own]
    if in_batch and b > 1:
        logits = q @ pos.T
        same = groups[:, None] == groups[None, :]
        eye = torch.eye(b, dtype=torch.bool, device=q.device)
        logits = logits.masked_fill(same | eye, _NEG_INF)  # own column is ``own``
        cols.append(logits)
    if extra is not None and len(extra):
        ex = q @ extra.T
        if extra_groups is not None:
            ex = ex.masked_fill(groups[:, None] == extra_groups[None, :], _NEG_INF)
        cols.append(ex)
    all_logits = torch.cat(cols, dim=1)
    return F.cross_entropy(all_logits, torch.zeros(b, dtype=torch.long, device=q.device))


def distill_kl(
    student_logits: torch.Tensor, mask: torch.Tensor, teacher: torch.Tensor
) -> torch.Tensor:
    """Mean over the batch of KL(teacher || student) on the valid positions.

    ``teacher`` (B, T) are probabilities (renormalised here over ``mask``, so a teacher
    may put mass on positions the student cannot use); rows with no teacher mass on
    valid positions are skipped.
    """
    t = teacher.clamp(min=0) * mask
    z = t.sum(-1, keepdim=True)
    ok = z.squeeze(-1) > 0
    if not bool(ok.any()):
        return student_logits.sum() * 0.0
    t = t[ok] / z[ok]
    logp = F.log_softmax(masked_logits(student_logits[ok], mask[ok]), dim=-1)
    kl = torch.where(t > 0, t * (torch.log(t.clamp(min=1e-12)) - logp), torch.zeros_like(t))
    return kl.sum(-1).mean()


def filter_bce(logits: torch.Tensor, mask: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of filter ``logits`` (W, T) against ``gold`` (W, T) on ``mask``."""
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits[mask], gold[mask].to(logits.dtype))


class PrebatchQueue:
    """FIFO of the gold start/end vectors of the last ``size`` batches (no gradient)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def push(self, start: torch.Tensor, end: torch.Tensor, groups: torch.Tensor) -> None:
        if self.size <= 0:
            return
        self.items.append((start.detach().clone(), end.detach().clone(), groups.detach().clone()))
        del self.items[: -self.size]

    def __len__(self) -> int:
        return sum(len(g) for _, _, g in self.items)

    def to(self, device: torch.device) -> None:
        """Move the queued vectors (a checkpoint loads them on the CPU)."""
        self.items = [(s.to(device), e.to(device), g.to(device)) for s, e, g in self.items]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(starts, ends, groups)``, oldest batch first; None when empty."""
        if not self.items:
            return None
        return (
            torch.cat([s for s, _, _ in self.items]),
            torch.cat([e for _, e, _ in self.items]),
            torch.cat([g for _, _, g in self.items]),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"size": self.size, "items": [list(t) for t in self.items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.size = int(state["size"])
        self.items = [(t[0], t[1], t[2]) for t in state["items"]]


# --- distillation teachers ---------------------------------------------------------------


# A teacher: a reader that scores answer starts and ends over the student's tokens.  Called
# with a batch of questions, their passages' titles and texts, and the character spans
# ``(T, 2)`` of the student's tokens in each passage window (-1 rows for tokens outside the
# passage text), it returns for each question ``(start_probs, end_probs)``, arrays of length
# ``T`` (they need not sum to 1: they are renormalised over the positions the student can
# use).  :class:`ReaderTeacher` is the one anygrain ships.
Teacher = Callable[
    [Sequence[str], Sequence[str], Sequence[str], Sequence[np.ndarray]],
    Sequence[tuple[np.ndarray, np.ndarray]],
]


def project_char_distribution(
    src_offsets: np.ndarray, src_probs: np.ndarray, dst_offsets: np.ndarray, side: str
) -> np.ndarray:
    """Move a distribution over one tokenization's tokens onto another's, by characters.

    A source start (end) probability goes to the destination token holding that
    token's first (last) character, so a reader with its own tokenizer can teach
    the phrase model.  Mass landing on no destination token is dropped.
    """
    src = np.asarray(src_offsets, dtype=np.int64).reshape(-1, 2)
    dst = np.asarray(dst_offsets, dtype=np.int64).reshape(-1, 2)
    out = np.zeros(len(dst), dtype=np.float64)
    valid_dst = np.flatnonzero(dst[:, 0] >= 0)
    if not len(valid_dst):
        return out
    ds, de = dst[valid_dst, 0], dst[valid_dst, 1]
    order = np.argsort(ds, kind="stable")
    ds, de, vd = ds[order], de[order], valid_dst[order]
    ok = (src[:, 0] >= 0) & (src[:, 1] > src[:, 0])
    chars = src[ok, 0] if side == "start" else src[ok, 1] - 1
    probs = np.asarray(src_probs, dtype=np.float64)[ok]
    j = np.searchsorted(ds, chars, side="right") - 1
    inside = (j >= 0) & (chars < de[np.maximum(j, 0)])
    np.add.at(out, vd[j[inside]], probs[inside])
    return out


class ReaderTeacher:
    """:class:`anygrain.reader.Reader` as a :data:`Teacher`.

    ``distributions(questions, passages, titles)`` gives one object per pair with
    ``project(offsets) -> (start, end)`` (the reader's ``SpanDistributions``): the
    reader's own token distributions moved onto the student's tokens by characters.
    """

    def __init__(self, distributions: Callable[..., Sequence[Any]]) -> None:
        self.distributions = distributions

    @classmethod
    def load(cls, path: str | Path, *, batch_size: int = 32, bf16: bool = False) -> ReaderTeacher:
        from anygrain.reader import Reader, start_end_distributions_many

        reader = Reader.load(path)

        def dists(
            questions: Sequence[str], passages: Sequence[str], titles: Sequence[str]
        ) -> Sequence[Any]:
            return start_end_distributions_many(
                reader, questions, passages, titles, batch_size=batch_size, bf16=bf16
            )

        return cls(dists)

    def __call__(
        self,
        questions: Sequence[str],
        titles: Sequence[str],
        passages: Sequence[str],
        offsets: Sequence[np.ndarray],
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        dists = self.distributions(list(questions), list(passages), list(titles))
        return [tuple(d.project(off)) for d, off in zip(dists, offsets, strict=True)]  # type: ignore[misc]
