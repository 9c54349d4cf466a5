"""DensePhrases losses checked against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from anygrain.train.phrase.losses import (
    PrebatchQueue,
    ReaderTeacher,
    distill_kl,
    filter_bce,
    negatives_ce,
    project_char_distribution,
    span_ce,
)


def _nll(logits: list[float], target: int) -> float:
    z = math.log(sum(math.exp(x) for x in logits))
    return z - logits[target]


def test_single_passage_ce_is_over_valid_positions_only() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5], [0.0, -1.0, 4.0, 2.0]])
    mask = torch.tensor([[True, True, False, True], [False, True, True, True]])
    gold = torch.tensor([1, 3])
    want = (_nll([1.0, 2.0, 0.5], 1) + _nll([-1.0, 4.0, 2.0], 2)) / 2
    assert abs(float(span_ce(logits, mask, gold)) - want) < 1e-5


def test_in_batch_negatives_mask_same_passage() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pos = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, -1.0]])
    groups = torch.tensor([0, 0, 1])  # questions 0 and 1 share a passage
    s = q @ pos.T
    want = (
        _nll([s[0, 0].item(), s[0, 2].item()], 0)  # q0: own, negative from passage 1
        + _nll([s[1, 1].item(), s[1, 2].item()], 0)
        + _nll([s[2, 2].item(), s[2, 0].item(), s[2, 1].item()], 0)
    ) / 3
    assert abs(float(negatives_ce(q, pos, groups)) - want) < 1e-5


def test_pre_batch_negatives_add_columns_and_mask_their_passages() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pos = torch.tensor([[1.0, 1.0], [0.5, 2.0]])
    groups = torch.tensor([0, 1])
    extra = torch.tensor([[3.0, 0.0], [0.0, -1.0]])
    extra_groups = torch.tensor([5, 1])  # the second pre-batch gold is question 1's passage
    s = q @ pos.T
    x = q @ extra.T
    want = (
        _nll([s[0, 0].item(), s[0, 1].item(), x[0, 0].item(), x[0, 1].item()], 0)
        + _nll([s[1, 1].item(), s[1, 0].item(), x[1, 0].item()], 0)
    ) / 2
    got = negatives_ce(q, pos, groups, extra=extra, extra_groups=extra_groups)
    assert abs(float(got) - want) < 1e-5
    # Without in-batch negatives only the pre-batch ones remain.
    want_pb = (
        _nll([s[0, 0].item(), x[0, 0].item(), x[0, 1].item()], 0)
        + _nll([s[1, 1].item(), x[1, 0].item()], 0)
    ) / 2
    got_pb = negatives_ce(q, pos, groups, in_batch=False, extra=extra, extra_groups=extra_groups)
    assert abs(float(got_pb) - want_pb) < 1e-5


def test_prebatch_queue_is_a_fifo_of_the_last_c_batches() -> None:
    qu = PrebatchQueue(2)
    assert qu.tensors() is None
    for b in range(3):
        v = torch.full((b + 1, 2), float(b), requires_grad=True)
        qu.push(v, -v, torch.full((b + 1,), b))
    s, e, g = qu.tensors()  # type: ignore[misc]
    assert g.tolist() == [1, 1, 2, 2, 2]  # batch 0 fell out; oldest first
    assert torch.equal(e, -s) and not s.requires_grad
    restored = PrebatchQueue(0)
    restored.load_state_dict(qu.state_dict())
    assert torch.equal(restored.tensors()[0], s)  # type: ignore[index]
    off = PrebatchQueue(0)
    off.push(s, e, g)
    assert off.tensors() is None and len(off) == 0


def test_distillation_kl_against_a_teacher_distribution() -> None:
    student = torch.tensor([[0.0, 1.0, 2.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])
    teacher = torch.tensor([[0.2, 0.2, 0.4, 0.2]])  # mass on a masked position is dropped
    t = np.array([0.25, 0.25, 0.5])
    logp = np.array([0.0, 1.0, 2.0]) - math.log(sum(math.exp(x) for x in (0.0, 1.0, 2.0)))
    want = float((t * (np.log(t) - logp)).sum())
    assert abs(float(distill_kl(student, mask, teacher)) - want) < 1e-5
    # Same distributions: zero; no teacher mass: the row is skipped.
    same = torch.log(torch.tensor([[0.25, 0.25, 0.5, 1.0]]))
    assert abs(float(distill_kl(same, mask, teacher))) < 1e-6
    assert float(distill_kl(student, mask, torch.zeros(1, 4))) == 0.0


def test_filter_bce_by_hand() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    mask = torch.tensor([[True, True, False]])
    gold = torch.tensor([[True, False, True]])

    def bce(x: float, y: int) -> float:
        p = 1 / (1 + math.exp(-x))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    want = (bce(2.0, 1) + bce(-1.0, 0)) / 2
    assert abs(float(filter_bce(logits, mask, gold)) - want) < 1e-6


def test_reader_distributions_project_onto_student_tokens() -> None:
    # Reader tokens: "New York" as one token (0,8), "city" (9,13); student: "new" "york" "city".
    src = np.array([[0, 8], [9, 13]])
    dst = np.array([[-1, -1], [0, 3], [4, 8], [9, 13], [-1, -1]])
    starts = project_char_distribution(src, np.array([0.7, 0.3]), dst, "start")
    ends = project_char_distribution(src, np.array([0.6, 0.4]), dst, "end")
    assert starts.tolist() == [0.0, 0.7, 0.0, 0.3, 0.0]
    assert ends.tolist() == [0.0, 0.0, 0.6, 0.4, 0.0]

    # The reader's own distributions plug in through ReaderTeacher.
    reader = pytest.importorskip("anygrain.reader")
    d = reader.SpanDistributions(
        offsets=src,
        start_logits=np.log([0.7, 0.3]),
        end_logits=np.log([0.6, 0.4]),
        selection_logit=0.0,
    )
    calls: list[tuple[list[str], list[str], list[str]]] = []

    def dists(questions, passages, titles):  # type: ignore[no-untyped-def]
        calls.append((questions, passages, titles))
        return [d for _ in questions]

    ((ps, pe),) = ReaderTeacher(dists)(["q"], ["t"], ["New York city"], [dst])
    assert calls == [(["q"], ["New York city"], ["t"])]
    np.testing.assert_allclose(ps, starts, atol=1e-6)
    np.testing.assert_allclose(pe, ends, atol=1e-6)
