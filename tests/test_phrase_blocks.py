"""A phrase build within a memory budget: FAISS codes written in blocks and stacked on load,
the budget's arithmetic, and blocked indexes through add, delete, compact and verify."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
import torch
from test_phrase_helpers import PARAGRAPHS, make_tiny_model

from anygrain.api import add_documents, compact_index, delete_documents
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files
from anygrain.phrase import budget as budget_mod
from anygrain.phrase.budget import BuildBudget, parse_bytes
from anygrain.phrase.build import PhraseSettings
from anygrain.phrase.model import PhraseEncoder
from anygrain.utils.checksums import Verify
from anygrain.vectors.disk import block_path
from anygrain.vectors.faiss_index import FaissIndex
from anygrain.vectors.sources import ArrayVectors


class Ranged(ArrayVectors):
    """ArrayVectors is already range-readable; named for what build_blocks asks."""


@pytest.mark.parametrize("factory", ["IVF16,SQ8", "OPQ8,IVF16,PQ8", "IVF16,Flat"])
def test_blocks_search_and_decode_as_one_index(factory: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    q = rng.standard_normal((20, 32)).astype(np.float32)
    whole = FaissIndex.build(x, factory, train_size=2000)
    n = FaissIndex.build_blocks(
        Ranged(x), tmp_path / "v.faiss", factory, block_bytes=700 * 16, train_size=2000
    )
    assert n >= 2 and all(block_path(tmp_path / "v.faiss", b).exists() for b in range(n))
    assert faiss.read_index(str(tmp_path / "v.faiss")).ntotal == 0  # the trained base only
    blocked = FaissIndex.load(tmp_path / "v.faiss", factory=factory, blocks=n)
    assert blocked.ntotal == len(x) and blocked.nprobe == whole.nprobe
    r1, s1 = whole.search(q, 10)
    r2, s2 = blocked.search(q, 10)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_allclose(s1, s2, atol=1e-5)
    for fx in (whole, blocked):
        assert fx.ivf is not None
        fx.ivf.make_direct_map()
    keys = np.array([0, 699, 700, 2999], dtype=np.int64)
    np.testing.assert_allclose(
        blocked.index.reconstruct_batch(keys), whole.index.reconstruct_batch(keys), atol=1e-6
    )


def test_an_index_that_fits_is_written_whole(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((500, 16)).astype(np.float32)
    n = FaissIndex.build_blocks(Ranged(x), tmp_path / "v.faiss", "IVF8,SQ8", block_bytes=10**9)
    assert n == 0 and not block_path(tmp_path / "v.faiss", 0).exists()
    assert FaissIndex.load(tmp_path / "v.faiss").ntotal == 500


def test_budget_arithmetic() -> None:
    assert parse_bytes("1.5G") == 1_500_000_000
    assert parse_bytes("800M") == parse_bytes("800mb") == 800_000_000
    assert parse_bytes(2e9) == 2_000_000_000
    for bad in ("lots", "-1G", "0"):
        with pytest.raises(AnygrainError, match="memory budget"):
            parse_bytes(bad)
    with pytest.raises(AnygrainError, match="memory budget"):
        PhraseSettings(memory_budget="lots")
    small, large = BuildBudget(900_000_000), BuildBudget(4_000_000_000)
    # a larger budget never means smaller pieces; shards stay between 8 and 500 passages
    assert 8 <= small.shard_size(384) <= large.shard_size(384) <= budget_mod.MAX_SHARD_SIZE
    assert small.train_vectors(384) <= large.train_vectors(384)
    assert small.faiss_block_bytes < large.faiss_block_bytes
    # the default: the pieces together stay within what is left beside the model
    d = BuildBudget()
    shard = d.shard_size(384) * budget_mod.TOKENS_PER_PASSAGE * 384 * 12
    assert shard + d.train_vectors(384) * 384 * 4 + d.faiss_block_bytes <= d.working * 1.1
    assert BuildBudget().batch_size("cpu") == 8 and BuildBudget().batch_size("cuda") == 32


@pytest.fixture(scope="module")
def phrase_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


DOCS_A = [SourceDocument(f"p{i}", t, x) for i, (t, x, _) in enumerate(PARAGRAPHS[:3])]
DOCS_B = [SourceDocument(f"p{i}", t, x) for i, (t, x, _) in enumerate(PARAGRAPHS[3:], 3)]
QUERIES = ["Who created Python?", "How long is the Great Wall?", "Alpha Centauri distance"]


def _build(model: Path, docs: list[SourceDocument], out: Path, **opts: Any) -> Index:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS: few training points on a fixture
        return Index.build(
            docs,
            kind="phrase",
            out=out,
            model=model,
            factory="IVF4,SQ8",
            keep=1.0,
            progress=False,
            lang="en",
            **opts,
        )


def _same(a: Index, b: Index, **opts: Any) -> None:
    for ha, hb in zip(a.search(QUERIES, 5, **opts), b.search(QUERIES, 5, **opts), strict=True):
        assert [(h.passage_id, h.span) for h in ha] == [(h.passage_id, h.span) for h in hb]
        np.testing.assert_allclose([h.score for h in ha], [h.score for h in hb], atol=1e-5)


def test_a_blocked_phrase_index_lives_like_a_whole_one(
    phrase_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _build(phrase_model, DOCS_A, tmp_path / "whole")
    assert "faiss_blocks" not in whole.manifest["settings"]
    # a budget whose FAISS share holds ~40 codes of the tiny model: several blocks a side
    monkeypatch.setattr(BuildBudget, "faiss_block_bytes", property(lambda self: 40 * 40))
    blocked = _build(phrase_model, DOCS_A, tmp_path / "blocked")
    blocks = blocked.manifest["settings"]["faiss_blocks"]
    assert blocks["start"] >= 2 and blocks["end"] >= 2
    assert check_index_files(blocked.path, verify=Verify.FULL, extra=True) == []
    for unit in (Unit.PHRASE, Unit.PASSAGE):
        _same(blocked, whole, unit=unit)
    # add: the new vectors become one more block each side, searched as the whole index's add
    whole = add_documents(whole.path, DOCS_B, progress=False)
    # a whole IVF index is split (its file becomes block 0) rather than loaded to append
    assert whole.manifest["settings"]["faiss_blocks"] == {"start": 2, "end": 2}
    assert check_index_files(whole.path, verify=Verify.FULL, extra=True) == []
    added = add_documents(blocked.path, DOCS_B, progress=False)
    grown = added.manifest["settings"]["faiss_blocks"]
    assert grown == {"start": blocks["start"] + 1, "end": blocks["end"] + 1}
    assert check_index_files(added.path, verify=Verify.FULL, extra=True) == []
    _same(added, whole, unit=Unit.PASSAGE)
    # delete and compact: rebuilt (in blocks again), no stale block left behind
    delete_documents(added.path, [DOCS_B[0].doc_id])
    compacted = compact_index(added.path, progress=False)
    assert len(compacted.corpus) == len(DOCS_A) + len(DOCS_B) - 1
    assert compacted.manifest["settings"]["faiss_blocks"]["start"] >= 2
    assert check_index_files(compacted.path, verify=Verify.FULL, extra=True) == []
    assert all(h.doc_id != DOCS_B[0].doc_id for h in compacted.search(QUERIES, 5)[0])


def test_stored_vectors_read_the_rows_asked_for(tmp_path: Path) -> None:
    from anygrain.vectors.sources import SPAN, StoredVectors

    rng = np.random.default_rng(2)
    n = 2 * SPAN + 123  # more than one span of the file
    out = np.lib.format.open_memmap(tmp_path / "v.npy", mode="w+", dtype=np.float16, shape=(n, 8))
    out[:] = rng.standard_normal((n, 8)).astype(np.float16)
    out.flush()
    del out
    arr = np.load(tmp_path / "v.npy", mmap_mode="r")
    ids = np.flatnonzero(rng.random(n) < 0.6)
    sv = StoredVectors(arr, ids)
    got = sv.sample(5000, seed=3)
    pick = ids[np.sort(np.random.default_rng(3).choice(len(ids), size=5000, replace=False))]
    np.testing.assert_array_equal(got, np.asarray(arr[pick], dtype=np.float32))
    np.testing.assert_array_equal(sv.sample(len(ids) + 1), np.asarray(arr[ids], dtype=np.float32))
    parts = list(sv.iter_batches(7000, start=1000, stop=30000))
    assert [i for i, _ in parts] == list(range(1000, 30000, 7000))
    np.testing.assert_array_equal(
        np.concatenate([b for _, b in parts]), np.asarray(arr[ids[1000:30000]], dtype=np.float32)
    )
