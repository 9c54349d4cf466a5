"""Searching a phrase index for sentences, passages or documents: units ranked by their best
phrase, found in rounds that retrieve deeper until ``k`` units are covered (or proven exact).

:meth:`anygrain.phrase.index.PhraseIndex.search_units` delegates here; the MIPS round with
its scores (:func:`mips_scored`) and fused phrase scoring (:func:`fused_phrases`) serve the
phrase search too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit, UnitSearchStats
from anygrain.phrase.lexical import LexicalQuery, SparseFusion, dense_stats, fuse
from anygrain.phrase.search import (
    Phrases,
    PhraseTable,
    UnitHit,
    aggregate,
    merge,
    search_candidates,
    search_scope,
)
from anygrain.utils.threads import single_thread

if TYPE_CHECKING:
    from anygrain.phrase.index import PhraseIndex


@dataclass
class Mips:
    """One MIPS round: start and end token indices (-1: none) and scores (NaN: none)."""

    ts: np.ndarray
    te: np.ndarray
    ss: np.ndarray
    se: np.ndarray


def mips_scored(
    index: PhraseIndex, q_start: np.ndarray, q_end: np.ndarray, k: int, nprobe: int | None
) -> Mips:
    """Top-``k`` start and end tokens of ``index`` with their MIPS scores (NaN where none)."""
    ks = min(k, max(len(index.start_ids), 1))
    ke = min(k, max(len(index.end_ids), 1))
    rs, ss = index.start_index.search(q_start, ks, nprobe=nprobe)
    re_, se = index.end_index.search(q_end, ke, nprobe=nprobe)
    return Mips(
        np.where(rs >= 0, index.start_ids[np.maximum(rs, 0)], -1),
        np.where(re_ >= 0, index.end_ids[np.maximum(re_, 0)], -1),
        np.where(rs >= 0, ss, np.nan).astype(np.float32),
        np.where(re_ >= 0, se, np.nan).astype(np.float32),
    )


def fused_phrases(
    table: PhraseTable,
    q_start: np.ndarray,
    q_end: np.ndarray,
    i: int,
    mips: Mips,
    lex: LexicalQuery,
    fusion: SparseFusion,
    max_words: int,
    rows: Sequence[int] | None = None,
) -> Phrases:
    """Question ``i``'s phrases with fused scores, best first: from its MIPS candidates
    and BM25's top passages, or (``rows``) every phrase of those passages."""
    qs, qe = q_start[i], q_end[i]
    if rows is not None:
        ph = search_scope(table, qs, qe, rows, max_words)
    else:
        ph = search_candidates(table, qs, qe, mips.ts[i], mips.te[i], max_words)
        if len(lex.top_rows):
            ph = merge(ph, search_scope(table, qs, qe, lex.top_rows, max_words))
    if not len(ph):
        return ph
    stats = dense_stats(mips.ss[i], mips.se[i], fusion.norm_depth)
    score = fuse(ph.score, table.row[ph.start], stats, lex, fusion)
    order = np.lexsort((ph.start, -score))
    return Phrases(ph.start[order], ph.end[order], score[order])


