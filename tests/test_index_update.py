"""Adding, deleting and compacting: an updated index searches as a fresh build would.

For BM25, dense (flat) and phrase indexes: build on A, add B, and every search equals
that of a fresh build on A and B (same passages, scores within 1e-5), old passages are
not encoded again, a delete hides a document's hits, compacting equals a fresh build on
what is left, duplicate ids are refused and an add that fails half-way leaves the index
as it was.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer
from test_phrase_helpers import PARAGRAPHS, make_tiny_model
from typer.testing import CliRunner

from anygrain.api import add_documents, compact_index, delete_documents
from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.corpus.store import CorpusStore
from anygrain.dense.onnx import OnnxTextEncoder
from anygrain.errors import AnygrainError, IndexMismatchError, InputError, UsageError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files, read_manifest
from anygrain.index.registry import index_class
from anygrain.models.biencoder import BiEncoder
from anygrain.phrase import PhraseEncoder
from anygrain.phrase.compress import Compress
from anygrain.utils.checksums import Verify, file_table

TOPICS_A = [
    ("Paris", "Paris is the capital of France and sits on the Seine."),
    ("Berlin", "Berlin is the capital of Germany and has many museums."),
    ("Python", "Python is a programming language created by Guido van Rossum."),
    ("Rust", "Rust is a systems programming language focused on memory safety."),
    ("Moon", "The Moon orbits the Earth roughly every 27 days."),
]
TOPICS_B = [
    ("Mars", "Mars is the fourth planet from the Sun, red with iron oxide."),
    ("Jazz", "Jazz originated in New Orleans in the early twentieth century."),
    ("Tea", "Tea is brewed from the leaves of Camellia sinensis in China."),
    ("Madrid", "Madrid is the capital of Spain, on the river Manzanares."),
]
QUERIES = [
    "capital of France",
    "programming language memory safety",
    "planet red iron",
    "capital city river",
    "tea leaves",
]


def _docs(topics: list[tuple[str, str]]) -> list[SourceDocument]:
    return [SourceDocument(t.lower(), t, x) for t, x in topics]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def model() -> BiEncoder:
    return tiny_biencoder(0, tokenizer=tiny_tokenizer())


def _key(hits: list[Hit]) -> list[tuple[Any, ...]]:
    return [(h.passage_id, h.span, h.text) for h in hits]


def assert_same_search(
    a: Index, b: Index, k: int = 5, a_options: dict[str, Any] | None = None, **options: Any
) -> None:
    """Same hits (ids, spans, text) and scores within 1e-5, query by query (``a_options``:
    more options for ``a`` alone)."""
    ra = a.search(QUERIES, k, **options, **(a_options or {}))
    rb = b.search(QUERIES, k, **options)
    for ha, hb in zip(ra, rb, strict=True):
        assert _key(ha) == _key(hb)
        np.testing.assert_allclose([h.score for h in ha], [h.score for h in hb], atol=1e-5)


def _copy(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / "index"
    shutil.copytree(src, out)
    return out


# --- builds ---------------------------------------------------------------------------------
def _build(kind: str, docs: list[SourceDocument], out: Path, model: Any) -> Index:
    opts: dict[str, Any] = {"progress": False, "lang": "en"}
    if kind == "dense":
        opts.update(model=model, shard_size=3)
    elif kind == "phrase":
        # every vector, float16: an added index is compared with a fresh build of the union
        opts.update(model=model, shard_size=2, compress="none", keep=1.0)
    return Index.build(docs, kind=kind, out=out, **opts)


@pytest.fixture(scope="module")
def phrase_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


PHRASE_A = [SourceDocument(f"p{i}", t, x) for i, (t, x, _) in enumerate(PARAGRAPHS[:2])]
PHRASE_B = [SourceDocument(f"p{i}", t, x) for i, (t, x, _) in enumerate(PARAGRAPHS[2:], 2)]


@pytest.fixture(scope="module", params=["bm25", "dense", "phrase"])
def case(request, tmp_path_factory, model, phrase_model) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """An index built on A, one on A and B, and one on A and B without a document."""
    kind = request.param
    enc: Any = phrase_model if kind == "phrase" else model
    a, b = (PHRASE_A, PHRASE_B) if kind == "phrase" else (_docs(TOPICS_A), _docs(TOPICS_B))
    root = tmp_path_factory.mktemp(kind)
    gone = b[0].doc_id
    return {
        "kind": kind,
        "model": enc,
        "a": a,
        "b": b,
        "gone": gone,
        "on_a": _build(kind, a, root / "a", enc).path,
        "on_ab": _build(kind, a + b, root / "ab", enc),
        "on_rest": _build(kind, [d for d in a + b if d.doc_id != gone], root / "rest", enc),
    }


def _search_opts(kind: str) -> dict[str, Any]:
    # phrase indexes are compared at the passage grain and at the phrase grain
    return {"unit": Unit.PASSAGE} if kind == "phrase" else {}


# --- add ------------------------------------------------------------------------------------
def test_add_then_search_equals_a_fresh_build_on_the_union(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _copy(case["on_a"], tmp_path)
    n_a = len(Index.load(p).corpus)
    old_ids = Index.load(p).corpus.column("id")
    idx = add_documents(p, case["b"], progress=False)
    fresh = case["on_ab"]
    store = idx.corpus
    assert len(store) == len(fresh.corpus)
    assert store.column("id")[:n_a] == old_ids  # old passages keep their rows
    assert store.checksum == fresh.corpus.checksum  # as if built at once
    assert [store.row_of(i) for i in fresh.corpus.column("id")] == list(range(len(store)))
    assert store.document_text(case["b"][-1].doc_id) == case["b"][-1].text
    assert_same_search(idx, fresh, **_search_opts(case["kind"]))
    if case["kind"] == "phrase":
        assert_same_search(idx, fresh, unit=Unit.PHRASE)
    assert check_index_files(p, extra=True) == []
    assert not [f for f in p.parent.iterdir() if f.name.startswith(".")]  # no leftovers


def test_add_encodes_only_the_new_passages(
    model: BiEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "dense"
    _build("dense", _docs(TOPICS_A), p, model)
    seen: list[str] = []
    encode = model.passage.encode

    def counting(texts: list[str], *args: Any, **kw: Any) -> Any:
        seen.extend(texts)
        return encode(texts, *args, **kw)

    model.passage.encode = counting  # type: ignore[method-assign]
    # new passages are encoded on ONNX Runtime by default (anygrain.dense.onnx): counted too
    onnx_encode = OnnxTextEncoder.encode
    monkeypatch.setattr(
        OnnxTextEncoder,
        "encode",
        lambda self, t, *a, **k: seen.extend(t) or onnx_encode(self, t, *a, **k),
    )
    try:
        add_documents(p, _docs(TOPICS_B), model=model, progress=False)
    finally:
        del model.passage.encode
    assert sorted(seen) == sorted(x for _, x in TOPICS_B)
    shards = read_manifest(p)["settings"]["dense"]
    assert shards["n_vectors"] == len(TOPICS_A) + len(TOPICS_B)


def test_add_refuses_another_model(model: BiEncoder, tmp_path: Path) -> None:
    p = tmp_path / "dense"
    _build("dense", _docs(TOPICS_A), p, model)
    other = tiny_biencoder(1, tokenizer=tiny_tokenizer())
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        add_documents(p, _docs(TOPICS_B), model=other, progress=False)


def test_duplicate_ids_are_refused_naming_them(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _copy(case["on_a"], tmp_path)
    before = file_table(p)
    with pytest.raises(InputError, match=f"'{case['a'][0].doc_id}"):
        add_documents(p, case["a"][:1], progress=False)
    assert file_table(p) == before


def test_an_interrupted_add_leaves_the_index_as_it_was(
    case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    p = _copy(case["on_a"], tmp_path)
    before = file_table(p)
    hits = Index.load(p).search(QUERIES, 3, **_search_opts(case["kind"]))

    cls = index_class(case["kind"])
    add_rows = cls.add_rows

    def crash(update: Any) -> None:
        add_rows(update)  # the kind's update has written everything in the staged copy
        raise RuntimeError("power cut")  # before the swap

    monkeypatch.setattr(cls, "add_rows", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        add_documents(p, case["b"], progress=False)
    assert file_table(p) == before
    assert Index.load(p).search(QUERIES, 3, **_search_opts(case["kind"])) == hits
    assert sorted(f.name for f in p.parent.iterdir()) == ["index"]


# --- delete and compact ---------------------------------------------------------------------
def test_delete_hides_a_document_and_compact_equals_a_fresh_build(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _copy(case["on_ab"].path, tmp_path)
    gone = case["gone"]
    opts = _search_opts(case["kind"])
    n = len(Index.load(p).corpus)
    k = n - 1 if case["kind"] != "phrase" else 3
    out = delete_documents(p, [gone])
    assert out["deleted"] == [gone] and out["rows"] >= 1
    idx = Index.load(p)
    assert idx.manifest["tombstones"]["n_documents"] == 1
    for hits in idx.search(QUERIES, k, **opts):
        assert gone not in {h.doc_id for h in hits}
        if case["kind"] == "dense":  # every passage scores: k live hits come back
            assert len(hits) == k
    assert check_index_files(p, extra=True) == []
    # deleting again is harmless; unknown ids are refused, naming them
    delete_documents(p, [gone])
    with pytest.raises(AnygrainError, match="'nosuch'"):
        delete_documents(p, ["nosuch"])
    compacted = compact_index(p, progress=False)
    assert "tombstones" not in compacted.manifest
    assert len(compacted.corpus) == len(case["on_rest"].corpus)
    assert compacted.corpus.checksum == case["on_rest"].corpus.checksum
    assert_same_search(compacted, case["on_rest"], **opts)
    assert check_index_files(p, extra=True) == []


def test_added_documents_stay_hidden_when_deleted_before_an_add(
    model: BiEncoder, tmp_path: Path
) -> None:
    p = tmp_path / "bm25"
    _build("bm25", _docs(TOPICS_A), p, model)
    delete_documents(p, ["paris"])
    idx = add_documents(p, _docs(TOPICS_B), progress=False)
    assert idx.manifest["tombstones"]["n_documents"] == 1
    hits = idx.search(["capital"], 10)[0]
    assert "paris" not in {h.doc_id for h in hits} and "madrid" in {h.doc_id for h in hits}


def test_an_outside_corpus_is_refused(tmp_path: Path) -> None:
    store = CorpusStore.build(_docs(TOPICS_A), tmp_path / "corpus", progress=False)
    p = tmp_path / "bm25"
    Index.build(store, kind="bm25", out=p, progress=False, lang="en")
    with pytest.raises(AnygrainError, match="outside the index"):
        add_documents(p, _docs(TOPICS_B), progress=False)


def test_ivf_add_uses_the_trained_quantiser(model: BiEncoder, tmp_path: Path) -> None:
    a, b = _docs(TOPICS_A), _docs(TOPICS_B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # too few training points for 2 cells: fine here
        p = Index.build(
            a, kind="dense", out=tmp_path / "ivf", model=model, factory="IVF2,Flat", progress=False
        ).path
    centroids = _ivf_centroids(Index.load(p))
    idx = add_documents(p, b, progress=False)
    assert idx.faiss.ivf is not None and idx.faiss.ntotal == len(a) + len(b)
    np.testing.assert_array_equal(_ivf_centroids(idx), centroids)  # not retrained
    # every cell probed, IVF scores are exact: the same hits as a flat index on the union
    flat = _build("dense", a + b, tmp_path / "flat", model)
    assert_same_search(idx, flat, a_options={"nprobe": 2})


def _ivf_centroids(idx: Any) -> np.ndarray:
    import faiss

    return faiss.vector_to_array(faiss.downcast_index(idx.faiss.ivf.quantizer).codes)


def test_hybrid_add_and_compact_equal_fresh_builds(model: BiEncoder, tmp_path: Path) -> None:
    a, b = _docs(TOPICS_A), _docs(TOPICS_B)
    opts: dict[str, Any] = {"progress": False, "lang": "en", "model": model, "shard_size": 3}
    p = Index.build(a, kind="hybrid", out=tmp_path / "h", **opts).path
    fresh = Index.build(a + b, kind="hybrid", out=tmp_path / "ab", **opts)
    assert_same_search(add_documents(p, b, progress=False), fresh)
    delete_documents(p, ["mars"])
    rest = Index.build(
        [d for d in a + b if d.doc_id != "mars"], kind="hybrid", out=tmp_path / "rest", **opts
    )
    assert_same_search(compact_index(p, progress=False), rest)
    assert check_index_files(p, extra=True) == []


def test_a_combined_hybrid_index_is_refused_naming_its_parts(
    model: BiEncoder, tmp_path: Path
) -> None:
    from anygrain.composite.hybrid import HybridIndex

    sparse = _build("bm25", _docs(TOPICS_A), tmp_path / "bm25", model)
    dense = Index.build(
        sparse.corpus, kind="dense", out=tmp_path / "dense", model=model, progress=False
    )
    p = HybridIndex.combine(sparse.path, dense.path, tmp_path / "h").path
    before = file_table(p)
    with pytest.raises(UsageError, match="combined from existing indexes; update its parts"):
        add_documents(p, _docs(TOPICS_B), progress=False)
    assert file_table(p) == before


def test_compacting_a_compressed_phrase_index_dumps_the_kept_passages_again(
    phrase_model: Path, tmp_path: Path
) -> None:
    opts: dict[str, Any] = {
        "progress": False,
        "lang": "en",
        "model": phrase_model,
        "shard_size": 2,
        "compress": "sq8",
        "keep": 0.5,
    }
    gone = PHRASE_B[0].doc_id
    p = Index.build(PHRASE_A + PHRASE_B, kind="phrase", out=tmp_path / "ab", **opts).path
    assert not (p / "phrase" / "start.npy").exists()  # no float16 dump to take vectors from
    delete_documents(p, [gone])
    rest = [d for d in PHRASE_A + PHRASE_B if d.doc_id != gone]
    fresh = Index.build(rest, kind="phrase", out=tmp_path / "rest", **opts)
    compacted = compact_index(p, progress=False)
    assert compacted.manifest["settings"]["compress"] == "sq8"
    assert compacted.build_settings == fresh.build_settings
    assert_same_search(compacted, fresh, k=3, unit=Unit.PASSAGE)
    assert check_index_files(p, extra=True) == []


@pytest.mark.parametrize("compress", [c.value for c in Compress])
def test_every_compress_setting_builds_adds_deletes_compacts_and_verifies(
    phrase_model: Path, tmp_path: Path, compress: str
) -> None:
    """Each ``--compress`` setting through the whole life of an index: built on A, B added
    (B's passages then found by their own text), a document deleted, compacted; every step
    leaves files that verify in full."""
    opts: dict[str, Any] = {"progress": False, "lang": "en", "model": phrase_model}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS: few training points for IVF/PQ on a fixture
        idx = Index.build(PHRASE_A, kind="phrase", out=tmp_path / "i", compress=compress, **opts)
        p = idx.path
        assert idx.manifest["settings"]["compress"] == compress
        assert check_index_files(p, verify=Verify.FULL, extra=True) == []
        added = add_documents(p, PHRASE_B, progress=False)
        assert check_index_files(p, verify=Verify.FULL, extra=True) == []
        assert len(added.corpus) == len(PHRASE_A) + len(PHRASE_B)
        # every new passage is reachable: its own text as the query puts it in the top units
        for doc in PHRASE_B:
            hits = added.search([doc.text], k=len(added.corpus), unit=Unit.PASSAGE)[0]
            assert doc.doc_id in {h.doc_id for h in hits}
        gone = PHRASE_B[0].doc_id
        delete_documents(p, [gone])
        assert all(h.doc_id != gone for h in Index.load(p).search(QUERIES, 5)[0])
        compacted = compact_index(p, progress=False)
    assert compacted.manifest["settings"]["compress"] == compress
    assert len(compacted.corpus) == len(PHRASE_A) + len(PHRASE_B) - 1
    assert check_index_files(p, verify=Verify.FULL, extra=True) == []
    loaded = Index.load(p, verify=Verify.FULL)
    assert all(hits for hits in loaded.search(QUERIES, 3))


# --- CLI ------------------------------------------------------------------------------------
def test_cli_add_delete_compact(tmp_path: Path) -> None:
    src_a, src_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, topics in ((src_a, TOPICS_A), (src_b, TOPICS_B)):
        path.write_text(
            "".join(f'{{"id": "{t.lower()}", "title": "{t}", "text": "{x}"}}\n' for t, x in topics),
            encoding="utf-8",
        )
    p = tmp_path / "idx"
    run = CliRunner().invoke
    r = run(app, ["index", f"jsonl:{src_a}", "--kind", "bm25", "--out", str(p), "--lang", "en"])
    assert r.exit_code == 0, r.output
    r = run(app, ["add", str(p), f"jsonl:{src_b}"])
    assert r.exit_code == 0, r.output
    assert len(Index.load(p).corpus) == len(TOPICS_A) + len(TOPICS_B)
    r = run(app, ["delete", str(p), "--doc", "madrid", "--doc", "paris"])
    assert r.exit_code == 0, r.output
    assert "2" in r.output
    r = run(app, ["compact", str(p)])
    assert r.exit_code == 0, r.output
    assert len(Index.load(p).corpus) == len(TOPICS_A) + len(TOPICS_B) - 2
