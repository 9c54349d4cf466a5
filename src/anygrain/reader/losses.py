"""The reader's training objective (DPR section 6): span marginal likelihood + passage selection.

* **Span loss** on the positive passage: ``-log sum_{(s, e) in gold} P_start(s) P_end(e)``,
  summing over *every* span that matches a gold answer (an answer may occur more
  than once, and SQuAD-style data lists several annotators' answers), so the
  model is not forced to pick one arbitrary occurrence.  ``P_start`` and
  ``P_end`` are softmaxes over the passage tokens only.
* **Selection loss**: cross-entropy of the positive (column 0) under the softmax of
  the selection logits over the question's passages.
* **Selection BCE** (optional): each passage's selection logit as the log-odds that it holds
  an answer (the positive: yes; the negatives, which hold none: no), so the logit means the
  same across questions and a low one says "not in these passages".
"""

from __future__ import annotations

import torch

__all__ = ["selection_bce", "selection_nll", "span_marginal_nll"]

NEG_INF = float("-inf")


def span_marginal_nll(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    passage: torch.Tensor,
    gold_starts: torch.Tensor,
    gold_ends: torch.Tensor,
    gold_mask: torch.Tensor,
) -> torch.Tensor:
    """Per-example span loss, shape ``(B,)``.

    ``start_logits``/``end_logits``/``passage`` are ``[B, L]``; ``gold_starts``,
    ``gold_ends``, ``gold_mask`` are ``[B, G]`` (padded lists of gold token spans).
    An example with no gold span contributes 0 (it is counted by the caller).
    """
    has = gold_mask.any(dim=1)
    # Rows with no gold span are left unmasked so nothing below is NaN, then zeroed.
    valid = passage | ~has.unsqueeze(1)
    ls = torch.log_softmax(start_logits.float().masked_fill(~valid, NEG_INF), dim=-1)
    le = torch.log_softmax(end_logits.float().masked_fill(~valid, NEG_INF), dim=-1)
    ll = ls.gather(1, gold_starts.clamp(min=0)) + le.gather(1, gold_ends.clamp(min=0))
    ll = ll.masked_fill(~gold_mask, NEG_INF).masked_fill(~has.unsqueeze(1), 0.0)
    return -torch.logsumexp(ll, dim=1) * has


def selection_nll(selection_logits: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Per-example selection loss, shape ``(B,)``; the positive is column 0 of ``[B, m]``
    and ``present`` masks passages a question did not get (fewer negatives)."""
    logits = selection_logits.float().masked_fill(~present, NEG_INF)
    return -torch.log_softmax(logits, dim=1)[:, 0]


def selection_bce(selection_logits: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Per-example mean binary cross-entropy over the passages present, shape ``(B,)``: the
    positive (column 0 of ``[B, m]``) is labelled 1, every negative 0."""
    logits = selection_logits.float()
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    loss = loss * present
    return loss.sum(dim=1) / present.sum(dim=1).clamp(min=1)
