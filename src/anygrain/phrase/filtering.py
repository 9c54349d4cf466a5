"""The phrase filter on a dump: a higher threshold, or a keep fraction, applied to stored tokens.

The dump keeps every stored token's start/end filter logits (``filter.npy``), so a higher
threshold tau selects a subset of the tokens: a token stays start-capable when it was and
its start logit passes tau (likewise for ends), and is kept when either holds.  A keep
fraction is the tau that keeps about that fraction of the start and end vectors together
(Lee, Wettig & Chen, 2021, Sec. 5: vectors per passage against accuracy).  Both a fresh
build (``PhraseSettings.keep``) and ``anygrain refilter`` use these functions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anygrain.encode.npy import drop_pages
from anygrain.errors import AnygrainError
from anygrain.phrase.dump import END_OK, START_OK
from anygrain.utils.progress import progress_bar

CHUNK = 65536  # tokens copied per step: bounded memory whatever the index size
DUMP_ARRAYS = ("start", "end", "tokens", "filter")


def refiltered_flags(flags: np.ndarray, logits: np.ndarray, threshold: float) -> np.ndarray:
    """New START_OK/END_OK flags: the old ones where the start/end filter logit passes tau."""
    f = np.asarray(flags)
    lg = np.asarray(logits, dtype=np.float32)
    s = ((f & START_OK) > 0) & (lg[:, 0] >= threshold)
    e = ((f & END_OK) > 0) & (lg[:, 1] >= threshold)
    return (s.astype(np.int32) * START_OK + e.astype(np.int32) * END_OK).astype(np.int32)


def dump_filter(base: Path) -> tuple[np.ndarray, np.ndarray]:
    """The stored tokens' START_OK/END_OK flags and float32 start/end filter logits of the
    dump in ``base`` (``tokens.npy`` column 3, ``filter.npy``)."""
    tokens = np.load(base / "tokens.npy", mmap_mode="r")
    logits = np.load(base / "filter.npy", mmap_mode="r")
    out = np.array(tokens[:, 3]), np.array(logits, dtype=np.float32)
    drop_pages(tokens)
    return out


def fraction_threshold(flags: np.ndarray, logits: np.ndarray, fraction: float) -> float:
    """The tau keeping about ``fraction`` of the start and end vectors that ``flags`` allow,
    by their filter ``logits``."""
    if not 0 < fraction <= 1:
        raise AnygrainError(f"keep fraction must be in (0, 1], not {fraction}")
    vals = np.concatenate([logits[(flags & START_OK) > 0, 0], logits[(flags & END_OK) > 0, 1]])
    if len(vals) == 0:
        raise AnygrainError("no phrase vectors to keep a fraction of")
    return float(np.quantile(vals, 1.0 - fraction))


def subset_dump(
    src: Path, dst: Path, flags: np.ndarray, n_passages: int, *, progress: bool = False
) -> tuple[int, int, int]:
    """Copy the tokens of the dump in ``src`` whose new ``flags`` are non-zero into ``dst``
    (its arrays, with the new flags, and ``passage_ptr.npy``), chunk by chunk; returns
    ``(tokens kept, start vectors, end vectors)``."""
    kept = np.flatnonzero(flags > 0)
    tokens = np.load(src / "tokens.npy", mmap_mode="r")
    dst.mkdir(parents=True, exist_ok=True)
    for name in DUMP_ARRAYS:
        arr = np.load(src / f"{name}.npy", mmap_mode="r")
        out = np.lib.format.open_memmap(
            dst / f"{name}.npy", mode="w+", dtype=arr.dtype, shape=(len(kept), *arr.shape[1:])
        )
        chunks = range(0, len(kept), CHUNK)
        for i in progress_bar(chunks, desc=f"copying {name}", disable=not progress):
            part = np.asarray(arr[kept[i : i + CHUNK]])
            if name == "tokens":
                part = part.copy()
                part[:, 3] = flags[kept[i : i + CHUNK]]
            out[i : i + len(part)] = part
            drop_pages(arr)  # both maps would otherwise keep the whole dump resident
            drop_pages(out)
        out.flush()
        del out
    rows = np.asarray(tokens[kept, 0], dtype=np.int64)
    ptr = np.zeros(n_passages + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_passages), out=ptr[1:])
    np.save(dst / "passage_ptr.npy", ptr)
    kept_flags = flags[kept]
    return (
        len(kept),
        int(np.count_nonzero(kept_flags & START_OK)),
        int(np.count_nonzero(kept_flags & END_OK)),
    )
