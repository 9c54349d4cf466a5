"""Adding vectors to a FAISS index in batches, so memory stays bounded by one batch."""

from __future__ import annotations

from typing import Any, cast

import faiss
import numpy as np

from anygrain.utils.progress import progress_bar
from anygrain.vectors.sources import RangeVectorSource, VectorSource


def add_vectors(
    index: faiss.Index,
    src: VectorSource,
    lo: int,
    hi: int,
    add_batch: int,
    progress: bool,
    *,
    with_ids: bool = False,
) -> None:
    """Add vectors ``lo:hi`` of ``src`` to ``index`` in batches (``with_ids``: with their
    positions in ``src`` as ids, for a block of a larger index)."""
    ivf = _array_ivf(index)
    if ivf is not None and not ivf.ntotal:
        _add_reserved(index, ivf, src, lo, hi, add_batch, progress, with_ids=with_ids)
        return
    for i, batch in _progress(_batches(src, lo, hi, add_batch), hi - lo, add_batch, progress):
        x = np.ascontiguousarray(batch, dtype=np.float32)
        if with_ids:
            index.add_with_ids(x, np.arange(i, i + len(x), dtype=np.int64))
        else:
            index.add(x)


def _progress(batches: Any, n: int, add_batch: int, progress: bool) -> Any:
    return progress_bar(
        batches,
        desc="adding to FAISS",
        unit="batch",
        total=-(-n // add_batch),
        disable=not progress,
    )


def _array_ivf(index: faiss.Index) -> Any:
    """The IVF index ``index`` is, or is under pre-transforms (OPQ), when its lists are plain
    in-memory arrays; else None (an id map, say, keeps ids of its own: it adds as usual)."""
    ivf = faiss.downcast_index(index)
    if isinstance(ivf, faiss.IndexPreTransform):
        ivf = faiss.downcast_index(ivf.index)
    if not isinstance(ivf, faiss.IndexIVF):
        return None
    lists = ivf.invlists
    if lists is None:
        return None
    return (
        ivf if isinstance(faiss.downcast_InvertedLists(lists), faiss.ArrayInvertedLists) else None
    )


def _batches(src: VectorSource, lo: int, hi: int, add_batch: int) -> Any:
    if lo or hi < len(src):
        return cast(RangeVectorSource, src).iter_batches(add_batch, start=lo, stop=hi)
    return src.iter_batches(add_batch)


def _add_reserved(
    index: faiss.Index,
    ivf: Any,
    src: VectorSource,
    lo: int,
    hi: int,
    add_batch: int,
    progress: bool,
    *,
    with_ids: bool,
) -> None:
    """:func:`add_vectors` into an empty IVF index, each inverted list allocated once at its
    final size.

    Appending one batch at a time grows each list's arrays by doubling, so the codes took up
    to twice their size.  The
    vectors are assigned to their lists first (8 bytes each), each list reserved at its
    count, then encoded with those assignments: the coarse quantizer runs once, as before.
    """
    chain: list[Any] = []  # the pre-transforms (OPQ): the IVF index's inputs are their outputs
    if isinstance(index, faiss.IndexPreTransform):
        vts: Any = index.chain  # a SWIG vector (the stubs say list)
        chain = [vts.at(j) for j in range(vts.size())]

    def coarse(batch: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(batch, dtype=np.float32)
        for vt in chain:
            x = vt.apply(x)
        return x

    n = hi - lo
    assign = np.empty(n, dtype=np.int64)
    for i, batch in _batches(src, lo, hi, add_batch):
        x = np.ascontiguousarray(coarse(batch))
        assign[i - lo : i - lo + len(x)] = ivf.quantizer.assign(x, 1).ravel()
    counts = np.bincount(assign, minlength=ivf.nlist)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    for list_no in np.flatnonzero(counts):
        # resize allocates exactly; shrinking back keeps the capacity for the appends below
        lists.resize(int(list_no), int(counts[list_no]))
        lists.resize(int(list_no), 0)
    for i, batch in _progress(_batches(src, lo, hi, add_batch), n, add_batch, progress):
        x = np.ascontiguousarray(coarse(batch))
        first = i if with_ids else int(ivf.ntotal)
        ids = np.arange(first, first + len(x), dtype=np.int64)
        idx = np.ascontiguousarray(assign[i - lo : i - lo + len(x)])
        ivf.add_core(len(x), faiss.swig_ptr(x), faiss.swig_ptr(ids), faiss.swig_ptr(idx))
    index.ntotal = ivf.ntotal
