"""Exact re-scoring of a phrase index's top passages.

Compressed codes (``sq4``, ``opq-pq``) still find the right passages but lose the span
inside them.  A search re-scoring ``N`` passages (:class:`~anygrain.phrase.rescore_settings.
Rescoring`) runs the index's own search (its first stage), re-encodes the first ``N`` live
passages with the index's phrase model as the dump would (:func:`encode_rows`) and ranks
their spans exactly, over the tokens asked for (:class:`RescoreTokens`), with the same BM25
part fused in.  So the stored codes only have to find passages.  Hits from the re-scored
passages come first, best first; the first stage's other hits follow with its scores.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.runtime import runs_on_onnx
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Hit, Unit, UnitSearchStats
from anygrain.phrase.dump import END_OK, START_OK, kept_tokens
from anygrain.phrase.lexical import LexicalQuery, SparseFusion, dense_stats, fuse
from anygrain.phrase.rescore_settings import RescoreTokens, Rescoring
from anygrain.phrase.search import (
    Phrases,
    PhraseTable,
    UnitHit,
    aggregate,
    search_candidates,
    unit_hits,
)
from anygrain.phrase.tokens import CharWords, word_spans
from anygrain.phrase.units import FirstStage, Found, mips_scored
from anygrain.utils.threads import single_thread

if TYPE_CHECKING:
    from anygrain.index.encoded import EncodedQueries
    from anygrain.phrase.index import PhraseIndex

_KEY = np.int64(1) << np.int64(31)
#: windows per encoder call when re-encoding: on one CPU thread small batches are faster
#: per window than large ones
ENCODE_BATCH = 8
#: passages a search's re-scoring must re-encode at once for ``auto`` to load torch for them
#: (where installed) rather than run the ONNX graph: torch's bfloat16 encoder is faster a
#: passage than the graph in float32, once its import has been paid for
TORCH_FROM = 32


@dataclass
class ExactRows:
    """The stored tokens of some passages with their vectors encoded again (float16)."""

    table: PhraseTable  # rows hold corpus rows, tokens in corpus-row order
    local: dict[int, int]  # corpus row -> its position in ``table.passage_ptr``

    def tokens(self, rows: Sequence[int]) -> np.ndarray:
        """Token indices (into ``table``) of passages ``rows``."""
        ptr = self.table.passage_ptr
        parts = [np.arange(ptr[self.local[r]], ptr[self.local[r] + 1]) for r in rows]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _match(stored_cs: np.ndarray, stored_ce: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> Any:
    """Positions in the encoded tokens ``(cs, ce)`` of the stored tokens, in stored order
    (the k-th stored token with a given span takes the k-th encoded one); None when one is
    missing."""
    sk = stored_cs.astype(np.int64) * _KEY + stored_ce.astype(np.int64)
    ek = cs.astype(np.int64) * _KEY + ce.astype(np.int64)
    e_order = np.argsort(ek, kind="stable")
    e_sorted = ek[e_order]
    s_order = np.argsort(sk, kind="stable")
    s_sorted = sk[s_order]
    occurrence = np.arange(len(s_sorted)) - np.searchsorted(s_sorted, s_sorted, side="left")
    pos = np.searchsorted(e_sorted, s_sorted, side="left") + occurrence
    if len(pos) and (int(pos.max()) >= len(e_sorted) or np.any(e_sorted[pos] != s_sorted)):
        return None
    out = np.empty(len(sk), dtype=np.int64)
    out[s_order] = e_order[pos]
    return out


def passage_encoder(index: PhraseIndex, passages: int = 0, *, bf16: bool = False) -> Any:
    """What re-encodes ``passages`` passages of ``index``: its phrase model when loaded; on
    ONNX Runtime (questions there: ``auto`` on a CPU, or ``onnx``), the model's shipped
    passage graph -- unless ``auto`` and a batch of at least :data:`TORCH_FROM` passages,
    where torch (installed) re-encodes faster in bfloat16 and its import pays off; torch
    too when ``bf16`` is asked for (the graph runs float32)."""
    from anygrain.encode.onnx_runtime import Runtime, require_torch, torch_installed

    if bf16:  # asked for: the graph would silently encode in float32
        require_torch("re-scoring in bfloat16 (--rescore-bf16)")
    onnx = index.runtime is Runtime.ONNX
    batch = index.requested_runtime is not Runtime.ONNX and passages >= TORCH_FROM
    if onnx and not index.model_loaded and not ((batch or bf16) and torch_installed()):
        graph = index.graph_passages()
        if graph is not None:
            return graph
    model = index.model
    if not hasattr(model, "encode_passages"):
        raise AnygrainError(
            f"{index.path}: re-scoring (rescore) encodes passages, and the model this index "
            f"was opened with ({type(model).__name__}) encodes questions only; open it with "
            "its phrase model, or search with rescore=0"
        )
    return model


def context_window(text: str, span: tuple[int, int], context: int) -> tuple[int, int]:
    """The characters ``[lo, hi)`` of ``text`` within ``context`` of ``span`` (a phrase's
    ``[cs, ce)``), widened so that no word is cut (:func:`~anygrain.phrase.tokens.word_spans`:
    a Chinese character is a word of its own)."""
    n = len(text)
    lo = max(0, min(span[0], n) - context)
    hi = min(n, max(span[1], 0) + context)
    starts, ends = word_spans(text)
    i = int(np.searchsorted(ends, lo, side="right"))  # the first word ending after lo
    if i < len(starts) and starts[i] < lo:
        lo = int(starts[i])
    j = int(np.searchsorted(starts, hi, side="left")) - 1  # the last word starting before hi
    if j >= 0 and ends[j] > hi:
        hi = int(ends[j])
    return lo, hi


def _shifted(p: Any, lo: int, text: str) -> Any:
    """Encoded tokens of the slice of passage ``text`` starting at character ``lo``, in the
    whole passage's characters and words."""
    words = CharWords.of(text)
    cs, ce = p.cs + lo, p.ce + lo
    return replace(
        p,
        cs=cs,
        ce=ce,
        wfirst=words.word_at[cs],
        wlast=words.word_at[np.maximum(ce - 1, 0)],
    )


