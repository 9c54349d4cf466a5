"""A tiny random bi-encoder for tests: real tokenizer and code paths, milliseconds per batch.

The weights are random, so vectors are meaningless but deterministic for a seed;
tests that need sensible rankings use the real ``minilm`` alias instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import faiss
import torch

from anygrain.models.biencoder import BiEncoder, BiEncoderConfig
from anygrain.models.encoder import EncoderConfig, Pooling, TextEncoder
from anygrain.models.resolve import resolve_model


@contextmanager
def single_threaded() -> Iterator[None]:
    """One torch and one FAISS thread: on a small, shared machine their thread pools spin-wait
    on each other, making tiny tests tens of times slower; results are the same."""
    nt, nf = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(nt)
        faiss.omp_set_num_threads(nf)


def tiny_tokenizer() -> Any:
    """The all-MiniLM-L6-v2 WordPiece tokenizer (from the offline ``minilm`` package)."""
    from transformers import AutoTokenizer

    path, _ = resolve_model("minilm")
    return AutoTokenizer.from_pretrained(str(path))


def tiny_biencoder(
    seed: int = 0,
    *,
    hidden_size: int = 32,
    layers: int = 2,
    shared: bool = True,
    normalize: bool = True,
    pooling: Pooling = Pooling.MEAN,
    max_length: int = 128,
    tokenizer: Any = None,
) -> BiEncoder:
    """A random BertModel (``hidden_size``-d) wrapped as a :class:`BiEncoder`."""
    from transformers import BertConfig, BertModel

    tok = tokenizer or tiny_tokenizer()
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=max(512, max_length),
    )
    torch.manual_seed(seed)
    qm = BertModel(cfg).eval()
    pm = qm if shared else BertModel(cfg).eval()
    qcfg = EncoderConfig(pooling, normalize, "", min(64, max_length))
    pcfg = EncoderConfig(pooling, normalize, "", max_length)
    config = BiEncoderConfig(
        base_model=f"tiny-bert-{seed}", shared=shared, question=qcfg, passage=pcfg
    )
    return BiEncoder(TextEncoder(qm, tok, qcfg), TextEncoder(pm, tok, pcfg), config)
