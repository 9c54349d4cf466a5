"""Re-scoring over every token of the re-encoded passages (``rescore_tokens``, issue 37).

A compressed index at a low keep fraction re-scored with ``rescore_tokens="all"`` (or
``"model"``, the model's own filter threshold) must rank the spans of its first ``N``
passages as a brute-force float32 scoring of every (start, end) pair of those passages
does -- the same argmax span and score, the fused BM25 part included and the same phrase
length limit -- for ``N`` = 1 and 3, and with deleted (tombstoned) rows, which are
skipped when the ``N`` passages are picked.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_phrase_helpers import RESCORE_QUESTIONS, fixture_index, float32_index

from anygrain.api import delete_documents
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.dump import keep_flags
from anygrain.phrase.lexical import dense_stats, fuse
from anygrain.phrase.rescore import encode_rows, first_rows
from anygrain.phrase.rescore_settings import RescoreTokens
from anygrain.phrase.units import mips_scored

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = RESCORE_QUESTIONS


@pytest.fixture(scope="module")
def built(
    model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PhraseIndex]:
    """An uncompressed index of every token (keep 1) and a 4-bit copy keeping a quarter."""
    root = tmp_path_factory.mktemp("rescore-tokens")
    # float32 dumps: re-encoding is checked against a float32 brute force
    full = float32_index(squad, model_dir, root / "full", keep=1.0)
    # built, not refiltered: it holds its corpus, so documents can be deleted from it
    small = fixture_index(squad, model_dir, root / "sq4", compress="sq4", keep=0.25, bf16=False,
                          int8=False)  # fmt: skip
    return {"full": full, "small": small}


def _brute(
    index: PhraseIndex, rows: list[int], q_start: np.ndarray, q_end: np.ndarray, threshold: Any
) -> list[tuple[float, int, int, int]]:
    """Every (start, end) pair of passages ``rows`` scored in float32 from float16-rounded
    vectors (as a dump stores them): ``(dense score, row, char start, char end)``."""
    model = index.model
    enc = model.encode_passages(index.store.texts(rows), index.store.titles(rows), batch_size=1)
    out = []
    for r, p in zip(rows, enc, strict=True):
        flags = keep_flags(p, threshold)
        s_ok, e_ok = (flags & 1) > 0, (flags & 2) > 0
        ss = p.start.astype(np.float16).astype(np.float32) @ q_start.astype(np.float32)
        se = p.end.astype(np.float16).astype(np.float32) @ q_end.astype(np.float32)
        for i in np.flatnonzero(s_ok):
            for j in np.flatnonzero(e_ok):
                if j >= i and p.wlast[j] - p.wfirst[i] < index.max_words:
                    out.append((float(ss[i] + se[j]), r, int(p.cs[i]), int(p.ce[j])))
    return out


def _check(
    index: PhraseIndex,
    n: int,
    tokens: str,
    sparse_weight: float | None,
    threshold: Any = None,
    skip: frozenset[int] = frozenset(),
) -> None:
    """``index`` re-scored over ``tokens`` gives, per question, the brute-force best span of
    its first ``n`` live passages (fused as the first stage fuses) with its score."""
    got = index.search(QUESTIONS, 5, rescore=n, rescore_tokens=tokens, sparse_weight=sparse_weight)
    enc = index.encode(QUESTIONS)
    qs, qe = enc.vectors
    fusion = index.search_fusion(sparse_weight)
    lex = index.lexical.queries(QUESTIONS, fusion) if fusion and index.lexical else None
    first = index.search_phrases(qs, qe, top_k=100, lexical=lex, fusion=fusion if lex else None)
    mips = mips_scored(index, qs, qe, fusion.norm_depth, None) if fusion is not None else None
    for i, p in enumerate(first):
        rows = first_rows(index.table.row[p.start], n, skip)
        assert 0 < len(rows) <= n  # a tiny index may find fewer passages
        pairs = _brute(index, rows, qs[i], qe[i], threshold)
        dense = np.array([x[0] for x in pairs])
        if fusion is not None and lex is not None and mips is not None:
            st = dense_stats(mips.ss[i], mips.se[i], fusion.norm_depth)
            score = fuse(dense, np.array([x[1] for x in pairs]), st, lex[i], fusion)
        else:
            score = dense.astype(np.float32)
        best = int(np.argmax(score))
        top = got[i][0]
        assert top.passage_row not in skip and top.passage_row in rows
        assert top.score == pytest.approx(float(score[best]), abs=2e-3)
        second = np.sort(score)[-2] if len(score) > 1 else -np.inf
        if score[best] - second > 2e-3:  # a clear argmax: the same span
            assert (top.passage_row, top.span) == (pairs[best][1], pairs[best][2:])


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("sparse_weight", [0.0, None])
def test_all_tokens_is_the_brute_force_best_span(
    built: dict[str, PhraseIndex], n: int, sparse_weight: float | None
) -> None:
    _check(built["small"], n, "all", sparse_weight)


def test_model_tokens_follow_the_models_threshold(
    built: dict[str, PhraseIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = built["small"]
    rows = np.array([0, 1, 2], np.int64)
    # the tiny model records no threshold: its own filter keeps every token
    assert small.model.config.filter_threshold is None
    all_ = encode_rows(small, rows, tokens="all").table
    model = encode_rows(small, rows, tokens="model").table
    stored = encode_rows(small, rows, tokens="stored").table
    assert np.array_equal(all_.cs, model.cs) and len(stored) < len(all_)
    # the index stored a quarter: its tokens are among every token, same vectors
    at = {(r, c): t for t, (r, c) in enumerate(zip(all_.row, all_.cs, strict=True))}
    idx = [at[(r, c)] for r, c in zip(stored.row, stored.cs, strict=True)]
    assert np.array_equal(all_.start[idx], stored.start)
    enc = _encoded(small, rows)
    tau = float(np.quantile(np.concatenate([p.filter_logits[:, 0] for p in enc]), 0.5))
    monkeypatch.setattr(small.model.config, "filter_threshold", tau)
    model = encode_rows(small, rows, tokens="model").table
    kept = np.concatenate([p.cs[keep_flags(p, tau) > 0] for p in enc])
    assert np.array_equal(model.cs, kept) and len(model) < len(all_)
    _check(small, 3, "model", None, threshold=tau)


def _encoded(index: PhraseIndex, rows: np.ndarray) -> list[Any]:
    return index.model.encode_passages(index.store.texts(rows), index.store.titles(rows))


def test_deleted_rows_are_skipped(built: dict[str, PhraseIndex], tmp_path: Path) -> None:
    """The first live passages are re-scored: a deleted document's rows never take a slot."""
    path = tmp_path / "small"
    shutil.copytree(built["small"].path, path)
    idx = Index.load(path)
    assert isinstance(idx, PhraseIndex)
    top = idx.search(QUESTIONS[:1], 1, rescore=0)[0][0]
    delete_documents(path, [top.doc_id])
    idx = Index.load(path)
    assert isinstance(idx, PhraseIndex)
    skip = idx.tombstones.rows
    assert top.passage_row in skip
    for n in (1, 3):
        _check(idx, n, "all", None, skip=skip)
        got = idx.search(QUESTIONS, 5, rescore=n, rescore_tokens="all")
        assert all(h.passage_row not in skip for hs in got for h in hs)


