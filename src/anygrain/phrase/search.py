"""Phrase search over stored token vectors: MIPS candidates, exact span scoring, unit grains.

For each question, the top starts (by ``q_start``) and top ends (by ``q_end``) come
from two MIPS searches.  Each start candidate is paired with its best end -- a
stored end token of the same passage, at or after it, the phrase spanning at most
``L`` words -- and each end candidate with its best start, all scored exactly from
the stored vectors.  The two lists are merged and de-duplicated (DensePhrases'
search).  Every step past FAISS is a handful of numpy operations over the candidates'
windows; tokens are sorted by passage then position, so a window is a contiguous
range found once per ``L`` by binary search.

Coarser units (Lee, Wettig & Chen, 2021) score a sentence, passage or document by
the best phrase inside it: the max over the retrieved phrases it contains.

With ``scope_rows`` (reading comprehension, D = {p}) a question is searched only in
the given passages, exhaustively: every stored start is paired with its best end and
every end with its best start, so the top phrase is the best one in the scope.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anygrain.corpus.store import CorpusStore
from anygrain.hits.hit import Hit, Unit
from anygrain.phrase.dump import END_OK, START_OK

_BIG = np.int64(1) << np.int64(31)  # row stride in the (row, word) sort keys
_NEG = np.float32(-np.inf)


@dataclass
class Phrases:
    """Scored phrases of one question: token indices of start and end, best first."""

    start: np.ndarray  # (m,) int64 token index
    end: np.ndarray  # (m,) int64 token index
    score: np.ndarray  # (m,) float32

    def __len__(self) -> int:
        return len(self.score)

    @classmethod
    def empty(cls) -> Phrases:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


class PhraseTable:
    """The stored tokens of a phrase index: vectors memory-mapped, metadata in memory."""

    def __init__(
        self,
        start: np.ndarray,
        end: np.ndarray,
        tokens: np.ndarray,
        passage_ptr: np.ndarray,
    ) -> None:
        self.start = start
        self.end = end
        t = np.asarray(tokens)
        self.row = t[:, 0].astype(np.int64)
        self.cs = t[:, 1].astype(np.int64)
        self.ce = t[:, 2].astype(np.int64)
        flags = t[:, 3]
        self.start_ok = (flags & START_OK) > 0
        self.end_ok = (flags & END_OK) > 0
        self.wfirst = t[:, 4].astype(np.int64)
        self.wlast = t[:, 5].astype(np.int64)
        self.passage_ptr = np.asarray(passage_ptr, dtype=np.int64)
        self._key_first = self.row * _BIG + self.wfirst
        self._key_last = self.row * _BIG + self.wlast
        self._bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.row)

    def bounds(self, max_words: int) -> tuple[np.ndarray, np.ndarray]:
        """``(end_hi, start_lo)``: for token t, ends lie in [t, end_hi[t]) and starts in
        [start_lo[t], t] -- same passage, phrase at most ``max_words`` words."""
        if max_words not in self._bounds:
            hi = np.searchsorted(self._key_last, self._key_first + max_words, side="left")
            lo = np.searchsorted(self._key_first, self._key_last - max_words + 1, side="left")
            idx = np.arange(len(self))
            self._bounds[max_words] = (np.maximum(hi, idx), np.minimum(lo, idx + 1))
        return self._bounds[max_words]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flatten ranges [lo_i, hi_i) into ``(indices, owner)``."""
    lens = np.maximum(hi - lo, 0)
    total = int(lens.sum())
    owner = np.repeat(np.arange(len(lo)), lens)
    offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return np.repeat(lo, lens) + offs, owner


