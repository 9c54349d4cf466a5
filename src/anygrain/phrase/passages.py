"""Passages into per-token phrase vectors, whichever runtime runs the encoder.

A passage is cut into token windows (:func:`anygrain.phrase.tokens.tokenize_windows`);
windows are encoded in batches sorted by length, so a batch holds little padding; a token
seen by several windows takes its vectors from the one giving it most context; the tokens
come back per passage in text order (:class:`EncodedPassage`).  :func:`encode_windows` does
all of that around a ``forward`` that maps a batch of windows to its start vectors, end
vectors and filter logits: torch's (:meth:`anygrain.phrase.model.PhraseEncoder.window_forward`)
or an exported graph's on ONNX Runtime (:class:`anygrain.phrase.onnx.OnnxPassageEncoder`),
both :class:`PassageEncoding`, whose ``encode_passages`` calls it.
NumPy only: a dump on ONNX Runtime imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from anygrain.encode.onnx_runtime import pad_batch
from anygrain.phrase.tokens import TOKEN_MARKS, TokenMarks, Window, best_windows
from anygrain.utils.finite import check_finite
from anygrain.utils.progress import progress_counter

#: a batch of windows -> (start (B, T, d), end (B, T, d), filter logits (B, T, 2)), float32
WindowForward = Callable[[Sequence[Window]], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(kw_only=True)
class EncodedPassage(TokenMarks):
    """One passage's tokens (in text order): their :class:`~anygrain.phrase.tokens.TokenMarks`
    with their vectors and filter logits."""

    start: np.ndarray  # (n, d) float32
    end: np.ndarray  # (n, d) float32
    filter_logits: np.ndarray  # (n, 2) float32: start, end

    def __len__(self) -> int:
        return len(self.cs)


class PassageEncoding:
    """What encodes a dump's passages: the phrase model (torch) or its passage graph (ONNX
    Runtime).  Each cuts passages into windows (:meth:`windows`) and encodes a batch of
    windows (:meth:`window_forward`); :meth:`encode_passages` is theirs in common."""

    @property
    def dim(self) -> int:
        raise NotImplementedError

    @property
    def model_name(self) -> str:
        """What a non-finite output's error names (the model's name)."""
        raise NotImplementedError

    def windows(self, texts: Sequence[str], titles: Sequence[str] | None = None) -> list[Window]:
        raise NotImplementedError

    def window_forward(self, *, bf16: bool, cast_once: bool) -> WindowForward:
        """What encodes a batch of windows, in bfloat16 when ``bf16`` (``cast_once``: from a
        copy of the encoder cast to bfloat16 once), or an error when that cannot be done."""
        raise NotImplementedError

    def encode_passages(
        self,
        texts: Sequence[str],
        titles: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
        bf16: bool = False,
        progress: bool = False,
        desc: str = "encoding phrases",
        cast_once: bool = False,
    ) -> list[EncodedPassage]:
        """Every passage token's start/end vectors and filter logits, in text order
        (:func:`encode_windows`: windows batched by length; a token seen by several windows
        takes its vectors from the one giving it most context).  ``progress`` shows a bar
        (``desc``) counting passages, with an ETA.  ``bf16`` and ``cast_once``: as
        :meth:`window_forward` takes them."""
        forward = self.window_forward(bf16=bf16, cast_once=cast_once)
        return encode_windows(
            self.windows(texts, titles),
            len(texts),
            forward,
            dim=self.dim,
            name=self.model_name,
            batch_size=batch_size,
            progress=progress,
            desc=desc,
        )


def collate_windows(windows: Sequence[Window], pad_id: int) -> dict[str, np.ndarray]:
    """Windows padded into int64 arrays: ``input_ids``, ``attention_mask`` and, when the
    windows have them, ``token_type_ids``."""
    types = [w.token_type_ids for w in windows] if windows[0].token_type_ids is not None else None
    return pad_batch([w.input_ids for w in windows], pad_id, types)


def encode_windows(
    wins: Sequence[Window],
    n_passages: int,
    forward: WindowForward,
    *,
    dim: int,
    name: str,
    batch_size: int = 32,
    progress: bool = False,
    desc: str = "encoding phrases",
) -> list[EncodedPassage]:
    """The :class:`EncodedPassage` of each of ``n_passages`` passages cut into ``wins``
    (windows in passage order), ``forward`` encoding ``batch_size`` windows at a time,
    longest first.  ``name`` (the model's) is what a non-finite output's error names;
    ``progress`` shows a bar (``desc``) counting passages, each once its last window is
    encoded, with an ETA."""
    d = dim
    vec_s: list[np.ndarray] = [np.zeros((0, d), np.float32)] * len(wins)
    vec_e: list[np.ndarray] = [np.zeros((0, d), np.float32)] * len(wins)
    logit: list[np.ndarray] = [np.zeros((0, 2), np.float32)] * len(wins)
    by_passage: list[list[int]] = [[] for _ in range(n_passages)]
    for wi, w in enumerate(wins):
        by_passage[w.passage].append(wi)
    owned: list[np.ndarray] = [np.zeros(0, np.int64)] * len(wins)
    for ids in by_passage:
        for wi, pos in zip(ids, best_windows([wins[i] for i in ids]), strict=True):
            owned[wi] = pos
    # longest first: a batch's windows are of about one length, so little is padding
    order = np.argsort([-len(w) for w in wins], kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    left = [len(ids) for ids in by_passage]  # windows of each passage not encoded yet
    bar = progress_counter(desc=desc, unit="passage", total=n_passages, disable=not progress)
    # a passage with no window (empty text) has nothing to wait for
    bar.update(sum(1 for n in left if n == 0))
    try:
        for b in batches:
            s, e, f = forward([wins[i] for i in b])
            for arr, what in ((s, "phrase start"), (e, "phrase end"), (f, "filter logit")):
                check_finite(arr, name, what)
            done = 0
            for r, wi in enumerate(b):
                pos = owned[wi]
                vec_s[wi], vec_e[wi], logit[wi] = s[r, pos], e[r, pos], f[r, pos]
                left[wins[wi].passage] -= 1
                done += left[wins[wi].passage] == 0
            bar.update(done)
    finally:
        bar.close()
    out: list[EncodedPassage] = []
    none = np.zeros((0, d), np.float32)
    for ids in by_passage:
        parts = [(wins[i], owned[i], i) for i in ids]
        cat = {
            key: np.concatenate([getattr(w, key)[pos] for w, pos, _ in parts])
            for key in TOKEN_MARKS
        }
        s_all = np.concatenate([vec_s[i] for _, _, i in parts])
        e_all = np.concatenate([vec_e[i] for _, _, i in parts])
        f_all = np.concatenate([logit[i] for _, _, i in parts])
        for _, _, i in parts:  # each window's vectors freed as its passage is made,
            vec_s[i] = vec_e[i] = logit[i] = none  # so they are never held twice
        order_t = np.argsort(cat["cs"], kind="stable")
        out.append(
            EncodedPassage(
                **{k: v[order_t] for k, v in cat.items()},
                start=s_all[order_t],
                end=e_all[order_t],
                filter_logits=f_all[order_t],
            )
        )
    return out