def encode_rows(
    index: PhraseIndex,
    rows: np.ndarray,
    *,
    tokens: RescoreTokens | str = RescoreTokens.STORED,
    batch_size: int = ENCODE_BATCH,
    bf16: bool | None = None,
    around: Mapping[int, tuple[int, int]] | None = None,
    context: int = 0,
) -> ExactRows:
    """Passages ``rows`` (corpus rows) of ``index`` encoded again, in one encoder call: the
    ``tokens`` (:class:`RescoreTokens`) of each with the start/end vectors the dump would
    store.  ``bf16``: None, the index's recorded precision.  With ``context``, a passage in
    ``around`` (row -> a span's characters ``[cs, ce)``) is encoded only within ``context``
    characters of that span (:func:`context_window`), its title still before it: the tokens
    inside, with vectors from that slice only."""
    which = RescoreTokens.parse(tokens)
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    table = index.table
    d = int(index.record.dim or table.start.shape[1])
    model = passage_encoder(index, len(rows), bf16=bf16 is True)
    texts = index.store.texts(rows)
    spans = around if context and around else {}
    cuts = [
        context_window(t, spans[r], context) if r in spans else None
        for r, t in zip(rows.tolist(), texts, strict=True)
    ]
    parts = [t if c is None else t[c[0] : c[1]] for t, c in zip(texts, cuts, strict=True)]
    titles = index.store.titles(rows)
    if runs_on_onnx(model):
        # the graph runs float32 (scores differ from bf16's in the third digit)
        enc = model.encode_passages(parts, titles, batch_size=batch_size)
    else:
        if bf16 is None:
            bf16 = bool(index.record.bf16)
        # in bfloat16, a copy of the encoder cast once: autocast casts every weight per call
        enc = model.encode_passages(parts, titles, batch_size=batch_size, bf16=bf16, cast_once=True)
    enc = [
        p if c is None else _shifted(p, c[0], t) for p, c, t in zip(enc, cuts, texts, strict=True)
    ]
    if which is RescoreTokens.STORED:
        return _stored_tokens(index, rows, enc, d, partial=bool(spans))
    threshold = model.config.filter_threshold if which is RescoreTokens.MODEL else None
    starts, ends, toks = [], [], []
    counts = np.zeros(len(rows), np.int64)
    for j, (r, p) in enumerate(zip(rows.tolist(), enc, strict=True)):
        _, start, end, kept = kept_tokens(p, r, threshold)  # the dump's rule, at this threshold
        counts[j] = len(kept)
        starts.append(start)
        ends.append(end)
        toks.append(kept)
    local_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(counts, out=local_ptr[1:])
    empty = np.zeros((0, d), np.float16)
    sub = PhraseTable(
        np.concatenate(starts) if starts else empty,
        np.concatenate(ends) if ends else empty,
        np.concatenate(toks) if toks else np.zeros((0, 6), np.int32),
        local_ptr,
    )
    return ExactRows(sub, {r: j for j, r in enumerate(rows.tolist())})


