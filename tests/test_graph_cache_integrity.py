"""The ONNX graph cache checked like an index (anygrain.encode.cache_checks): every file of an
entry is recorded (size and hash) when the graph is made and checked when it is opened.  A
damaged entry -- a flipped bit, a truncated or empty file, junk in meta.json, NaN in the token
table, a missing tokenizer, no checksums at all -- is made again with one warning line naming
the file (the same results as an intact cache), or refused in one line; never used."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from anygrain.encode import cache_checks
from anygrain.encode.cache_checks import CHECKSUMS_FILE, VERIFIED_FILE, entry_problem
from anygrain.encode.onnx_runtime import (
    GRAPH_FILE,
    META_FILE,
    TOKEN_TABLE_FILE,
    TOKENIZER_FILE,
    GraphCache,
    OnnxGraph,
)
from anygrain.errors import AnygrainError
from anygrain.models.shipped import SHIPPED

pytest.importorskip("onnxruntime")

QUESTIONS = ["Which NFL team represented the AFC at Super Bowl 50?", "Who won?"]
PASSAGES = [
    "The Denver Broncos defeated the Carolina Panthers 24-10 to earn their third title. " * 8,
    "Super Bowl 50 was an American football game played by the National Football League.",
]


def _flip_bit(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside the weights: a value changes, the file still parses
    f.write_bytes(bytes(data))


def _truncate(f: Path) -> None:
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 2)


def _nan_table(f: Path) -> None:
    table = np.load(f, mmap_mode="r+")
    table[:] = np.nan
    table.flush()
    del table


DAMAGES: dict[str, tuple[str, Callable[[Path], object]]] = {
    "bit-flip-graph": (GRAPH_FILE, _flip_bit),
    "truncated-graph": (GRAPH_FILE, _truncate),
    "empty-graph": (GRAPH_FILE, lambda f: f.write_bytes(b"")),
    "truncated-table": (TOKEN_TABLE_FILE, _truncate),
    "nan-table": (TOKEN_TABLE_FILE, _nan_table),
    "empty-tokenizer": (TOKENIZER_FILE, lambda f: f.write_bytes(b"")),
    "missing-tokenizer": (TOKENIZER_FILE, lambda f: f.unlink()),
    "junk-meta": (META_FILE, lambda f: f.write_text('{"export_version": 2, "kind": ')),
}


# --- the shipped models' graphs, made with NumPy (healed by making them again) -------------


def _questions(cache: GraphCache) -> tuple[Path, tuple[np.ndarray, np.ndarray]]:
    from anygrain.phrase.onnx import cached_questions

    hit = cached_questions(SHIPPED["phrase-minilm"].path, cache)
    assert hit is not None
    return hit[0].graph.directory, hit[0].encode_questions(QUESTIONS)


def _reader(cache: GraphCache) -> tuple[Path, tuple[np.ndarray, ...]]:
    from anygrain.reader.features import collate_arrays
    from anygrain.reader.onnx import OnnxReader, load_reader
    from anygrain.reader.read import windows_of

    reader = load_reader(SHIPPED["reader-minilm"].path, "onnx", cache=cache)
    assert isinstance(reader, OnnxReader)
    windows = windows_of(reader, QUESTIONS, PASSAGES, ["Super Bowl 50", None])
    batch = collate_arrays(windows, int(reader.graph.meta["tokenizer"]["pad_id"]))
    got = reader.window_logits(batch)
    return reader.graph.directory, (got.start, got.end, got.selection)


OPENERS = {"phrase-question": _questions, "reader": _reader}
# each kind's cache entry, made once, and what it computes
Intact = dict[str, tuple[Path, tuple[np.ndarray, ...]]]


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Intact:
    """Each kind's graph made once into a cache of the module's, and what it computes."""
    root = tmp_path_factory.mktemp("intact") / "onnx"
    cache = GraphCache(root)
    return {kind: open_(cache) for kind, open_ in OPENERS.items()}


def _copy_cache(intact_entry: Path, tmp_path: Path) -> GraphCache:
    root = tmp_path / "onnx"
    shutil.copytree(intact_entry.parent, root)
    return GraphCache(root)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("kind", list(OPENERS))
def test_a_damaged_entry_is_made_again(
    kind: str,
    damage: str,
    intact: Intact,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry, want = intact[kind]
    cache = _copy_cache(entry, tmp_path)
    name, do = DAMAGES[damage]
    damaged = cache.entry(entry.name) / name
    do(damaged)
    with caplog.at_level(logging.WARNING):
        again, got = OPENERS[kind](cache)
    assert again == cache.entry(entry.name)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)  # the same results as the intact cache
    said = [m for m in _warnings(caplog) if str(damaged) in m]
    assert len(said) == 1 and "\n" not in said[0], _warnings(caplog)
    assert entry_problem(cache.entry(entry.name)) is None


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_graph_is_refused_in_one_line(
    damage: str,
    intact: Intact,
    tmp_path: Path,
) -> None:
    """Opened directly (nothing to make it again from), a damaged graph is an error naming
    the file, not a traceback nor other results."""
    entry, _ = intact["reader"]
    cache = _copy_cache(entry, tmp_path)
    name, do = DAMAGES[damage]
    do(cache.entry(entry.name) / name)
    with pytest.raises(AnygrainError) as e:
        OnnxGraph(cache.entry(entry.name), tokenize=False).run({})
    assert str(cache.entry(entry.name) / name) in str(e.value) and "\n" not in str(e.value)
    assert not cache.has(entry.name)


def test_an_entry_without_checksums_is_made_again(
    intact: Intact,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An entry written before checksums were recorded is made again (its files cannot be
    told intact), once."""
    entry, want = intact["phrase-question"]
    cache = _copy_cache(entry, tmp_path)
    (cache.entry(entry.name) / CHECKSUMS_FILE).unlink(missing_ok=True)
    (cache.entry(entry.name) / VERIFIED_FILE).unlink(missing_ok=True)
    with caplog.at_level(logging.WARNING):
        _, got = _questions(cache)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any("no checksums" in m for m in _warnings(caplog)), _warnings(caplog)
    assert (cache.entry(entry.name) / CHECKSUMS_FILE).is_file()


