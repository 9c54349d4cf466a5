"""PhraseEncoder's bfloat16 question encoding on the CPU (what the server runs by default
where the CPU has native bf16): close to float32, weights cast once and cast again when
they change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from anygrain.phrase.model import PhraseEncoder

QUESTIONS = ["Who created Python?", "How far away is Alpha Centauri?"]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_bf16_questions_match_float32_and_follow_the_weights(model_dir: Path) -> None:
    model = PhraseEncoder.load(model_dir)
    qs, qe = model.encode_questions(QUESTIONS)
    bs, be = model.encode_questions(QUESTIONS, bf16=True)
    assert bs.dtype == np.float32 and bs.shape == qs.shape
    assert cosines(bs, qs).min() > 0.999 and cosines(be, qe).min() > 0.999
    copies = model.bf16_questions()
    assert model.bf16_questions() is copies  # cast once, reused
    for m in model.questions:  # the float32 encoders are left as they were
        assert all(p.dtype == torch.float32 for p in m.parameters())
    with torch.no_grad():  # a weight changed in place (fine-tuning): the copies are remade
        next(model.questions[0].parameters()).mul_(0.5)
    assert model.bf16_questions() is not copies
    qs2, _ = model.encode_questions(QUESTIONS)
    bs2, _ = model.encode_questions(QUESTIONS, bf16=True)
    assert cosines(bs2, qs2).min() > 0.999 and not np.allclose(bs2, bs)