def _stored_tokens(
    index: PhraseIndex, rows: np.ndarray, enc: list[Any], d: int, *, partial: bool = False
) -> ExactRows:
    """The index's stored tokens of passages ``rows`` with their encoded vectors ``enc``
    (``partial``: a slice of each passage was encoded, and the stored tokens found in it
    are taken)."""
    table = index.table
    ptr = table.passage_ptr
    picks: list[np.ndarray] = []
    for r, p in zip(rows.tolist(), enc, strict=True):
        at = np.arange(int(ptr[r]), int(ptr[r + 1]), dtype=np.int64)
        if partial:
            keys = table.cs[at].astype(np.int64) * _KEY + table.ce[at].astype(np.int64)
            have = p.cs.astype(np.int64) * _KEY + p.ce.astype(np.int64)
            at = at[np.isin(keys, have)]
        picks.append(at)
    counts = np.asarray([len(a) for a in picks], np.int64)
    n = int(counts.sum())
    start = np.zeros((n, d), np.float16)
    end = np.zeros((n, d), np.float16)
    tokens = np.zeros((n, 6), np.int32)
    local_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(counts, out=local_ptr[1:])
    for j, (r, p, at) in enumerate(zip(rows.tolist(), enc, picks, strict=True)):
        pos = _match(table.cs[at], table.ce[at], p.cs, p.ce)
        if pos is None:
            raise IndexMismatchError(
                f"{index.path}: passage row {r} encoded again gives other tokens than the "
                "index stored (its corpus or model changed); rebuild the index"
            )
        a, b = int(local_ptr[j]), int(local_ptr[j + 1])
        start[a:b] = p.start[pos].astype(np.float16)
        end[a:b] = p.end[pos].astype(np.float16)
        flags = table.start_ok[at] * START_OK + table.end_ok[at] * END_OK
        tokens[a:b] = np.stack(
            [table.row[at], table.cs[at], table.ce[at], flags, table.wfirst[at], table.wlast[at]],
            axis=1,
        )
    sub = PhraseTable(start, end, tokens, local_ptr)
    return ExactRows(sub, {r: j for j, r in enumerate(rows.tolist())})


def exact_phrases(
    exact: ExactRows,
    rows: Sequence[int],
    q_start: np.ndarray,
    q_end: np.ndarray,
    max_words: int,
    *,
    lex: LexicalQuery | None = None,
    fusion: SparseFusion | None = None,
    stats: tuple[float, float] = (0.0, 0.0),
) -> Phrases:
    """Every phrase of passages ``rows`` for one question, scored as an uncompressed index
    scores them (fused when ``fusion`` and ``lex`` are given), best first; token indices
    are ``exact.table``'s."""
    tok = exact.tokens(rows)
    ph = search_candidates(exact.table, q_start, q_end, tok, tok, max_words)
    if not len(ph) or fusion is None or lex is None:
        return ph
    score = fuse(ph.score, exact.table.row[ph.start], stats, lex, fusion)
    order = np.lexsort((ph.start, -score))
    return Phrases(ph.start[order], ph.end[order], score[order])


