"""The phrase model on disk, the phrase index (dump, FAISS, load checks), search and eval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_phrase_helpers import make_tiny_model
from test_phrase_search import brute_force
from typer.testing import CliRunner

from anygrain.api import evaluate_index, load_questions
from anygrain.cli.main import app
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Unit
from anygrain.index.base import PASSAGE_METRICS, Index
from anygrain.index.settings import BuildOptions
from anygrain.phrase import PhraseEncoder, PhraseIndex, QuestionEncoderKind
from anygrain.phrase.build import PhraseSettings, write_index
from anygrain.phrase.model import MODEL_CONFIG

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def model_dir(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


@pytest.fixture(scope="module")
def index(model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory) -> PhraseIndex:
    out = tmp_path_factory.mktemp("idx") / "phrase"
    # The settings the main CLI passes to every index kind.
    idx = Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        split="auto",
        lang=None,
        progress=False,
        compress="none",  # the research index: every vector, float16, the dump kept
        keep=1.0,
    )
    assert isinstance(idx, PhraseIndex)
    return idx


def test_the_default_phrase_index_is_compressed_and_filtered(
    model_dir: Path, squad: Path, index: PhraseIndex, tmp_path: Path
) -> None:
    """No options: 8-bit codes of about half the vectors, no float16 dump kept, no
    re-scoring; ``compress="pq", keep=0.25`` records the re-scoring its codes need."""
    from anygrain.phrase.rescore_settings import DEFAULT_RESCORE, DEFAULT_RESCORE_MARGIN

    idx = PhraseIndex.build_from(f"squad:{squad}", tmp_path / "d", model=model_dir, progress=False)
    s, c = idx.manifest["settings"], idx.manifest["counts"]
    assert s["compress"] == "sq8" and s["keep"] == 0.5 and s["dump"] is False
    assert s.get("rescore") is None and idx.rescore == 0
    assert not (idx.path / "phrase" / "start.npy").exists()
    full = index.manifest["counts"]
    kept = (c["start_vectors"] + c["end_vectors"]) / (full["start_vectors"] + full["end_vectors"])
    assert 0.4 < kept < 0.6
    assert c["bytes_per_passage"] < full["bytes_per_passage"] / 2
    assert all(hits for hits in idx.search(["Who created Python?"], 3))
    small = PhraseIndex.build_from(
        f"squad:{squad}", tmp_path / "pq", model=model_dir, compress="pq", keep=0.25, progress=False
    )
    s = small.manifest["settings"]
    assert (s["compress"], s["keep"], s["rescore"], s["rescore_margin"], s["rescore_tokens"]) == (
        "pq",
        0.25,
        DEFAULT_RESCORE,
        DEFAULT_RESCORE_MARGIN,
        "all",
    )
    assert small.manifest["counts"]["bytes_per_passage"] < c["bytes_per_passage"]


# --- the model on disk ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(QuestionEncoderKind))
def test_model_round_trip_gives_the_same_vectors(
    tiny: Path, tmp_path: Path, kind: QuestionEncoderKind
) -> None:
    m = PhraseEncoder.from_pretrained(
        tiny, question_encoder=kind, max_passage_length=40, doc_stride=10
    )
    with torch.no_grad():  # move the heads off the identity so saving them matters
        m.start_head.weight.add_(0.1)
        m.q_start_head.apply(lambda mod: mod.weight.add_(0.1) if hasattr(mod, "weight") else None)
    texts, titles = ["Python was created by Guido van Rossum."], ["Python"]
    before = m.encode_passages(texts, titles)[0]
    q_before = m.encode_questions(["Who created Python?"])
    m.save(tmp_path / "m")
    loaded = PhraseEncoder.load(tmp_path / "m")
    after = loaded.encode_passages(texts, titles)[0]
    q_after = loaded.encode_questions(["Who created Python?"])
    assert loaded.config == m.config and loaded.config.question_encoder is kind
    np.testing.assert_allclose(after.start, before.start, atol=1e-6)
    np.testing.assert_allclose(after.filter_logits, before.filter_logits, atol=1e-6)
    np.testing.assert_allclose(q_after[0], q_before[0], atol=1e-6)
    np.testing.assert_allclose(q_after[1], q_before[1], atol=1e-6)
    assert (
        tmp_path / "m" / ("question_start" if kind is QuestionEncoderKind.SEPARATE else "question")
    ).is_dir()


def test_identity_heads_start_from_the_encoder_states(tiny: Path) -> None:
    m = PhraseEncoder.from_pretrained(tiny)
    enc = m.collate(m.windows(["Some passage text."], ["T"]))
    with torch.no_grad():
        s, e, _ = m.phrase_forward(**enc)
        h = m.phrase(**enc).last_hidden_state
    assert torch.allclose(s, h, atol=1e-6) and torch.allclose(e, h, atol=1e-6)


def test_loading_validates_config_and_weights(model_dir: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    cfg = json.loads((bad / MODEL_CONFIG).read_text())
    (bad / MODEL_CONFIG).write_text(json.dumps({**cfg, "format_version": 99}))
    with pytest.raises(AnygrainError, match="format version"):
        PhraseEncoder.load(bad)
    (bad / MODEL_CONFIG).write_text(json.dumps({**cfg, "phrase_fingerprint": "0" * 16}))
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        PhraseEncoder.load(bad)
    (bad / MODEL_CONFIG).write_text(json.dumps({**cfg, "bogus": 1}))
    with pytest.raises(AnygrainError, match="unknown"):
        PhraseEncoder.load(bad)
    with pytest.raises(AnygrainError, match="not an anygrain phrase model"):
        PhraseEncoder.load(tmp_path)


# --- the index ----------------------------------------------------------------------------------


def test_manifest_records_model_corpus_and_sizes(index: PhraseIndex, model_dir: Path) -> None:
    m = index.manifest
    assert m["kind"] == "phrase"
    assert (
        m["model"]["fingerprint"]
        == json.loads((model_dir / MODEL_CONFIG).read_text())["phrase_fingerprint"]
    )
    assert m["corpus"]["checksum"] == index.corpus.checksum
    assert m["settings"]["max_phrase_words"] == 4 and m["settings"]["threshold"] is None
    c = m["counts"]
    assert c["passages"] == 5 and c["tokens_kept"] == len(index.table)
    assert (
        c["start_vectors"] == index.start_index.ntotal
        and c["end_vectors"] == index.end_index.ntotal
    )
    assert c["bytes_per_passage"] > 0 and c["vectors_per_passage"] > 0
    # Stored tokens are word starts/ends only, in passage then text order.
    t = index.table
    assert np.all(np.diff(t.row) >= 0) and np.all(t.start_ok | t.end_ok)


def test_scope_search_is_exact_over_the_stored_vectors(index: PhraseIndex, squad: Path) -> None:
    qs = load_questions(f"squad:{squad}")
    texts = [q.text for q in qs]
    rows = [[index.corpus.row_of(q.gold[0])] for q in qs]
    q_s, q_e = index.encode_queries(texts)
    hits = index.search(texts, 3, scope_rows=rows, sparse_weight=0)  # the dense score alone
    for i, q in enumerate(qs):
        ref = brute_force(index.table, q_s[i], q_e[i], rows[i], index.max_words)
        best = max(ref.values())
        assert abs(hits[i][0].score - best) < 1e-3
        assert all(h.passage_id == q.gold[0] for h in hits[i])
        h = hits[i][0]
        assert h.unit is Unit.PHRASE and h.answer_text == h.text[h.span[0] : h.span[1]]  # type: ignore[index]
        assert len(h.answer_text.split()) <= index.max_words


def test_open_search_with_full_depth_equals_brute_force(index: PhraseIndex) -> None:
    texts = ["Who created Python?", "北京位于哪个平原？"]
    q_s, q_e = index.encode_queries(texts)
    found = index.search_phrases(q_s, q_e, top_k=len(index.table))
    every = list(range(len(index.corpus)))
    for i in range(2):
        ref = brute_force(index.table, q_s[i], q_e[i], every, index.max_words)
        assert abs(float(found[i].score[0]) - max(ref.values())) < 1e-3
        for s, e, sc in zip(
            found[i].start[:20], found[i].end[:20], found[i].score[:20], strict=True
        ):
            assert abs(ref[(int(s), int(e))] - float(sc)) < 1e-3


def test_coarser_units_take_the_max_over_their_phrases(index: PhraseIndex) -> None:
    texts = ["When was Python first released?"]
    q_s, q_e = index.encode_queries(texts)
    phrases = index.search_phrases(q_s, q_e, top_k=100)[0]
    best_by_row: dict[int, float] = {}
    for s, sc in zip(phrases.start, phrases.score, strict=True):
        r = int(index.table.row[s])
        best_by_row[r] = max(best_by_row.get(r, -np.inf), float(sc))
    hits = index.search(texts, 5, unit="passage", top_k=100, sparse_weight=0)[0]
    assert [h.passage_row for h in hits] == sorted(best_by_row, key=lambda r: -best_by_row[r])[:5]
    for h in hits:
        assert abs(h.score - best_by_row[h.passage_row]) < 1e-5 and h.span is None
    docs = index.search(texts, 5, unit=Unit.DOCUMENT, top_k=100, sparse_weight=0)[0]
    assert len({h.doc_id for h in docs}) == len(docs) and docs[0].score == hits[0].score
    sents = index.search(texts, 5, unit=Unit.SENTENCE, top_k=100, sparse_weight=0)[0]
    assert sents[0].score == hits[0].score and sents[0].span is not None


def test_dump_resumes_after_an_interruption(model_dir: Path, squad: Path, tmp_path: Path) -> None:
    store = CorpusStore.build(f"squad:{squad}", tmp_path / "corpus", progress=False)
    model = PhraseEncoder.load(model_dir)
    assert model.config.filter_threshold is None  # the default threshold keeps every token
    two = PhraseSettings(shard_size=2, sparse=False, compress="none", keep=1.0)
    quiet = BuildOptions(progress=False)

    def stop(i: int) -> None:
        if i == 1:
            raise KeyboardInterrupt

    work = tmp_path / "work"
    with pytest.raises(KeyboardInterrupt):
        write_index(tmp_path / "a", store, model, two, quiet, work=work, on_shard=stop)
    done = json.loads((work / "dump.json").read_text())["done"]
    assert sorted(done) == ["0", "1"]
    encoded: list[int] = []
    write_index(tmp_path / "a", store, model, two, quiet, work=work, on_shard=encoded.append)
    assert encoded == [2]  # shards 0 and 1 were not encoded again
    write_index(tmp_path / "b", store, model, two, quiet, work=tmp_path / "work-b")
    for name in ("start", "end", "tokens", "filter", "passage_ptr"):
        a = np.load(tmp_path / "a" / "phrase" / f"{name}.npy")
        b = np.load(tmp_path / "b" / "phrase" / f"{name}.npy")
        assert np.array_equal(a, b), name
    assert json.loads((tmp_path / "a" / "index.json").read_text())["timings"]["shards_resumed"] == 2
    # A dump started with another threshold is not mixed in: it starts again.
    redone: list[int] = []
    at_zero = PhraseSettings(threshold=0.0, shard_size=2, sparse=False)
    write_index(tmp_path / "c", store, model, at_zero, quiet, work=work, on_shard=redone.append)
    assert redone == [0, 1, 2]


def test_threshold_keeps_tokens_whose_filter_logit_passes(
    index: PhraseIndex, model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    tau = float(np.median(np.load(index.path / "phrase" / "filter.npy")[:, 0]))
    idx = PhraseIndex.build_from(
        f"squad:{squad}", tmp_path / "f", model=model_dir, threshold=tau, compress="none"
    )
    assert idx.manifest["settings"]["threshold"] == tau
    assert len(idx.table) < len(index.table)
    f = np.load(idx.path / "phrase" / "filter.npy").astype(np.float32)
    assert np.all(f[idx.table.start_ok, 0] >= tau - 1e-2) and np.all(
        f[idx.table.end_ok, 1] >= tau - 1e-2
    )


def test_loading_refuses_a_different_phrase_model(
    index: PhraseIndex, model_dir: Path, tiny: Path, tmp_path: Path
) -> None:
    assert isinstance(Index.load(index.path, model=model_dir), PhraseIndex)
    torch.manual_seed(1)
    other = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10).save(
        tmp_path / "other"
    )
    with pytest.raises(IndexMismatchError, match="not the one this index"):
        Index.load(index.path, model=other)
    with pytest.raises(AnygrainError, match="not a phrase model"):
        PhraseIndex.build_from("x", tmp_path / "y", model=tiny)


def test_evaluate_phrase_in_gold_passage_and_open_corpus(index: PhraseIndex, squad: Path) -> None:
    qs = load_questions(f"squad:{squad}")
    rc = evaluate_index(index, qs, k=5, scope="gold-passage", progress=False)
    assert set(rc.metrics) == {"em", "f1", "top@1", "top@5"} and rc.n_questions == len(qs)
    assert rc.n_evaluated["em"] == len(qs)
    open_ = evaluate_index(index.path, qs, k=5, progress=False)
    assert 0.0 <= open_.metrics["top@5"] <= 1.0
    # passage-grain results report the set every kind reports, k from the largest cutoff
    passages = evaluate_index(index, qs, unit="passage", progress=False)
    assert tuple(passages.metrics) == PASSAGE_METRICS and passages.k == 20
    with pytest.raises(AnygrainError, match="k=3 is smaller than the cutoff 20"):
        evaluate_index(index, qs, k=3, unit="passage", progress=False)
    # a cutoff above the old default k of 10 needs no -k (it failed with "k=10 is smaller")
    deep = evaluate_index(index, qs, metrics=["top@20"], progress=False)
    assert list(deep.metrics) == ["top@20"] and deep.k == 20
    assert evaluate_index(index, qs, progress=False).k == 10  # em,f1,top@1,top@10
    qs.items[0].gold = ["nope"]
    with pytest.raises(AnygrainError, match="not in the index"):
        evaluate_index(index, qs, k=5, scope="gold-passage", progress=False)


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_unit_metrics_in_one_gold_passage_are_refused(
    index: PhraseIndex, squad: Path, unit: str
) -> None:
    """One passage searched is one candidate passage: top@1 = top@20, a figure of nothing."""
    qs = load_questions(f"squad:{squad}")
    rep = evaluate_index(index, qs, unit=unit, scope="gold-passage", progress=False)
    assert list(rep.metrics) == ["em", "f1"]  # the default there: EM/F1 only
    for metrics in (["top@1"], ["em", "mrr@20"], ["recall@5"]):
        with pytest.raises(AnygrainError, match=f"at unit {unit} it has a single candidate"):
            evaluate_index(
                index, qs, unit=unit, scope="gold-passage", metrics=metrics, progress=False
            )
    # sentences of one passage still rank, and the whole corpus still has many passages
    sentences = evaluate_index(index, qs, unit="sentence", scope="gold-passage", progress=False)
    assert tuple(sentences.metrics) == PASSAGE_METRICS
    assert evaluate_index(index, qs, unit=unit, metrics=["top@1"], progress=False).metrics
    r = CliRunner().invoke(
        app,
        ["eval", str(index.path), "--questions", f"squad:{squad}", "--unit", unit]
        + ["--scope", "gold-passage", "--metrics", "top@1,top@20", "-q"],
    )
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "top@1, top@20 would be 1 or 0 at every cutoff" in text, r.output
    assert "(--metrics em,f1)" in text


def test_gold_passage_with_other_text_under_the_same_id_is_refused(
    index: PhraseIndex, squad: Path
) -> None:
    # ids such as Title_0 are positional: another file reuses them for other paragraphs
    qs = load_questions(f"squad:{squad}")
    qs.items[1].context = "London is the capital of England."
    with pytest.raises(AnygrainError, match=rf"{squad}.*other text than in this file"):
        evaluate_index(index, qs, k=5, scope="gold-passage", progress=False)


def test_truncated_array_or_swapped_model_in_the_index_is_refused(
    index: PhraseIndex, tiny: Path, tmp_path: Path
) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(index.path, broken)
    start = broken / "phrase" / "start.npy"
    start.write_bytes(start.read_bytes()[:-64])
    with pytest.raises(AnygrainError, match=r"start\.npy"):
        Index.load(broken)
    swapped = tmp_path / "swapped"
    shutil.copytree(index.path, swapped)
    torch.manual_seed(3)
    other = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10).save(
        tmp_path / "other"
    )
    bundled = swapped / "phrase" / "model"
    shutil.rmtree(bundled / "phrase")
    shutil.copytree(other / "phrase", bundled / "phrase")
    shutil.copy(other / "heads.safetensors", bundled / "heads.safetensors")
    # the checksums recorded at build time catch the swap first ...
    with pytest.raises(AnygrainError, match=r"heads\.safetensors: damaged"):
        Index.load(swapped)
    # ... and the fingerprint check still does when only sizes are checked
    with pytest.raises(IndexMismatchError, match="do not match the fingerprint"):
        Index.load(swapped, verify="sizes")


def test_cli_search_and_eval(index: PhraseIndex, squad: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["search", str(index.path), "Who created Python?", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(rows) == 2 and rows[0]["unit"] == "phrase" and "answer" in rows[0]
    r = runner.invoke(app, ["search", str(index.path), "Who created Python?", "--unit", "passage"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", str(index.path), "Who created Python?", "--unit", "phrase"])
    assert r.exit_code == 0 and "answer" in r.output, r.output
    r = runner.invoke(
        app,
        [
            "eval",
            str(index.path),
            "--questions",
            f"squad:{squad}",
            "--scope",
            "gold-passage",
            "--json",
            "-k",
            "5",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["scope"] == "gold-passage" and {"em", "f1", "top@5"} <= set(d["metrics"])
    r = runner.invoke(
        app,
        ["eval", str(index.path), "--questions", f"squad:{squad}", "--metrics", "top@20", "--json"],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["k"] == 20
    r = runner.invoke(
        app, ["eval", str(index.path), "--questions", f"squad:{squad}", "--scope", "nowhere"]
    )
    assert r.exit_code == 2 and "nowhere" in r.output
    run = index.path.parent / "phrase.run"
    r = runner.invoke(
        app,
        ["eval", str(index.path), "--questions", f"squad:{squad}", "--run-out", str(run), "-q"],
    )
    # --run-out is honoured for phrase indexes (it was once ignored); this corpus's ids
    # hold spaces, which a TREC run cannot carry, so the run is refused by name
    assert r.exit_code == 2 and re.search(r"unit id '[^']* [^']*' to a TREC run", r.output), (
        r.output
    )
    assert not run.exists()
    for bad in (["-k", "0"], ["-k", "-3"]):
        r = runner.invoke(app, ["search", str(index.path), "Who created Python?", *bad])
        assert r.exit_code == 2 and "k must be at least 1" in r.output, r.output
    r = runner.invoke(app, ["search", str(index.path), "   "])
    assert r.exit_code == 2 and "empty" in r.output, r.output
    with pytest.raises(AnygrainError, match="unknown scope"):
        evaluate_index(index, load_questions(f"squad:{squad}"), scope="nowhere", progress=False)


def test_encoding_reports_passages_and_the_summary_names_the_model(
    model_dir: Path, squad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Progress inside a shard, by passages with an ETA (a shard bar stayed at 0/1)."""
    store = CorpusStore.build(f"squad:{squad}", tmp_path / "c", progress=False)
    m = PhraseEncoder.load(model_dir)
    n = len(store)
    m.encode_passages(store.texts(), store.titles(), batch_size=2, progress=True, desc="enc")
    err = capsys.readouterr().err
    assert "enc: 100%" in err and f"{n}/{n}" in err and "passage" in err
    r = CliRunner().invoke(
        app,
        ["index", f"squad:{squad}", "--kind", "phrase", "--model", str(model_dir)]
        + ["--out", str(tmp_path / "p"), "--sparse-weight", "0"],
    )
    assert r.exit_code == 0, r.output
    assert "dumping phrases" in r.stderr and f"{n}/{n}" in r.stderr
    assert "shard/s" not in r.stderr  # no bar over shards
    assert f"as phrase with model {model_dir}" in " ".join(r.stdout.split())
    assert Index.load(tmp_path / "p").manifest["model"]["name"] == str(model_dir)