def _segment_best(scores: np.ndarray, owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Max score and its flat position per owner (owners sorted); -inf / -1 for empty ones."""
    best = np.full(n, _NEG, dtype=np.float32)
    arg = np.full(n, -1, dtype=np.int64)
    if not len(scores):
        return best, arg
    seg = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    best[owner[seg]] = np.maximum.reduceat(scores, seg)
    pos = np.flatnonzero(scores == best[owner])
    # The first maximal position of each owner (positions and owners are both ordered).
    keep = np.r_[True, owner[pos][1:] != owner[pos][:-1]]
    arg[owner[pos[keep]]] = pos[keep]
    return best, arg


def exact_scores(vectors: np.ndarray, idx: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Inner products of stored float16 rows ``idx`` with ``q`` (float32), each distinct row
    read once, in sorted order (memory-map friendly).

    The float16 -> float32 conversion goes through torch when a model has imported it:
    numpy's is slower.  A search whose questions ONNX Runtime encodes never imports
    torch for it (the scores agree to ~1e-6).
    """
    if not len(idx):
        return np.zeros(0, dtype=np.float32)
    uniq, inv = np.unique(idx, return_inverse=True)
    torch = sys.modules.get("torch")
    rows = np.ascontiguousarray(vectors[uniq])
    qf = np.ascontiguousarray(q, dtype=np.float32)
    if torch is None:
        out = rows.astype(np.float32) @ qf
    else:
        out = (torch.from_numpy(rows).float() @ torch.from_numpy(qf)).numpy()
    return out[inv]


def _pair(
    anchors: np.ndarray,
    anchor_scores: np.ndarray,
    flat: np.ndarray,
    owner: np.ndarray,
    flat_scores: np.ndarray,
    anchors_are_starts: bool,
) -> Phrases:
    """Each anchor with the best partner among its window's tokens; anchors without one drop."""
    best, arg = _segment_best(flat_scores.astype(np.float32), owner, len(anchors))
    has = arg >= 0
    a, b = anchors[has].astype(np.int64), flat[arg[has]].astype(np.int64)
    score = (anchor_scores[has] + best[has]).astype(np.float32)
    return Phrases(a, b, score) if anchors_are_starts else Phrases(b, a, score)


def _windows(
    table: PhraseTable, starts: np.ndarray, ends: np.ndarray, max_words: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Candidate partners: end tokens after each start and start tokens before each end,
    as flat ``(end_flat, end_owner, start_flat, start_owner)``."""
    end_hi, start_lo = table.bounds(max_words)
    e_flat, e_owner = _ranges(starts, end_hi[starts])
    ok = table.end_ok[e_flat]
    e_flat, e_owner = e_flat[ok], e_owner[ok]
    s_flat, s_owner = _ranges(start_lo[ends], ends + 1)
    ok = table.start_ok[s_flat]
    return e_flat, e_owner, s_flat[ok], s_owner[ok]


def merge(*parts: Phrases) -> Phrases:
    """Union of phrase lists, de-duplicated by (start, end), best first."""
    s = np.concatenate([p.start for p in parts])
    e = np.concatenate([p.end for p in parts])
    sc = np.concatenate([p.score for p in parts])
    if not len(s):
        return Phrases.empty()
    key = (s << np.int64(24)) | (e - s)
    _, first = np.unique(key, return_index=True)
    s, e, sc = s[first], e[first], sc[first]
    order = np.lexsort((s, -sc))
    return Phrases(s[order], e[order], sc[order])


def search_candidates(
    table: PhraseTable,
    q_start: np.ndarray,
    q_end: np.ndarray,
    start_cands: np.ndarray,
    end_cands: np.ndarray,
    max_words: int,
) -> Phrases:
    """Phrases of one question from MIPS candidates (token indices, -1 = none); exact scores.

    Each start candidate is paired with its best end and each end candidate with its
    best start.  All start vectors needed (candidates and the windows before end
    candidates) are read in one gather, likewise all end vectors.
    """
    sc = start_cands[start_cands >= 0].astype(np.int64)
    ec = end_cands[end_cands >= 0].astype(np.int64)
    sc = np.unique(sc[table.start_ok[sc]])
    ec = np.unique(ec[table.end_ok[ec]])
    if not len(sc) and not len(ec):
        return Phrases.empty()
    e_flat, e_owner, s_flat, s_owner = _windows(table, sc, ec, max_words)
    s_all = exact_scores(table.start, np.concatenate([sc, s_flat]), q_start)
    e_all = exact_scores(table.end, np.concatenate([ec, e_flat]), q_end)
    return merge(
        _pair(sc, s_all[: len(sc)], e_flat, e_owner, e_all[len(ec) :], True),
        _pair(ec, e_all[: len(ec)], s_flat, s_owner, s_all[len(sc) :], False),
    )


def search_scope(
    table: PhraseTable,
    q_start: np.ndarray,
    q_end: np.ndarray,
    rows: Sequence[int] | np.ndarray,
    max_words: int,
) -> Phrases:
    """Exhaustive search of one question within passages ``rows`` (D = {p} when one row)."""
    ptr = table.passage_ptr
    r = np.asarray(rows, dtype=np.int64)
    tok, _ = _ranges(ptr[r], ptr[r + 1])
    return search_candidates(table, q_start, q_end, tok, tok, max_words)


# --- units -------------------------------------------------------------------------------


@dataclass
class UnitHit:
    """A unit found through its best phrase (the phrase gives passage and, for phrases, span)."""

    score: float
    start: int  # token index of the unit's best phrase
    end: int
    span: tuple[int, int] | None


def sentence_of(starts: list[int], char: int) -> int:
    """Index of the sentence holding ``char`` (the last one starting at or before it)."""
    if not starts:
        return -1
    return max(bisect.bisect_right(starts, char) - 1, 0)


def aggregate(
    table: PhraseTable, store: CorpusStore, phrases: Phrases, k: int, unit: Unit
) -> list[UnitHit]:
    """Top-``k`` units by the max score of the phrases they contain."""
    if unit is Unit.PHRASE:
        return [
            UnitHit(float(sc), int(s), int(e), (int(table.cs[s]), int(table.ce[e])))
            for s, e, sc in zip(phrases.start[:k], phrases.end[:k], phrases.score[:k], strict=True)
        ]
    rows = table.row[phrases.start]
    if unit is Unit.PASSAGE:
        # phrases are best first: the first occurrence of a row is its max.
        _, first = np.unique(rows, return_index=True)
        first = np.sort(first)[:k]
        return [
            UnitHit(float(phrases.score[i]), int(phrases.start[i]), int(phrases.end[i]), None)
            for i in first
        ]
    out: list[UnitHit] = []
    seen: set[object] = set()
    uniq = sorted(set(rows.tolist()))
    if unit is Unit.SENTENCE:
        ss = dict(zip(uniq, store.column("sent_starts", uniq), strict=True))
        se = dict(zip(uniq, store.column("sent_ends", uniq), strict=True))
    else:
        docs = dict(zip(uniq, store.column("doc_id", uniq), strict=True))
    for i in range(len(phrases)):
        s, e, r = int(phrases.start[i]), int(phrases.end[i]), int(rows[i])
        span: tuple[int, int] | None = None
        key: object
        if unit is Unit.SENTENCE:
            starts, ends = ss[r] or [], se[r] or []
            j = sentence_of(starts, int(table.cs[s]))
            if j < 0:
                span, j = (int(table.cs[s]), int(table.ce[e])), -1
            else:
                span = (int(starts[j]), int(ends[j]))
            key = (r, j)
        else:
            key = docs[r]
        if key in seen:
            continue
        seen.add(key)
        out.append(UnitHit(float(phrases.score[i]), s, e, span))
        if len(out) == k:
            break
    return out


def unit_hits(
    table: PhraseTable, store: CorpusStore, found: Sequence[list[UnitHit]], unit: Unit
) -> list[list[Hit]]:
    """Turn unit hits into :class:`Hit` objects, fetching passage fields once per batch."""
    rows = sorted({int(table.row[h.start]) for hs in found for h in hs})
    if not rows:
        return [[] for _ in found]
    cols = {n: store.column(n, rows) for n in ("id", "doc_id", "title", "text")}
    metas = store.hit_meta(rows)
    pos = {r: i for i, r in enumerate(rows)}
    out: list[list[Hit]] = []
    for hs in found:
        lst = []
        for h in hs:
            r = int(table.row[h.start])
            i = pos[r]
            lst.append(
                Hit(
                    unit=unit,
                    score=h.score,
                    passage_row=r,
                    passage_id=cols["id"][i],
                    doc_id=cols["doc_id"][i],
                    title=cols["title"][i],
                    text=cols["text"][i],
                    span=h.span,
                    meta=dict(metas[i]),
                    focus=(int(table.cs[h.start]), int(table.ce[h.end]))
                    if unit is Unit.PASSAGE
                    else None,
                )
            )
        out.append(lst)
    return out