def first_rows(
    rows: np.ndarray,
    n: int,
    skip: Collection[int] = (),
    *,
    scores: np.ndarray | None = None,
    margin: float | None = None,
) -> list[int]:
    """The first ``n`` distinct values of ``rows`` not in ``skip``, in order; with ``margin``
    (and ``scores``, one per row, best first) only the first and those whose first score is
    within ``margin`` of its score."""
    if not len(rows):
        return []
    _, first = np.unique(rows, return_index=True)
    at = np.sort(first)
    picked = [(int(rows[i]), i) for i in at.tolist() if not skip or int(rows[i]) not in skip][:n]
    if margin is not None and scores is not None and picked:
        top = float(scores[picked[0][1]])
        picked = picked[:1] + [(r, i) for r, i in picked[1:] if top - float(scores[i]) <= margin]
    return [r for r, _ in picked]


def deleted_rows(index: PhraseIndex) -> frozenset[int]:
    """The passage rows of the documents deleted from ``index`` (its tombstones, when it
    was opened by ``Index.load``): never worth a re-encoding, their hits are dropped."""
    tomb = getattr(index, "tombstones", None)
    return tomb.rows if tomb is not None else frozenset()


def search_rescored(
    index: PhraseIndex,
    encoded: EncodedQueries,
    k: int,
    unit: Unit,
    stage: FirstStage,
    rescoring: Rescoring,
) -> list[list[Hit]]:
    """Top-``k`` hits per question at ``unit``, the first ``rescoring.n`` passages of the
    index's own search with ``stage`` re-scored exactly as ``rescoring`` says; see the
    module docstring.  A unit search asks its first stage for at least ``n`` units, so
    ``n`` passages are there to re-score."""
    qs, qe = encoded.vectors
    nq, n = len(qs), rescoring.n
    found = index.first_stage(qs, qe, max(k, n), unit, stage)
    tops = _to_rescore(index, found, n, rescoring.margin)
    if stage.stats is not None and found.phrases is not None:
        scoped = stage.scope_rows is not None
        stats = (
            UnitSearchStats(1, stage.depth, min(k, len(p)), False, scoped) for p in found.phrases
        )
        stage.stats.extend(stats)
    dense = _dense_stats(index, qs, qe, stage, found)
    wanted = sorted({r for t in tops for r in t})
    ex = None
    if wanted:
        context = rescoring.window
        ex = encode_rows(
            index,
            np.asarray(wanted, np.int64),
            tokens=rescoring.token_choice,
            bf16=rescoring.bf16,
            around=_best_spans(index, found, tops) if context else None,
            context=context or 0,
        )
    fused = stage.fusion is not None and stage.lexical is not None
    exact_found: list[list[UnitHit]] = []
    rest_found: list[list[UnitHit]] = []
    with single_thread():
        for i in range(nq):
            lex = stage.lexical[i] if fused and stage.lexical is not None else None
            fusion = stage.fusion if fused else None
            exact_found.append(
                _exact_hits(
                    ex, tops[i], qs[i], qe[i], k, unit, index, stage.max_words, lex, fusion,
                    dense[i],
                )
            )  # fmt: skip
            rest_found.append(_first_stage_rest(index, tops[i], found, i, k, unit))
    first = unit_hits(ex.table, index.store, exact_found, unit) if ex is not None else [[]] * nq
    after = unit_hits(index.table, index.store, rest_found, unit)
    return [_merged(a, b, unit, k) for a, b in zip(first, after, strict=True)]


