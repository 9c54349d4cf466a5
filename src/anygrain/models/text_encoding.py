"""A bi-encoder's sides encoding texts, whichever runtime runs them (torch or ONNX Runtime).

:class:`TextEncoding` is what both runtimes' sides share: texts tokenized, sorted longest
first so a batch holds texts of similar length (little compute goes to padding), encoded a
batch at a time and put back in input order, float32, checked finite.  Each runtime says how
it tokenizes (:meth:`TextEncoding.token_rows`) and runs a batch
(:meth:`TextEncoding.run_rows`): :class:`~anygrain.models.encoder.TextEncoder` (torch) and
:class:`~anygrain.dense.onnx.OnnxTextEncoder`.  :class:`BiEncoding` is the two sides'
``encode_questions`` / ``encode_passages``.  Imports neither torch nor transformers: a
dense index opens its questions on ONNX Runtime without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from anygrain.models.encoder_config import EncoderConfig
from anygrain.utils.finite import check_finite
from anygrain.utils.progress import progress_bar

#: rows of token ids (or of token type ids), one a text
TokenRows = list[Sequence[int]]


class TextEncoding:
    """One side of a bi-encoder: :meth:`encode` over the runtime's :meth:`token_rows` and
    :meth:`run_rows`."""

    config: EncoderConfig
    name: str  # what errors call the model (its hub name or directory)
    side: str  # what errors call its vectors

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def token_rows(
        self, texts: Sequence[str], titles: Sequence[str] | None
    ) -> tuple[TokenRows, TokenRows | None]:
        """The token ids of each text (prefixed, ``title [SEP] text`` with only the text
        truncated) and, where the model takes them, its token type ids."""
        raise NotImplementedError

    def run_rows(self, ids: TokenRows, types: TokenRows | None, bf16: bool) -> np.ndarray:
        """The vectors of a batch of rows, longest first: ``(len(ids), dim)``."""
        raise NotImplementedError

    def encode(
        self,
        texts: Sequence[str],
        titles: Sequence[str] | None = None,
        *,
        batch_size: int = 64,
        progress: bool = False,
        desc: str = "encoding",
        bf16: bool = False,
    ) -> np.ndarray:
        """Vectors for ``texts`` (float32, input order); batches hold texts of similar length
        so little compute goes to padding.  ``progress`` shows a bar (``desc``) over the
        batches; ``bf16`` computes in bfloat16 where the runtime does (torch)."""
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        ids, types = self.token_rows(texts, titles)
        order = np.argsort([-len(x) for x in ids], kind="stable")
        batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
        for b in progress_bar(batches, desc=desc, unit="batch", disable=not progress):
            rows_types = None if types is None else [types[i] for i in b]
            out[b] = self.run_rows([ids[i] for i in b], rows_types, bf16)
        return check_finite(out, self.name, self.side)


class BiEncoding:
    """``encode_questions`` / ``encode_passages`` of a bi-encoder's two sides."""

    question: TextEncoding
    passage: TextEncoding

    def encode_questions(self, texts: Sequence[str], **kw: Any) -> np.ndarray:
        return self.question.encode(texts, desc="encoding questions", **kw)

    def encode_passages(
        self, texts: Sequence[str], titles: Sequence[str] | None = None, **kw: Any
    ) -> np.ndarray:
        return self.passage.encode(texts, titles, desc="encoding passages", **kw)
