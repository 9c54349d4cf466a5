"""A smaller phrase index from a built one: raise the filter threshold without re-encoding.

The dump keeps every token's start/end filter logits (``filter.npy``), so a higher
threshold tau is a subset of the stored tokens: a token stays start-capable when it
was and its start logit passes tau (likewise for ends), and is kept when either
holds.  This turns the filter's trade-off -- vectors per passage against accuracy
(Lee, Wettig & Chen, 2021, Sec. 5) -- into minutes of FAISS building instead of a
new encoding pass over the corpus.  Tokens the source index already dropped are
gone, so tau may only go up.  Logits are compared at their stored float16 precision, so a
token within float16 rounding of tau may differ from a fresh build at that tau.

The new index reuses the source's corpus (by reference) and copies its model, or, when
the source refers to its model by name (a shipped model), refers to it the same way.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import numpy as np

from anygrain.errors import AnygrainError, parse_enum
from anygrain.index.base import Index
from anygrain.index.manifest import check_build_target
from anygrain.phrase.build import (
    SUBDIR,
    THRESHOLD_RANGE,
    PhraseSettings,
    finish_index,
)
from anygrain.phrase.compress import Compress
from anygrain.phrase.dump import DumpStats
from anygrain.phrase.filtering import dump_filter, fraction_threshold, refiltered_flags, subset_dump
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.lexical import SPARSE_SUBDIR
from anygrain.phrase.record import DUMP_FILES, PhraseCounts
from anygrain.utils.atomic import atomic_dir
from anygrain.utils.lock import writer_lock


def _phrase_index(source: str | Path | PhraseIndex) -> PhraseIndex:
    idx = source if isinstance(source, PhraseIndex) else Index.load(Path(source))
    if not isinstance(idx, PhraseIndex):
        raise AnygrainError(f"{source}: not a phrase index (it is {idx.kind.value})")
    return idx


def threshold_for_fraction(index: str | Path | PhraseIndex, fraction: float) -> float:
    """The tau keeping about ``fraction`` of the index's start and end vectors together."""
    return fraction_threshold(*dump_filter(Path(_phrase_index(index).path) / SUBDIR), fraction)


def refilter(
    source: str | Path | PhraseIndex,
    out: str | Path,
    threshold: float | None = None,
    *,
    keep: float | None = None,
    factory: str | None = None,
    compress: Compress | str = Compress.NONE,
    pq_m: int | None = None,
    keep_dump: bool | None = None,
    rescore: int | None = None,
    rescore_margin: float | None = None,
    rescore_tokens: str | None = None,
    rescore_context: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> PhraseIndex:
    """Write a phrase index at filter threshold ``threshold`` from ``source``'s stored tokens,
    or, given ``keep`` instead, at the threshold keeping about that fraction of the vectors.

    ``factory`` is the FAISS factory of the new index (default: chosen by its size and
    ``compress``); ``compress``, ``pq_m``, ``keep_dump`` and ``rescore`` (passages a search
    re-scores exactly by default), ``rescore_margin``, ``rescore_tokens`` and
    ``rescore_context`` (None: the source's) are as for a fresh build.  The
    source must have kept its float16 dump (vectors are copied from it, never re-decoded).
    ``out`` must be new or empty, or an index to replace with ``overwrite``.
    """
    src = _phrase_index(source)
    threshold = _threshold(src, threshold, keep)
    out = Path(out)
    if out.name in ("", ".", ".."):
        out = out.resolve()
    with writer_lock(out, "refiltering an index"):  # one writer per --out
        check_build_target(src.path, out, overwrite=overwrite)
        # the FAISS settings of the new index (checked before any work)
        comp = parse_enum(Compress, compress)
        faiss = PhraseSettings(
            factory=factory,
            compress=comp,
            pq_m=pq_m,
            keep_dump=keep_dump,
            rescore=rescore,
            rescore_margin=rescore_margin,
            rescore_tokens=rescore_tokens,
            rescore_context=rescore_context,
        )
        old = src.record.threshold
        if old is not None and threshold < old:
            raise AnygrainError(
                f"{src.path}: built at threshold {old}; tokens below it were never stored, so "
                f"threshold {threshold} needs a new `anygrain index --threshold {threshold}`"
            )
        with atomic_dir(out) as tmp:
            _write(src, tmp, threshold, faiss, progress=progress)
    idx = Index.load(out)
    assert isinstance(idx, PhraseIndex)
    return idx


def _threshold(src: PhraseIndex, threshold: float | None, keep: float | None) -> float:
    """The refiltered index's threshold: ``threshold``, or the one keeping about ``keep``
    of the vectors (one of them given); refused for a source without its float16 dump."""
    missing = [n for n in DUMP_FILES if not (Path(src.path) / SUBDIR / n).exists()]
    if missing:
        raise AnygrainError(
            f"{src.path}: built without its float16 dump (missing {SUBDIR}/{missing[0]}); "
            "refilter an index built with --keep-dump"
        )
    if (threshold is None) == (keep is None):
        raise AnygrainError("give one of --threshold or --keep (threshold= or keep=)")
    if threshold is not None:
        return float(THRESHOLD_RANGE.check(threshold))
    assert keep is not None
    if not 0 < keep <= 1:
        raise AnygrainError(f"keep must be a fraction above 0 to 1, got {keep!r}")
    return threshold_for_fraction(src, keep)


def _write(
    src: PhraseIndex, tmp: Path, threshold: float, faiss: PhraseSettings, *, progress: bool
) -> None:
    """Write under ``tmp`` the index of ``src``'s tokens passing ``threshold``, its FAISS
    part as ``faiss`` says."""
    sbase = Path(src.path) / SUBDIR
    t0 = time.time()
    tokens = np.load(sbase / "tokens.npy", mmap_mode="r")
    logits = np.load(sbase / "filter.npy", mmap_mode="r")
    flags = refiltered_flags(tokens[:, 3], logits, threshold)
    n_passages = len(src.table.passage_ptr) - 1
    base = tmp / SUBDIR
    base.mkdir(parents=True)
    copied = src.manifest["model"].get("path")
    if copied:  # a model referenced by name ("ref") stays referenced
        shutil.copytree(Path(src.path) / copied, tmp / copied)
    n_kept, n_start, n_end = subset_dump(sbase, base, flags, n_passages, progress=progress)
    stats = DumpStats(
        n_passages=n_passages,
        n_tokens_seen=PhraseCounts.from_manifest(src.manifest["counts"]).tokens_seen,
        n_kept=n_kept,
        n_start=n_start,
        n_end=n_end,
        shards_done_before=0,
    )
    if src.fusion is not None:  # the BM25 part covers the same passages: copied as is
        shutil.copytree(Path(src.path) / SPARSE_SUBDIR, tmp / SPARSE_SUBDIR)
    record = dataclasses.replace(
        src.record.dump_part(),
        threshold=float(threshold),
        # the source's build settings are not how this index was made (its
        # refiltered_from says that)
        build=None,
        refiltered_from={"path": str(src.path), "threshold": src.record.threshold},
    )
    finish_index(
        tmp,
        src.store,
        stats,
        faiss,
        record=record,
        model_info=dict(src.manifest["model"]),
        progress=progress,
        timings={"refilter_seconds": round(time.time() - t0, 3)},
    )
