"""``Index.load(verify=...)`` and ``anygrain verify`` reach the parts of composite indexes.

A hybrid index (a BM25 part and a dense part) and a sharded index (N shard indexes) open
other index directories.  A damaged file inside one of them is reported, naming the file,
at the depth asked for: nested parts are in the composite index's own checksum table, and
parts that live elsewhere (a combined hybrid index's, a shard moved out) are checked with
it at the same level.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from dense_helpers import single_threaded, tiny_biencoder
from typer.testing import CliRunner

import anygrain.utils.checksums as checksums
from anygrain.cli.main import app
from anygrain.composite.hybrid import HybridIndex
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files, read_manifest, rewrite_manifest
from anygrain.utils.checksums import Verify

DOCS = [
    SourceDocument("a", "Cats", "The cat sat on the mat."),
    SourceDocument("b", "Dogs", "A dog chased the cat across the garden."),
    SourceDocument("c", "Birds", "Birds sing in the morning in the garden tree."),
    SourceDocument("d", "Rivers", "The river flows to the sea past the old mill."),
    SourceDocument("e", "Trees", "Oak trees grow slowly near the river."),
    SourceDocument("f", "Stars", "Stars shine at night over the quiet sea."),
]

runner = CliRunner()


@pytest.fixture(autouse=True)
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


def flip(f: Path) -> None:
    """One byte changed, the size kept: only a checksum tells."""
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))


def damaged(f: Path) -> str:
    """What a damaged ``f`` is reported as (its path, whichever way the part is reached)."""
    return re.escape(f"{f.resolve().parent.name}/{f.name}: damaged")


def verify_cli(idx: Path) -> tuple[int, str]:
    r = runner.invoke(app, ["verify", str(idx)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return r.exit_code, r.output


# --- hybrid -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", ["sparse/bm25/data.csc.index.npy", "dense/faiss.index"])
def test_built_hybrid_part_file_is_checked(rel: str, tmp_path: Path) -> None:
    h = tmp_path / "h"
    Index.build(DOCS, kind="hybrid", out=h, model=tiny_biencoder(seed=3), progress=False)
    flip(h / rel)
    # small_limit=0 stands for a file too large to hash by default: `full` hashes it anyway
    with pytest.raises(AnygrainError, match=damaged(h / rel)):
        Index.load(h, verify=Verify.FULL, small_limit=0)
    assert [p.path for p in check_index_files(h, verify=Verify.FULL)] == [h / rel]


@pytest.fixture
def combined(tmp_path: Path) -> Path:
    """A hybrid index over a BM25 index and a dense index that live beside it."""
    Index.build(DOCS, kind="bm25", out=tmp_path / "bm25", progress=False)
    model = tiny_biencoder(seed=3)
    Index.build(DOCS, kind="dense", out=tmp_path / "dense", model=model, progress=False)
    HybridIndex.combine(tmp_path / "bm25", tmp_path / "dense", tmp_path / "hc")
    return tmp_path / "hc"


@pytest.mark.parametrize("rel", ["bm25/bm25/data.csc.index.npy", "dense/dense/faiss.index"])
def test_combined_hybrid_part_file_is_reported(rel: str, combined: Path) -> None:
    part_file = combined.parent / rel
    assert Index.load(combined, verify=Verify.FULL).kind.value == "hybrid"
    flip(part_file)
    with pytest.raises(AnygrainError, match=damaged(part_file)):
        Index.load(combined, verify=Verify.FULL, small_limit=0)
    # the check itself, and `anygrain verify`, list the part's file
    problems = check_index_files(combined, verify=Verify.FULL)
    assert [p.path.resolve() for p in problems] == [part_file.resolve()]
    code, out = verify_cli(combined)
    assert code == 1 and "damaged" in out and part_file.name in out, out


def test_combined_hybrid_parts_are_hashed_at_the_level_asked(
    combined: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``full`` every file of every part is hashed afresh, model weights included
    (``small`` hashes those once per process)."""
    Index.load(combined)  # the default level: the dense part's weights are hashed once
    hashed: list[Path] = []
    real = checksums.hash_file

    def spy(path: Path) -> str:
        hashed.append(Path(path).resolve())
        return real(path)

    monkeypatch.setattr(checksums, "hash_file", spy)
    Index.load(combined, verify=Verify.FULL)
    for part in ("bm25", "dense"):
        root = combined.parent / part
        want = {(root / rel).resolve() for rel in read_manifest(root)["files"]}
        assert want <= set(hashed), part


# --- sharded ----------------------------------------------------------------------------------


@pytest.fixture(params=["bm25", "dense"])
def sharded(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    out = tmp_path / "s"
    opts = {"model": tiny_biencoder(seed=0)} if request.param == "dense" else {}
    Index.build(DOCS, kind="sharded", of=request.param, shards=2, out=out, progress=False, **opts)
    return out


def _shard_file(shard: Path) -> Path:
    """The largest file of the index part of a shard (its data, not its manifest)."""
    m = read_manifest(shard)
    rel = max((r for r in m["files"] if r != "index.json"), key=lambda r: m["files"][r]["size"])
    return shard / rel


def test_sharded_shard_file_is_checked(sharded: Path) -> None:
    f = _shard_file(sharded / "shards" / "00001")
    flip(f)
    with pytest.raises(AnygrainError, match=damaged(f)):
        Index.load(sharded, verify=Verify.FULL, small_limit=0)
    code, out = verify_cli(sharded)
    assert code == 1 and f"{f}: damaged" in out, out


def test_sharded_shard_corpus_file_is_checked(sharded: Path) -> None:
    f = sharded / "shards" / "00000.corpus" / "passages.arrow"
    flip(f)
    with pytest.raises(AnygrainError, match=damaged(f)):
        Index.load(sharded, verify=Verify.FULL, small_limit=0)


def test_shard_outside_the_index_is_checked_at_the_level_asked(
    sharded: Path, tmp_path: Path
) -> None:
    # the second shard (and the corpus of its rows, beside it) moved out of the index
    away = tmp_path / "away"
    away.mkdir()
    for name in ("00001", "00001.corpus"):
        shutil.move(sharded / "shards" / name, away / name)
    m = read_manifest(sharded)
    m["settings"]["sharding"]["shards"][1]["path"] = str(away / "00001")
    rewrite_manifest(sharded, m, settings=m["settings"])
    assert len(Index.load(sharded, verify=Verify.FULL).corpus) == len(DOCS)
    assert check_index_files(sharded, verify=Verify.FULL, extra=True) == []
    f = _shard_file(away / "00001")
    flip(f)
    with pytest.raises(AnygrainError, match=damaged(f)):
        Index.load(sharded, verify=Verify.FULL, small_limit=0)
    assert [p.path.resolve() for p in check_index_files(sharded)] == [f.resolve()]
    code, out = verify_cli(sharded)
    assert code == 1 and "damaged" in out and f.name in out, out
