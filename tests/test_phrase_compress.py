"""Compressed phrase indexes (--compress) and unit search in rounds, on a tiny fixture index.

Unit search is checked against a brute-force reference: every valid span scored,
each unit's max taken, units ranked.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_phrase_search import brute_force
from typer.testing import CliRunner

from anygrain.api import evaluate_index, load_questions
from anygrain.cli.main import app
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit, UnitSearchStats
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.compress import Compress, DecodedVectors, compressed_factory
from anygrain.phrase.refilter import refilter
from anygrain.phrase.search import sentence_of

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = [
    "Who created Python?",
    "How long is the Great Wall?",
    "Where did the café open?",
    "How far away is Alpha Centauri?",
    "中国的首都是哪里？",
]


@pytest.fixture(scope="module")
def built(
    model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PhraseIndex]:
    root = tmp_path_factory.mktemp("idx")
    out = {}
    for c in Compress:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FAISS: PQ trained on a hundred vectors
            # the first stage's mechanics at each code: no re-scoring, half the vectors
            out[c.value] = PhraseIndex.build_from(
                f"squad:{squad}",
                root / c.value,
                model=model_dir,
                compress=c,
                keep=0.5,
                rescore=0,
                progress=False,
            )
    return out


# --- unit search against brute force ----------------------------------------------------------


def _unit_key(idx: PhraseIndex, unit: Unit, tok: int) -> object:
    r = int(idx.table.row[tok])
    if unit is Unit.PASSAGE:
        return r
    if unit is Unit.DOCUMENT:
        return idx.store.column("doc_id", [r])[0]
    starts = idx.store.column("sent_starts", [r])[0] or []
    return (r, sentence_of(list(starts), int(idx.table.cs[tok])))


def brute_force_units(
    idx: PhraseIndex, qs: np.ndarray, qe: np.ndarray, unit: Unit, k: int
) -> list[tuple[object, float]]:
    """Every span scored (start_i·q_s + end_j·q_e, at most L words), each unit's max, ranked."""
    rows = list(range(len(idx.table.passage_ptr) - 1))
    spans = brute_force(idx.table, qs, qe, rows, idx.max_words)
    best: dict[object, float] = {}
    for (i, _), sc in spans.items():
        key = _unit_key(idx, unit, i)
        best[key] = max(best.get(key, -np.inf), sc)
    return sorted(best.items(), key=lambda kv: -kv[1])[:k]


def _got_units(
    idx: PhraseIndex, qs: np.ndarray, qe: np.ndarray, unit: Unit, k: int, **kw: Any
) -> tuple[list[tuple[object, float]], UnitSearchStats]:
    found, stats = idx.search_units(qs[None], qe[None], k, unit, **kw)
    return [(_unit_key(idx, unit, h.start), h.score) for h in found[0]], stats[0]


@pytest.mark.parametrize("compress", [c.value for c in Compress])
@pytest.mark.parametrize("unit", [Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT])
@pytest.mark.parametrize("k", [1, 3])
def test_exact_unit_search_equals_brute_force(
    built: dict[str, PhraseIndex], compress: str, unit: Unit, k: int
) -> None:
    idx = built[compress]
    assert idx.exact_mips  # flat scans of the vectors span scoring reads
    qs, qe = idx.encode_queries(QUESTIONS)
    for i in range(len(QUESTIONS)):
        want = brute_force_units(idx, qs[i], qe[i], unit, k)
        for depth in (1, 4, 100):
            got, st = _got_units(idx, qs[i], qe[i], unit, k, depth=depth, exact=True)
            assert [g[0] for g in got] == [w[0] for w in want], (QUESTIONS[i], depth)
            np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], atol=1e-4)
            assert st.exact and not st.exhausted and st.units == len(want)


def test_unit_search_retries_deeper_until_k_units(built: dict[str, PhraseIndex]) -> None:
    idx = built["none"]
    qs, qe = idx.encode_queries(QUESTIONS[:2])
    found, stats = idx.search_units(qs, qe, 4, Unit.PASSAGE, depth=1)
    for f, st in zip(found, stats, strict=True):
        assert len(f) == 4 == st.units
        assert st.rounds > 1 and st.depth == 2 ** (st.rounds - 1) and not st.exhausted
    # A depth bound below what 4 passages need: exhausted, with what was found.
    found, stats = idx.search_units(qs, qe, 4, Unit.PASSAGE, depth=1, max_depth=1)
    assert all(st.rounds == 1 and st.depth == 1 and st.exhausted for st in stats)
    assert all(len(f) < 4 for f in found)
    # More units than exist: rounds up to the index size, then exhausted.
    n_passages = len(idx.corpus)
    found, stats = idx.search_units(qs, qe, n_passages + 5, Unit.PASSAGE, depth=1)
    assert all(st.exhausted and st.units == n_passages for st in stats)
    assert all(st.depth == max(len(idx.start_ids), len(idx.end_ids)) for st in stats)