def search_units(
    index: PhraseIndex,
    q_start: np.ndarray,
    q_end: np.ndarray,
    k: int,
    unit: Unit,
    *,
    depth: int = 100,
    max_depth: int | None = None,
    exact: bool = False,
    max_words: int | None = None,
    nprobe: int | None = None,
    lexical: Sequence[LexicalQuery] | None = None,
    fusion: SparseFusion | None = None,
) -> tuple[list[list[UnitHit]], list[UnitSearchStats]]:
    """Top-``k`` sentences, passages or documents of ``index`` per question, retrying deeper.

    A round retrieves ``depth`` starts and ends per question, scores phrases and keeps
    each unit's best.  A question is done when its phrases cover ``k`` units; with
    ``exact``, when moreover the ``k``-th unit's score is at least the highest score a
    phrase not found could have (below), or every vector was retrieved.  Otherwise the
    depth doubles, up to ``max_depth`` (default ``max(64·k, depth)``; with ``exact`` the
    index size), where the question stops as *exhausted*.

    The bound: a phrase whose start was retrieved is scored with its best end, and one
    whose end was retrieved is beaten by the end's best start (same passage); any other
    phrase scores at most ``s_last + e_last`` (the lowest start and end scores
    retrieved).  A sentence holds a phrase by its start, so for sentences the bound is
    ``s_last + e_first``.  It holds when MIPS is an exhaustive scan of the vectors span
    scoring reads (``index.exact_mips``); with IVF it does not, and ``exact`` changes
    nothing (no round can be proven, so the usual ``max_depth`` bound applies).

    With ``fusion`` (and ``lexical``) phrases carry fused scores: BM25's top passages
    are scanned in every round, and the bound becomes the fused score of the dense
    bound in the passage with the highest BM25 score (a passage's BM25 part is the same
    for all its phrases, so pairing each candidate with its best partner still holds).
    """
    if unit is Unit.PHRASE:
        raise AnygrainError("search_units ranks sentences, passages or documents")
    table, store = index.table, index.store
    L = int(max_words or index.max_words)
    n = len(q_start)
    n_s, n_e = len(index.start_ids), len(index.end_ids)
    n_max = max(n_s, n_e, 1)
    certify = index.exact_mips
    # no proof is possible past an approximate MIPS: ``exact`` then keeps the usual bound
    bound = n_max if exact and certify else min(max(max_depth or 64 * k, depth), n_max)
    fused = fusion is not None and lexical is not None
    if fused:
        assert fusion is not None
        d = min(max(depth, fusion.norm_depth), max(bound, fusion.norm_depth))
        bound = max(bound, d)
    else:
        d = min(depth, bound)
    found: list[list[UnitHit]] = [[] for _ in range(n)]
    stats: list[UnitSearchStats | None] = [None] * n
    pending = np.arange(n)
    rounds = 0
    while len(pending):
        rounds += 1
        qs_p, qe_p = q_start[pending], q_end[pending]
        mips = mips_scored(index, qs_p, qe_p, d, nprobe)
        all_s, all_e = d >= n_s, d >= n_e
        left = []
        with single_thread():
            for j, qi in enumerate(pending.tolist()):
                to_fused = None
                if fused:
                    assert fusion is not None and lexical is not None
                    lex = lexical[qi]
                    ph = fused_phrases(table, qs_p, qe_p, j, mips, lex, fusion, L)
                    to_fused = bound_map(mips, j, lex, fusion)
                else:
                    ph = search_candidates(table, q_start[qi], q_end[qi], mips.ts[j], mips.te[j], L)
                hits = aggregate(table, store, ph, k, unit)
                proven = certify and (
                    all_s
                    or certified(hits, k, unit, mips.ss[j], mips.se[j], all_e, to_fused=to_fused)
                )
                done = proven if exact and certify else len(hits) >= k
                if done or d >= bound:
                    found[qi] = hits
                    stats[qi] = UnitSearchStats(rounds, d, len(hits), not done, proven)
                else:
                    left.append(qi)
        pending = np.asarray(left, dtype=np.int64)
        d = min(2 * d, bound)
    return found, [s for s in stats if s is not None]


def bound_map(
    mips: Mips, j: int, lex: LexicalQuery, fusion: SparseFusion
) -> Callable[[float], float]:
    """The fused score a phrase with dense score ``b`` could at most have (its passage at
    BM25's best: the first of the question's top rows, or any row when none scored), for
    certifying a fused unit search."""
    stats = dense_stats(mips.ss[j], mips.se[j], fusion.norm_depth)
    best = lex.top_rows[:1] if len(lex.top_rows) else np.zeros(1, np.int64)

    def to_fused(b: float) -> float:
        return float(fuse(np.array([b], np.float32), best, stats, lex, fusion)[0])

    return to_fused


def certified(
    hits: list[UnitHit],
    k: int,
    unit: Unit,
    s_scores: np.ndarray,
    e_scores: np.ndarray,
    all_e: bool,
    *,
    to_fused: Callable[[float], float] | None = None,
) -> bool:
    """Whether the ``k``-th unit's score beats every phrase the round did not find
    (see :func:`search_units`); ``s_scores``/``e_scores`` are one question's MIPS
    scores, best first, with every start not retrieved scoring at most the last
    (``to_fused`` maps that dense bound to fused scores)."""
    if len(hits) < k:
        return False
    s_scores = s_scores[np.isfinite(s_scores)]
    e_scores = e_scores[np.isfinite(e_scores)]
    if not len(s_scores) or not len(e_scores):
        return False
    s_last = float(s_scores[-1])
    if unit is Unit.SENTENCE:
        e_part = float(e_scores[0])
    elif all_e:
        return True  # every end was retrieved: each phrase is beaten by its end's best start
    else:
        e_part = float(e_scores[-1])
    bound = s_last + e_part
    if to_fused is not None:
        bound = to_fused(bound)
    return hits[k - 1].score >= bound + 1e-5 * max(1.0, abs(bound))