def test_junk_checksums_are_damage(
    intact: Intact,
    tmp_path: Path,
) -> None:
    entry, _ = intact["reader"]
    cache = _copy_cache(entry, tmp_path)
    f = cache.entry(entry.name) / CHECKSUMS_FILE
    for junk in ("{", "[]", json.dumps({"files": {}}), json.dumps({"files": {"x": 1}})):
        f.write_text(junk)
        why = entry_problem(cache.entry(entry.name))
        assert why is not None and "\n" not in why and not cache.has(entry.name)


# --- big files: hashed again only when they changed -----------------------------------------


def test_big_files_are_hashed_again_only_when_changed(
    intact: Intact,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The graph and the token table are hashed at the first check, then trusted while
    their size, times and inode are those recorded (a second process reads the record in
    verified.json); any write changes the inode's change time, so a flipped bit is found
    even with the modification time put back."""
    entry, _ = intact["reader"]
    cache = _copy_cache(entry, tmp_path)
    d = cache.entry(entry.name)
    monkeypatch.setattr(cache_checks, "RACY_NS", 50_000_000)
    time.sleep(0.1)  # the copies' times are now safely older than a check
    hashed: list[str] = []
    real = cache_checks.hash_file

    def counting(p: Path) -> str:
        hashed.append(Path(p).name)
        return real(p)

    monkeypatch.setattr(cache_checks, "hash_file", counting)
    assert entry_problem(d) is None
    assert {GRAPH_FILE, TOKEN_TABLE_FILE} <= set(hashed)
    assert (d / VERIFIED_FILE).is_file()
    hashed.clear()
    monkeypatch.setattr(cache_checks, "_STAMPS", {})  # as a new process: only the file
    assert entry_problem(d) is None
    assert GRAPH_FILE not in hashed and TOKEN_TABLE_FILE not in hashed
    st = (d / TOKEN_TABLE_FILE).stat()
    data = bytearray((d / TOKEN_TABLE_FILE).read_bytes())
    data[-5] ^= 1
    (d / TOKEN_TABLE_FILE).write_bytes(bytes(data))
    os.utime(d / TOKEN_TABLE_FILE, ns=(st.st_atime_ns, st.st_mtime_ns))
    why = entry_problem(d)
    assert why is not None and str(d / TOKEN_TABLE_FILE) in why


# --- a graph exported with torch (healed by exporting it again) -----------------------------


def test_a_damaged_torch_export_is_exported_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("torch")
    from reader_helpers import tiny_reader

    from anygrain.reader import ReaderConfig
    from anygrain.reader.features import collate_arrays
    from anygrain.reader.onnx import OnnxReader, load_reader
    from anygrain.reader.read import windows_of

    rc = ReaderConfig(base_model="tiny", max_length=48, max_question_length=16, stride=8)
    saved = tmp_path / "reader"
    tiny_reader(rc).save(saved)
    cache = GraphCache(tmp_path / "onnx")

    def logits() -> tuple[Path, list[np.ndarray]]:
        r = load_reader(saved, "onnx", cache=cache)
        assert isinstance(r, OnnxReader)
        w = windows_of(r, QUESTIONS, PASSAGES, ["Bowl", None])
        got = r.window_logits(collate_arrays(w, int(r.graph.meta["tokenizer"]["pad_id"])))
        return r.graph.directory, [got.start, got.end, got.selection]

    entry, want = logits()
    _nan_table(entry / TOKEN_TABLE_FILE)
    with caplog.at_level(logging.WARNING):
        again, got = logits()
    assert again == entry and entry_problem(entry) is None
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert any(str(entry / TOKEN_TABLE_FILE) in m for m in _warnings(caplog))


def test_a_table_with_nan_is_never_written(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from anygrain.encode.onnx_runtime import save_token_table

    table = torch.zeros(10, 4)
    table[7, 2] = float("nan")
    with pytest.raises(AnygrainError, match="row 7"):
        save_token_table(table, tmp_path / TOKEN_TABLE_FILE, chunk_rows=4)
