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
* **Distillation** (optional, a smaller reader learning from a larger one, Hinton et al.
  2015): the KL divergence from the teacher's start and end distributions over each window's
  passage tokens, softened by a temperature, and each passage's selection probability as a
  soft label.
"""

from __future__ import annotations

import torch

__all__ = [
    "selection_bce",
    "selection_distillation",
    "selection_nll",
    "span_distillation",
    "span_marginal_nll",
]

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


def span_distillation(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    teacher_start: torch.Tensor,
    teacher_end: torch.Tensor,
    passage: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Per-window ``T^2 * (KL(teacher || student) of the start + of the end distribution) / 2``
    over the window's passage tokens, both softened by ``temperature``, shape ``(N,)``.
    ``T^2`` keeps the gradients' scale as the temperature changes (Hinton et al. 2015)."""
    has = passage.any(dim=1, keepdim=True)
    valid = passage | ~has  # a window without passage tokens: nothing masked, then zeroed
    t = float(temperature)

    def kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        ls = torch.log_softmax(student.float().masked_fill(~valid, NEG_INF) / t, dim=-1)
        lt = torch.log_softmax(teacher.float().masked_fill(~valid, NEG_INF) / t, dim=-1)
        terms = torch.where(valid, lt.exp() * (lt - ls), torch.zeros_like(ls))
        return terms.sum(dim=-1)

    both = kl(start_logits, teacher_start) + kl(end_logits, teacher_end)
    return both * (t * t / 2) * has.squeeze(1)


def selection_distillation(
    selection_logits: torch.Tensor, teacher_logits: torch.Tensor, present: torch.Tensor
) -> torch.Tensor:
    """Per-example mean KL divergence between the teacher's and the student's "this passage
    holds the answer" probabilities over the passages present, shape ``(B,)`` (the binary
    cross-entropy with the teacher's probability as a soft label, less its entropy, so 0 at
    the teacher): the student's logit learns the teacher's absolute scale, which confidence
    is built from."""
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    teacher = teacher_logits.float()
    labels = torch.sigmoid(teacher)
    loss = bce(selection_logits.float(), labels, reduction="none")
    loss = (loss - bce(teacher, labels, reduction="none")) * present
    return loss.sum(dim=1) / present.sum(dim=1).clamp(min=1)


def hidden_distillation(
    student: tuple[torch.Tensor, ...],
    teacher: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor,
    teacher_layers: list[int],
) -> torch.Tensor:
    """Per-window mean squared error between each student layer's token vectors and those of
    the teacher layer it stands for (TinyBERT's hidden-state loss), shape ``(N,)``.

    Both tuples are the embeddings' output followed by every layer's ``[N, L, width]``;
    student layer ``j`` is matched to teacher layer ``teacher_layers[j]`` (0-based). Pads do
    not count; the embeddings' output is not compared (a student started from the teacher
    shares them)."""
    s_layers = len(student) - 1
    if len(teacher_layers) != s_layers:
        raise ValueError(f"{s_layers} student layers, {len(teacher_layers)} teacher layers")
    mask = attention_mask.to(student[-1].device).float().unsqueeze(-1)  # [N, L, 1]
    tokens = mask.sum(dim=(1, 2)).clamp(min=1) * student[-1].shape[-1]
    per_window = torch.zeros(student[-1].shape[0], device=student[-1].device)
    for j, t in enumerate(teacher_layers):
        diff = (student[j + 1].float() - teacher[t + 1].float()) * mask
        per_window = per_window + diff.pow(2).sum(dim=(1, 2)) / tokens
    return per_window / max(s_layers, 1)