@dataclass(frozen=True)
class FirstStage:
    """The options of a phrase index's own search
    (:meth:`~anygrain.phrase.index.PhraseIndex.search_encoded`'s), which re-scoring runs
    as they are to find what it re-scores."""

    scope_rows: Sequence[Sequence[int]] | None
    depth: int
    max_depth: int | None
    exact: bool
    max_words: int
    nprobe: int | None
    fusion: SparseFusion | None
    lexical: Sequence[LexicalQuery] | None
    stats: list[UnitSearchStats] | None  # filled with each question's search statistics

    def round_options(self) -> dict[str, Any]:
        """What each round takes, at the phrase grain and the others alike."""
        return {
            "max_words": self.max_words,
            "nprobe": self.nprobe,
            "lexical": self.lexical,
            "fusion": self.fusion,
        }


@dataclass
class Found:
    """What an index's own search found per question: its phrases (at the phrase grain, or
    in a scope) or else its units; and a fused phrase search's MIPS round (the dense
    statistics of its fused scores)."""

    phrases: list[Phrases] | None
    units: list[list[UnitHit]]
    mips: Mips | None = None


def check_scope_rows(index: PhraseIndex, scope_rows: Sequence[Sequence[int]], n: int) -> None:
    """Refuse a scope that is not one list of passage rows of ``index`` per query."""
    if len(scope_rows) != n:
        raise AnygrainError(f"scope_rows has {len(scope_rows)} entries for {n} queries")
    nrows = len(index.table.passage_ptr) - 1
    for rows in scope_rows:
        bad = [r for r in rows if not 0 <= int(r) < nrows]
        if bad:
            raise AnygrainError(f"scope row {bad[0]} out of range (0..{nrows - 1})")


def phrase_round(
    index: PhraseIndex,
    q_start: np.ndarray,
    q_end: np.ndarray,
    *,
    top_k: int,
    scope_rows: Sequence[Sequence[int]] | None,
    max_words: int,
    nprobe: int | None,
    lexical: Sequence[LexicalQuery] | None,
    fusion: SparseFusion | None,
) -> tuple[list[Phrases], Mips | None]:
    """:meth:`~anygrain.phrase.index.PhraseIndex.search_phrases`, with the MIPS round that
    fused scores took their dense statistics from (None unfused)."""
    n, L, table = len(q_start), max_words, index.table
    fused = fusion is not None and lexical is not None
    if scope_rows is not None:
        check_scope_rows(index, scope_rows, n)
    if fused:
        assert fusion is not None and lexical is not None
        depth = fusion.norm_depth if scope_rows is not None else max(top_k, fusion.norm_depth)
        mips = mips_scored(index, q_start, q_end, depth, nprobe)
        scopes = scope_rows if scope_rows is not None else [None] * n
        with single_thread():
            return [
                fused_phrases(table, q_start, q_end, i, mips, lexical[i], fusion, L, rows)
                for i, rows in enumerate(scopes)
            ], mips
    if scope_rows is not None:
        with single_thread():
            return [
                search_scope(table, q_start[i], q_end[i], rows, L)
                for i, rows in enumerate(scope_rows)
            ], None
    kk = min(top_k, max(len(index.start_ids), 1), max(len(index.end_ids), 1))
    ts, te = index.mips(q_start, q_end, kk, nprobe=nprobe)
    with single_thread():
        return [
            search_candidates(table, q_start[i], q_end[i], ts[i], te[i], L) for i in range(n)
        ], None


def first_stage(
    index: PhraseIndex, q_start: np.ndarray, q_end: np.ndarray, k: int, unit: Unit, s: FirstStage
) -> Found:
    """The index's own search with options ``s``: phrases at the phrase grain or in a scope,
    else ``k`` units per question in rounds (their statistics appended to ``s.stats``)."""
    if unit is Unit.PHRASE or s.scope_rows is not None:
        phrases, mips = phrase_round(
            index,
            q_start,
            q_end,
            top_k=s.depth,
            scope_rows=s.scope_rows,
            **s.round_options(),
        )
        return Found(phrases, [], mips)
    found, stats = search_units(
        index,
        q_start,
        q_end,
        k,
        unit,
        depth=s.depth,
        max_depth=s.max_depth,
        exact=s.exact,
        **s.round_options(),
    )
    if s.stats is not None:
        s.stats.extend(stats)
    return Found(None, found)
