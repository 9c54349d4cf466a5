"""Contrastive losses for dense retrieval.

``dpr_nll`` is DPR's loss: every question is scored against all passages of the
batch (its own positive, the other questions' positives and every hard negative)
and the negative log-likelihood of its own positive is averaged.  ``full_softmax_nll``
scores against a fixed matrix of (cached) passage vectors, so every passage of the
corpus is a negative -- affordable when only the question side is trained.  Scores are
computed on the questions' device; targets and masks made on the CPU follow them there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
import torch.nn.functional as F


def _masked_ce(
    scores: torch.Tensor, target: torch.Tensor, exclude: torch.Tensor | None
) -> torch.Tensor:
    if exclude is not None:
        # Excluded columns are false negatives (the same passage as the target, seen again).
        scores = scores.masked_fill(exclude.to(scores.device), float("-inf"))
    return F.cross_entropy(scores, target.to(scores.device))


def dpr_nll(
    q: torch.Tensor,
    p_pos: torch.Tensor,
    p_neg_hard: torch.Tensor | None = None,
    *,
    scale: float = 1.0,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean NLL of each question's own positive among ``[p_pos ; p_neg_hard]``.

    ``q`` and ``p_pos`` are ``(B, d)`` with row ``i`` of ``p_pos`` the positive of
    question ``i``; ``p_neg_hard`` is ``(M, d)`` (any number per question).
    ``scale`` multiplies the dot products (1/temperature).  ``exclude`` is a boolean
    ``(B, B + M)`` mask of columns to drop from a row's softmax; it must not cover the target.
    """
    passages = (
        p_pos if p_neg_hard is None or p_neg_hard.shape[0] == 0 else torch.cat([p_pos, p_neg_hard])
    )
    scores = (q @ passages.T) * scale
    target = torch.arange(q.shape[0], device=q.device)
    return _masked_ce(scores, target, exclude)


def full_softmax_nll(
    q: torch.Tensor,
    all_passage_vecs: torch.Tensor,
    target_rows: torch.Tensor,
    *,
    scale: float = 1.0,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean NLL of ``target_rows`` with a softmax over every row of ``all_passage_vecs`` (N, d)."""
    scores = (q @ all_passage_vecs.to(q.device).T) * scale
    return _masked_ce(scores, target_rows.to(torch.long), exclude)


def false_negative_mask(
    positive_ids: list[str],
    column_ids: list[str],
    relevant: Sequence[Collection[str]] | None = None,
) -> torch.Tensor | None:
    """``(B, C)`` mask of columns holding question ``i``'s positive passage other than column ``i``.

    SQuAD-style data has several questions per paragraph, so a batch can hold the same
    passage twice; without the mask the model would be pushed away from a right answer.
    ``relevant[i]`` adds the other passages judged relevant to question ``i`` (qrels):
    another question's positive that question ``i`` also has in its qrels is masked too.
    Returns None when nothing needs masking.
    """
    b, c = len(positive_ids), len(column_ids)
    mask = torch.zeros((b, c), dtype=torch.bool)
    where: dict[str, list[int]] = {}
    for j, pid in enumerate(column_ids):
        where.setdefault(pid, []).append(j)
    for i, pid in enumerate(positive_ids):
        ids = {pid, *(relevant[i] if relevant is not None else ())}
        for one in ids:
            for j in where.get(one, ()):
                if j != i:
                    mask[i, j] = True
    return mask if bool(mask.any()) else None