def _to_rescore(index: PhraseIndex, found: Found, n: int, margin: float | None) -> list[list[int]]:
    """Each question's first ``n`` live passages of what its first stage found (those after
    the first only within ``margin`` of its score)."""
    skip = deleted_rows(index)
    row = index.table.row
    if found.phrases is not None:
        return [
            first_rows(row[p.start], n, skip, scores=p.score, margin=margin) for p in found.phrases
        ]
    return [
        first_rows(
            row[[h.start for h in f]],
            n,
            skip,
            scores=np.asarray([h.score for h in f]),
            margin=margin,
        )
        for f in found.units
    ]


def _dense_stats(
    index: PhraseIndex, qs: np.ndarray, qe: np.ndarray, stage: FirstStage, found: Found
) -> list[tuple[float, float]]:
    """The dense statistics each question's fused score takes, as its first stage took them
    (its top MIPS scores: the first stage's own round where it kept one); zeros unfused."""
    fusion = stage.fusion
    if fusion is None or stage.lexical is None:
        return [(0.0, 0.0)] * len(qs)
    m = found.mips or mips_scored(index, qs, qe, fusion.norm_depth, stage.nprobe)
    return [dense_stats(m.ss[i], m.se[i], fusion.norm_depth) for i in range(len(qs))]


def _best_spans(
    index: PhraseIndex, found: Found, tops: list[list[int]]
) -> dict[int, tuple[int, int]]:
    """The characters of each re-scored passage's best first-stage phrase, for each question
    re-scoring it (their hull when several do)."""
    table = index.table
    spans: dict[int, tuple[int, int]] = {}
    for i, top in enumerate(tops):
        if not top:
            continue
        if found.phrases is not None:
            starts, ends = found.phrases[i].start, found.phrases[i].end
        else:
            starts = np.asarray([h.start for h in found.units[i]], np.int64)
            ends = np.asarray([h.end for h in found.units[i]], np.int64)
        prow = table.row[starts]
        for r in top:
            j = int(np.argmax(prow == r))  # phrases come best first
            cs, ce = int(table.cs[starts[j]]), int(table.ce[ends[j]])
            a, b = spans.get(r, (cs, ce))
            spans[r] = (min(a, cs), max(b, ce))
    return spans


def _exact_hits(
    ex: ExactRows | None,
    top: list[int],
    q_start: np.ndarray,
    q_end: np.ndarray,
    k: int,
    unit: Unit,
    index: PhraseIndex,
    max_words: int,
    lex: LexicalQuery | None,
    fusion: SparseFusion | None,
    stats: tuple[float, float],
) -> list[UnitHit]:
    """One question's top ``k`` units among its re-scored passages ``top``."""
    if ex is None or not top:
        return []
    ph = exact_phrases(ex, top, q_start, q_end, max_words, lex=lex, fusion=fusion, stats=stats)
    return aggregate(ex.table, index.store, ph, k, unit)


def _first_stage_rest(
    index: PhraseIndex, top: list[int], found: Found, i: int, k: int, unit: Unit
) -> list[UnitHit]:
    """Question ``i``'s first-stage hits outside its re-scored passages ``top``: from its
    phrases (``rest``), or else from the units its first stage found."""
    table = index.table
    if found.phrases is not None:
        p = found.phrases[i]
        outside = ~np.isin(table.row[p.start], np.asarray(top, np.int64))
        left = Phrases(p.start[outside], p.end[outside], p.score[outside])
        return aggregate(table, index.store, left, k, unit)
    done = set(top)
    return [h for h in found.units[i] if int(table.row[h.start]) not in done]


def _merged(first: list[Hit], after: list[Hit], unit: Unit, k: int) -> list[Hit]:
    """The re-scored hits, then the first stage's others (a document once), ``k`` at most."""
    if unit is Unit.DOCUMENT:
        docs = {h.doc_id for h in first}
        after = [h for h in after if h.doc_id not in docs]
    return (first + after)[:k]