def test_exact_falls_back_to_covering_k_units_over_ivf(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS: two cells trained on a hundred vectors
        idx = PhraseIndex.build_from(
            f"squad:{squad}",
            tmp_path / "ivf",
            model=model_dir,
            factory="IVF2,SQ8",
            compress="sq8",
            keep=0.5,
            progress=False,
        )
    idx = Index.load(idx.path)  # memory-mapped inverted lists, decoded through a direct map
    assert isinstance(idx, PhraseIndex) and isinstance(idx.table.start, DecodedVectors)
    got = idx.table.end[idx.end_ids[:5]]  # the first read makes the direct map (not on open)
    want = idx.end_index.index.reconstruct_batch(np.arange(5, dtype=np.int64))
    np.testing.assert_array_equal(got, want)
    assert not idx.exact_mips  # IVF scans only some cells: nothing can be proven
    qs, qe = idx.encode_queries(QUESTIONS[:2])
    found, stats = idx.search_units(qs, qe, 3, Unit.PASSAGE, depth=1, exact=True)
    assert all(
        len(f) == 3 and not st.exact and not st.exhausted
        for f, st in zip(found, stats, strict=True)
    )
    assert all(st.depth <= 64 * 3 for st in stats)


def test_search_reports_stats_and_eval_summarises_them(
    built: dict[str, PhraseIndex], squad: Path
) -> None:
    idx = built["none"]
    st: list[UnitSearchStats] = []
    # pure dense: BM25's top passages would fill the first round
    hits = idx.search(QUESTIONS[:3], 3, unit=Unit.SENTENCE, top_k=1, stats=st, sparse_weight=0)
    assert len(st) == 3 and all(len(h) == 3 for h in hits)
    assert all(s.rounds >= 2 for s in st)
    # passage-grain defaults cut at 20 (PASSAGE_METRICS): a k of 3 names its metrics
    report = evaluate_index(
        idx, f"squad:{squad}", k=3, unit="passage", metrics=["top@1", "top@3"], progress=False
    )
    us = report.to_dict()["unit_search"]
    assert us["queries"] == report.n_questions and us["mean_rounds"] >= 1
    assert sum(us["rounds"].values()) == us["queries"]
    phrase = evaluate_index(idx, f"squad:{squad}", k=3, progress=False)
    assert "unit_search" not in phrase.to_dict()


# --- compression -----------------------------------------------------------------------------


def test_factories_degrade_for_tiny_indexes() -> None:
    assert compressed_factory("none", 10, 32) is None
    assert compressed_factory("sq8", 500, 384) == "SQ8"
    assert compressed_factory("sq4", 500_000, 384) == "IVF707,SQ4"
    assert compressed_factory("opq-pq", 5_000_000, 384) == "OPQ48,IVF2236,PQ48"
    assert compressed_factory("opq-pq", 1000, 384, pq_m=96) == "OPQ96,PQ96"
    assert compressed_factory("opq-pq", 100, 32) == "PQ4x6"  # too few points for OPQ, 8 bits
    with pytest.raises(AnygrainError, match="divide"):
        compressed_factory("opq-pq", 1000, 384, pq_m=50)


def test_compressed_indexes_load_without_the_dump_and_search(
    built: dict[str, PhraseIndex],
) -> None:
    for c in ("sq8", "sq4", "opq-pq"):
        idx = Index.load(built[c].path)
        assert isinstance(idx, PhraseIndex)
        base = idx.path / "phrase"
        assert not (base / "start.npy").exists() and not (base / "end.npy").exists()
        s = idx.manifest["settings"]
        assert s["compress"] == c and s["dump"] is False and s["span_vectors"] == "codes"
        assert isinstance(idx.table.start, DecodedVectors)
        # span vectors are the FAISS reconstructions of the codes
        toks = idx.start_ids[:7]
        want = idx.start_index.index.reconstruct_batch(np.arange(7, dtype=np.int64))
        np.testing.assert_array_equal(idx.table.start[toks], want)
        hits = idx.search(QUESTIONS, 3)
        assert all(len(h) == 3 and h[0].span is not None for h in hits)
        for u in (Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT):
            assert all(idx.search(QUESTIONS[:2], 2, unit=u))


def test_sq8_agrees_with_uncompressed(built: dict[str, PhraseIndex], squad: Path) -> None:
    full, sq8 = built["none"], built["sq8"]
    qs = [q.text for q in load_questions(f"squad:{squad}")]
    a = [(h[0].passage_row, h[0].span) for h in full.search(qs, 1)]
    b = [(h[0].passage_row, h[0].span) for h in sq8.search(qs, 1)]
    agree = np.mean([x == y for x, y in zip(a, b, strict=True)])
    assert agree >= 0.8, (a, b)
    pa = [h[0].passage_row for h in full.search(qs, 1, unit="passage")]
    pb = [h[0].passage_row for h in sq8.search(qs, 1, unit="passage")]
    assert np.mean([x == y for x, y in zip(pa, pb, strict=True)]) >= 0.8


def test_bytes_shrink(built: dict[str, PhraseIndex]) -> None:
    c = {k: v.manifest["counts"] for k, v in built.items()}
    assert c["none"]["dump_bytes"] > 0 and c["sq8"]["dump_bytes"] == 0
    for k in ("sq8", "sq4", "opq-pq"):
        assert c[k]["bytes_per_passage"] < c["none"]["bytes_per_passage"], k
    # (PQ codebooks outweigh a hundred codes, so only SQ's FAISS files shrink at this size)
    for k in ("sq8", "sq4"):
        assert c[k]["faiss_bytes"] < c["none"]["faiss_bytes"], k
    assert c["sq4"]["bytes"] < c["sq8"]["bytes"]
    for k, idx in built.items():  # the manifest counts what is on disk
        on_disk = sum(f.stat().st_size for f in (idx.path / "phrase").iterdir() if f.is_file())
        assert c[k]["bytes"] == on_disk


def test_keep_dump_and_refilter(built: dict[str, PhraseIndex], tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="float16 dump"):
        refilter(built["sq8"], tmp_path / "r0", keep=0.5, progress=False)
    sub = refilter(built["none"], tmp_path / "r1", keep=0.5, compress="sq8", progress=False)
    assert sub.manifest["settings"]["compress"] == "sq8"
    assert isinstance(sub.table.start, DecodedVectors)
    assert sub.manifest["settings"]["refiltered_from"]["path"] == str(built["none"].path)
    kept = refilter(
        built["none"], tmp_path / "r2", keep=0.5, compress="sq8", keep_dump=True, progress=False
    )
    assert (kept.path / "phrase" / "start.npy").exists()
    # compressed spans are scored from codes even with the dump kept
    assert kept.manifest["settings"]["span_vectors"] == "codes"
    assert isinstance(kept.table.start, DecodedVectors)
    assert sub.search(QUESTIONS[:1], 2)[0]
    res = CliRunner().invoke(
        app,
        ["refilter", str(built["none"].path), "--out", str(tmp_path / "r3")]
        + ["--keep", "1", "--compress", "sq4", "-q"],
    )
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "r3" / "index.json").read_text())
    assert m["settings"]["compress"] == "sq4" and m["settings"]["dump"] is False
    assert m["counts"]["start_vectors"] == built["none"].manifest["counts"]["start_vectors"]


