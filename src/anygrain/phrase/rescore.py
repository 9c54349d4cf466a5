"""Exact re-scoring of a phrase index's top passages (issue 37).

Compressed codes (``sq4``, ``opq-pq``) still find the right passages but lose the span
inside them.  With ``rescore=N`` a search takes the first ``N`` passages of the index's
own (compressed) search per question -- ranked by their best phrase, as the passage grain
ranks them -- re-encodes them with the index's phrase model and ranks their spans exactly,
as the uncompressed index scores them:

- the passage encoder is the one the build's dump runs
  (:meth:`~anygrain.phrase.model.PhraseEncoder.encode_passages`, with the index's recorded
  ``bf16``), and its vectors are rounded to float16 as the dump stores them;
- the tokens are, by ``tokens`` (:class:`RescoreTokens`): ``stored``, the ones the index
  stored for those passages (its filter, whatever threshold or refiltering made it);
  ``model``, those passing the model's own filter threshold (what an uncompressed index
  built at ``--keep 1`` stores: a compressed index's lower keep then costs nothing on
  the re-scored passages); ``all``, every word-boundary token, unfiltered.  Their
  start/end flags and word numbers are the dump's, so the phrases and the maximum
  phrase length are the index's;
- a fused score adds the same BM25 part; its dense z-score statistics are the question's
  top MIPS scores from the index (a constant per question, as without re-scoring).

So the stored codes only have to find passages.  All questions of a search batch share one
encoder call, each passage encoded once however many questions re-score it (windows sorted
by length, in small batches: on one CPU thread 8 windows run ~1.6x faster than 32).
``bf16`` encodes them in bfloat16 instead of the index's recorded precision, on a copy of
the encoder cast once (:meth:`~anygrain.phrase.model.PhraseEncoder.bf16_passages`; ~2x
float32 where the CPU has it natively; scores then differ from the dump's in the third
digit).  ``context`` (:class:`FirstStage`) re-encodes only a window of each passage around
its best first-stage phrase (:func:`context_window`): cheaper, and measured to lose EM (the
slice's vectors are not the whole passage's), so whole passages are the default.
Deleted (tombstoned) passages are skipped when the first ``N`` are picked,
so ``N`` live passages are re-scored.

Hits from the re-scored passages come first, best first by their exact scores; the first
stage's other hits follow with the scores it gave them (so scores may rise across that
boundary).  A unit search (sentences, passages, documents) asks its first stage for at
least ``N`` units, so ``N`` passages are there to re-score.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.encode.runtime import runs_on_onnx
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Hit, Unit, UnitSearchStats
from anygrain.phrase.dump import END_OK, START_OK, keep_flags
from anygrain.phrase.lexical import LexicalQuery, SparseFusion, dense_stats, fuse
from anygrain.phrase.search import (
    Phrases,
    PhraseTable,
    UnitHit,
    aggregate,
    search_candidates,
    unit_hits,
)
from anygrain.phrase.tokens import CharWords, word_spans
from anygrain.phrase.units import fused_phrases, mips_scored
from anygrain.utils.ranges import Range
from anygrain.utils.threads import single_thread

if TYPE_CHECKING:
    from anygrain.index.encoded import EncodedQueries
    from anygrain.phrase.index import PhraseIndex

#: passages re-scored per question (0: none, the compressed scores as they are)
RESCORE_RANGE = Range("phrase rescore passages", 0, 10_000, integer=True)
#: how far below the first passage's first-stage score another may be and still be re-scored
#: (fused scores span a few units: the top of the range re-scores all ``N``)
RESCORE_MARGIN_RANGE = Range("phrase rescore margin", 0.0, 1000.0)
#: characters of text each side of a passage's best first-stage phrase that re-scoring
#: re-encodes (0: the whole passage)
RESCORE_CONTEXT_RANGE = Range("phrase rescore context", 0, 1_000_000, integer=True)
_KEY = np.int64(1) << np.int64(31)
#: windows per encoder call when re-encoding: on one CPU thread 4-8 windows are ~1.6x
#: faster per window than 32 (measured with phrase-minilm on SQuAD paragraphs)
ENCODE_BATCH = 8
#: passages a search's re-scoring must re-encode at once for ``auto`` to load torch for them
#: (where installed) rather than run the ONNX graph: torch's bfloat16 encoder takes ~17 ms a
#: passage on one thread against the graph's ~50 in float32, and importing torch ~4 s
TORCH_FROM = 32


class RescoreTokens(str, Enum):
    """Which tokens of a re-encoded passage re-scoring ranks spans over."""

    STORED = "stored"  # the index's stored tokens (its filter and keep fraction)
    MODEL = "model"  # those passing the model's own filter threshold (a keep-1 index's)
    ALL = "all"  # every word-boundary token, no filter

    @classmethod
    def parse(cls, value: RescoreTokens | str | None, where: str = "rescore_tokens") -> Any:
        """``value`` as a member (None: ``stored``); a one-line error naming the choices."""
        if value is None:
            return cls.STORED
        try:
            return cls(value)
        except ValueError:
            choices = "|".join(m.value for m in cls)
            raise AnygrainError(f"{where}: {value!r} is not one of {choices}") from None


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
    where torch (installed) re-encodes ~3x faster in bfloat16 and its import pays off; torch
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
    d = int(index.manifest["settings"].get("dim") or table.start.shape[1])
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
            bf16 = bool(index.manifest["settings"].get("bf16", False))
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
        flags = keep_flags(p, threshold)  # the dump's rule, at this threshold
        keep = flags > 0
        counts[j] = int(keep.sum())
        starts.append(p.start[keep].astype(np.float16))
        ends.append(p.end[keep].astype(np.float16))
        toks.append(
            np.stack(
                [
                    np.full(counts[j], r, np.int64),
                    p.cs[keep],
                    p.ce[keep],
                    flags[keep],
                    p.wfirst[keep],
                    p.wlast[keep],
                ],
                axis=1,
            ).astype(np.int32)
        )
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


@dataclass(frozen=True)
class FirstStage:
    """The options of the index's own search that finds what is re-scored
    (:meth:`~anygrain.phrase.index.PhraseIndex.search_encoded`'s)."""

    scope_rows: Sequence[Sequence[int]] | None
    depth: int
    max_depth: int | None
    exact: bool
    max_words: int
    nprobe: int | None
    fusion: SparseFusion | None
    lexical: Sequence[LexicalQuery] | None
    stats: list[UnitSearchStats] | None  # filled with each question's search statistics
    # a passage after the first is re-scored only when its first-stage score is within this
    # of the first's (None: the first ``n`` all): most questions' answer is in the first
    margin: float | None = None
    # characters each side of a passage's best first-stage phrase that are re-encoded
    # (None or 0: the whole passage)
    context: int | None = None


def search_rescored(
    index: PhraseIndex,
    encoded: EncodedQueries,
    k: int,
    unit: Unit,
    n: int,
    stage: FirstStage,
    *,
    tokens: RescoreTokens | str | None = None,
    bf16: bool | None = None,
) -> list[list[Hit]]:
    """Top-``k`` hits per question at ``unit``, the first ``n`` passages of the index's
    search re-scored exactly over their ``tokens`` (:class:`RescoreTokens`, None:
    ``stored``), encoded in ``bf16`` (None: the index's recorded precision); see the
    module docstring.  The options are
    :meth:`~anygrain.phrase.index.PhraseIndex.search_encoded`'s."""
    which = RescoreTokens.parse(tokens)
    qs, qe = encoded.vectors
    nq = len(qs)
    fusion, lexical, max_words = stage.fusion, stage.lexical, stage.max_words
    fused = fusion is not None and lexical is not None
    rest, found, tops, dense = _first_stage(index, qs, qe, k, unit, n, stage)
    wanted = sorted({r for t in tops for r in t})
    ex = None
    if wanted:
        around = _best_spans(index, rest, found, tops) if stage.context else None
        ex = encode_rows(
            index,
            np.asarray(wanted, np.int64),
            tokens=which,
            bf16=bf16,
            around=around,
            context=stage.context or 0,
        )
    exact_found: list[list[UnitHit]] = []
    rest_found: list[list[UnitHit]] = []
    with single_thread():
        for i in range(nq):
            lex = lexical[i] if fused and lexical is not None else None
            exact_found.append(
                _exact_hits(
                    ex,
                    tops[i],
                    qs[i],
                    qe[i],
                    k,
                    unit,
                    index,
                    max_words,
                    lex,
                    fusion if fused else None,
                    dense[i],
                )
            )
            rest_found.append(_first_stage_rest(index, tops[i], rest, found, i, k, unit))
    first = unit_hits(ex.table, index.store, exact_found, unit) if ex is not None else [[]] * nq
    after = unit_hits(index.table, index.store, rest_found, unit)
    return [_merged(a, b, unit, k) for a, b in zip(first, after, strict=True)]


def _first_stage(
    index: PhraseIndex,
    qs: np.ndarray,
    qe: np.ndarray,
    k: int,
    unit: Unit,
    n: int,
    stage: FirstStage,
) -> tuple[list[Phrases] | None, list[list[UnitHit]], list[list[int]], list[tuple[float, float]]]:
    """The index's own search: each question's phrases (at the phrase grain, or in its
    scope) or units found, the first ``n`` live passages of them to re-score, and the
    dense statistics a fused score of the question takes (its top MIPS scores; zeros
    unfused)."""
    scope_rows, depth, stats, fusion = stage.scope_rows, stage.depth, stage.stats, stage.fusion
    lexical = stage.lexical
    skip = deleted_rows(index)
    fused = fusion is not None and lexical is not None
    nq = len(qs)
    dense: list[tuple[float, float]] = [(0.0, 0.0)] * nq
    if unit is Unit.PHRASE and scope_rows is None and fused:
        assert fusion is not None and lexical is not None
        # search_phrases' own fused path, its one MIPS round kept for the statistics
        # (asking FAISS again for them cost a second search per question)
        mips = mips_scored(index, qs, qe, max(depth, fusion.norm_depth), stage.nprobe)
        with single_thread():
            rest: list[Phrases] | None = [
                fused_phrases(index.table, qs, qe, i, mips, lexical[i], fusion, stage.max_words)
                for i in range(nq)
            ]
        dense = [dense_stats(mips.ss[i], mips.se[i], fusion.norm_depth) for i in range(nq)]
        fused = False  # the statistics are in hand
    elif unit is Unit.PHRASE or scope_rows is not None:
        rest = index.search_phrases(
            qs,
            qe,
            top_k=depth,
            scope_rows=scope_rows,
            max_words=stage.max_words,
            nprobe=stage.nprobe,
            lexical=lexical,
            fusion=fusion,
        )
    else:
        rest = None
    found: list[list[UnitHit]] = []
    if rest is not None:
        tops = [
            first_rows(index.table.row[p.start], n, skip, scores=p.score, margin=stage.margin)
            for p in rest
        ]
        if stats is not None:
            stats.extend(
                UnitSearchStats(1, depth, min(k, len(p)), False, scope_rows is not None)
                for p in rest
            )
    else:
        found, st = index.search_units(
            qs,
            qe,
            max(k, n),
            unit,
            depth=depth,
            max_depth=stage.max_depth,
            exact=stage.exact,
            max_words=stage.max_words,
            nprobe=stage.nprobe,
            lexical=lexical,
            fusion=fusion,
        )
        tops = [
            first_rows(
                index.table.row[[h.start for h in f]],
                n,
                skip,
                scores=np.asarray([h.score for h in f]),
                margin=stage.margin,
            )
            for f in found
        ]
        if stats is not None:
            stats.extend(st)
    if fused:
        assert fusion is not None
        # the question's statistics, as the first stage took them (its top MIPS scores)
        m = mips_scored(index, qs, qe, fusion.norm_depth, stage.nprobe)
        dense = [dense_stats(m.ss[i], m.se[i], fusion.norm_depth) for i in range(nq)]
    return rest, found, tops, dense


def _best_spans(
    index: PhraseIndex,
    rest: list[Phrases] | None,
    found: list[list[UnitHit]],
    tops: list[list[int]],
) -> dict[int, tuple[int, int]]:
    """The characters of each re-scored passage's best first-stage phrase, for each question
    re-scoring it (their hull when several do)."""
    table = index.table
    spans: dict[int, tuple[int, int]] = {}
    for i, top in enumerate(tops):
        if not top:
            continue
        if rest is not None:
            starts, ends = rest[i].start, rest[i].end
        else:
            starts = np.asarray([h.start for h in found[i]], np.int64)
            ends = np.asarray([h.end for h in found[i]], np.int64)
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
    index: PhraseIndex,
    top: list[int],
    rest: list[Phrases] | None,
    found: list[list[UnitHit]],
    i: int,
    k: int,
    unit: Unit,
) -> list[UnitHit]:
    """Question ``i``'s first-stage hits outside its re-scored passages ``top``: from its
    phrases (``rest``), or else from the units its first stage found."""
    table = index.table
    if rest is not None:
        p = rest[i]
        outside = ~np.isin(table.row[p.start], np.asarray(top, np.int64))
        left = Phrases(p.start[outside], p.end[outside], p.score[outside])
        return aggregate(table, index.store, left, k, unit)
    done = set(top)
    return [h for h in found[i] if int(table.row[h.start]) not in done]


def _merged(first: list[Hit], after: list[Hit], unit: Unit, k: int) -> list[Hit]:
    """The re-scored hits, then the first stage's others (a document once), ``k`` at most."""
    if unit is Unit.DOCUMENT:
        docs = {h.doc_id for h in first}
        after = [h for h in after if h.doc_id not in docs]
    return (first + after)[:k]