def test_all_tokens_match_the_keep_1_index_scores(built: dict[str, PhraseIndex]) -> None:
    """On the re-scored passages, the 25% index re-scored over all tokens scores as the
    uncompressed keep-1 index's exhaustive search of them."""
    from anygrain.phrase.search import search_scope

    small, full = built["small"], built["full"]
    got = small.search(QUESTIONS, 3, rescore=2, rescore_tokens="all", sparse_weight=0.0)
    qs, qe = small.encode(QUESTIONS).vectors
    first = small.search_phrases(qs, qe, top_k=100)
    for i, p in enumerate(first):
        rows = first_rows(small.table.row[p.start], 2)
        want = search_scope(full.table, qs[i], qe[i], rows, full.max_words)
        s, e = int(want.start[0]), int(want.end[0])
        top = got[i][0]
        assert top.score == pytest.approx(float(want.score[0]), abs=2e-3)
        if len(want) < 2 or want.score[0] - want.score[1] > 2e-3:
            assert top.passage_row == int(full.table.row[s])
            assert top.span == (int(full.table.cs[s]), int(full.table.ce[e]))


def test_rescore_tokens_are_checked(built: dict[str, PhraseIndex]) -> None:
    small = built["small"]
    with pytest.raises(AnygrainError, match="rescore_tokens.*stored|model|all"):
        small.search(QUESTIONS[:1], 3, rescore=1, rescore_tokens="every")
    with pytest.raises(AnygrainError, match="rescore_tokens"):
        small.check_search_options({"rescore_tokens": "some"})
    assert RescoreTokens.parse(None) is RescoreTokens.STORED
    # bfloat16 re-encoding: the same passages, scores within bf16's precision
    a = small.search(QUESTIONS, 1, rescore=1, rescore_tokens="all")
    b = small.search(QUESTIONS, 1, rescore=1, rescore_tokens="all", rescore_bf16=True)
    for x, y in zip(a, b, strict=True):
        assert x[0].passage_row == y[0].passage_row


def test_cli_takes_rescore_tokens(built: dict[str, PhraseIndex], squad: Path) -> None:
    from typer.testing import CliRunner

    from anygrain.cli.main import app

    path = str(built["small"].path)
    r = CliRunner().invoke(
        app,
        [
            "search",
            path,
            "Who created Python?",
            "--rescore",
            "2",
            "--rescore-tokens",
            "all",
            "--rescore-bf16",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        app,
        [
            "eval",
            path,
            "--questions",
            f"squad:{squad}",
            "--rescore",
            "1",
            "--rescore-tokens",
            "model",
            "--json",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["search", path, "x", "--rescore", "1", "--rescore-tokens", "no"])
    assert r.exit_code != 0 and "stored|model|all" in r.output