def test_cli_index_search_eval_compressed(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    r = CliRunner()
    out = tmp_path / "cli-sq8"
    args = ["index", f"squad:{squad}", "--out", str(out), "--kind", "phrase"]
    res = r.invoke(app, [*args, "--model", str(model_dir), "--compress", "sq8", "-q"])
    assert res.exit_code == 0, res.output
    m = json.loads((out / "index.json").read_text())
    assert m["settings"]["compress"] == "sq8" and not (out / "phrase" / "start.npy").exists()
    res = r.invoke(app, ["search", str(out), "Who created Python?", "--unit", "passage", "--stats"])
    assert res.exit_code == 0 and "round(s)" in res.output, res.output
    res = r.invoke(
        app, ["eval", str(out), "--questions", f"squad:{squad}", "--unit", "passage", "--json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout.strip().splitlines()[-1])
    assert d["unit_search"]["queries"] == d["n_questions"]
    kept = tmp_path / "cli-kept"
    res = r.invoke(
        app,
        [
            "index",
            f"squad:{squad}",
            "--out",
            str(kept),
            "--kind",
            "phrase",
            "--model",
            str(model_dir),
            "--compress",
            "sq4",
            "--keep-dump",
            "-q",
        ],
    )
    assert res.exit_code == 0 and (kept / "phrase" / "start.npy").exists(), res.output
    res = r.invoke(
        app,
        ["index", f"squad:{squad}", "--out", str(tmp_path / "b"), "--compress", "sq8", "-q"],
    )
    # the library names the kind and the option it does not take
    assert res.exit_code == 2 and "'bm25' does not take" in res.output
    assert "option 'compress';" in res.output  # only what was given


# --- quantization-aware query-side training ---------------------------------------------------


def test_query_side_training_targets_the_decoded_vectors(
    model_dir: Path, squad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anygrain.train.phrase.query_side as qsmod
    from anygrain.train.phrase.config import PhraseQuerySideConfig
    from anygrain.train.phrase.query_side import train_phrase_query_side

    idx = PhraseIndex.build_from(
        f"squad:{squad}",
        tmp_path / "sq8",
        model=model_dir,
        compress="sq8",
        keep_dump=True,  # kept only to show the targets are not the float16 vectors
        progress=False,
    )
    seen: list[Any] = []
    real_positives, real_loss = qsmod.positives, qsmod.candidate_loss

    def positives(index: Any, phrases: Any, *a: Any) -> Any:
        seen.append([phrases])
        return real_positives(index, phrases, *a)

    def candidate_loss(q_s: Any, q_e: Any, sv: Any, ev: Any, pos: Any) -> Any:
        seen[-1].extend([sv.numpy().copy(), ev.numpy().copy()])
        return real_loss(q_s, q_e, sv, ev, pos)

    monkeypatch.setattr(qsmod, "positives", positives)
    monkeypatch.setattr(qsmod, "candidate_loss", candidate_loss)
    cfg = PhraseQuerySideConfig(
        index=str(idx.path),
        train=[f"squad:{squad}"],
        out=str(tmp_path / "qs"),
        loss="both",
        epochs=1,
        batch_size=4,
        top_k=20,
        checkpoint_every=0,
    )
    out = train_phrase_query_side(cfg, progress=False)
    assert (out / "anygrain_phrase.json").exists()
    used = [s for s in seen if len(s) == 3]
    assert used, "no question had a positive among its candidates"
    fs, fe = idx.start_index.index, idx.end_index.index
    pos_s = {int(t): i for i, t in enumerate(idx.start_ids)}
    pos_e = {int(t): i for i, t in enumerate(idx.end_ids)}
    dump = np.load(idx.path / "phrase" / "start.npy")
    for ph, sv, ev in used:
        want_s = fs.reconstruct_batch(np.array([pos_s[int(t)] for t in ph.start], np.int64))
        want_e = fe.reconstruct_batch(np.array([pos_e[int(t)] for t in ph.end], np.int64))
        np.testing.assert_array_equal(sv, want_s)
        np.testing.assert_array_equal(ev, want_e)
        assert not np.array_equal(sv, dump[ph.start].astype(np.float32))
    # the fine-tuned question side searches the compressed index
    again = Index.load(idx.path, model=out)
    assert again.search(QUESTIONS[:1], 1)[0]


@pytest.mark.parametrize("compress", [c.value for c in Compress])
def test_score_rows_is_each_passages_brute_force_best_phrase(
    built: dict[str, PhraseIndex], compress: str
) -> None:
    """The per-passage score hybrids fuse: the max over every span of that passage."""
    idx = built[compress]
    qs, qe = idx.encode_queries(QUESTIONS)
    n = len(idx.corpus)
    rows = np.full((len(QUESTIONS), n + 1), -1, dtype=np.int64)
    rows[:, :n] = np.arange(n)[::-1]  # any order, with one padding column
    got = idx.score_rows(qs, qe, rows)
    assert got.shape == rows.shape and np.isneginf(got[:, n]).all()
    for i in range(len(QUESTIONS)):
        want = dict(brute_force_units(idx, qs[i], qe[i], Unit.PASSAGE, n))
        for j in range(n):
            np.testing.assert_allclose(got[i, j], want[int(rows[i, j])], atol=1e-4)
