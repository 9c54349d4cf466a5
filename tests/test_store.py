from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anygrain.corpus.records import SourceDocument
from anygrain.corpus.store import CorpusStore, build_id_table, hash_ids
from anygrain.errors import ErrorLog, ErrorPolicy, InputError


def test_build_and_access(squad_file: Path, tmp_path: Path) -> None:
    s = CorpusStore.build(str(squad_file), tmp_path / "c", progress=False)
    assert len(s) == 6 and s.n_documents == 3
    assert s.manifest["source_format"] == "squad"
    p = s.passage(2)
    assert p.id == "Python_(language)_0" and p.title == "Python_(language)"
    # Offsets point into the document text.
    assert s.document_text(p.doc_id)[p.start : p.end] == p.text
    # Sentences are offsets into the passage.
    p0 = s.passage(0)
    assert [p0.text[a:b] for a, b in p0.sentences] == [
        "Alpha Centauri is the closest star system to the Solar System.",
        "It is 4.37 light-years away.",
    ]
    for row in range(len(s)):
        assert s.row_of(s.passage(row).id) == row
    with pytest.raises(KeyError):
        s.row_of("nope")
    assert "Great_Wall_1" in s and "x" not in s
    # Reopened from disk (memory-mapped), same content and checksum.
    s2 = CorpusStore(tmp_path / "c")
    assert s2.checksum == s.checksum and s2.texts([0, 5]) == s.texts([0, 5])


def test_checksum_changes_with_content(tmp_path: Path) -> None:
    a = CorpusStore.build([SourceDocument("d", "T", "one\n\ntwo")], tmp_path / "a", progress=False)
    b = CorpusStore.build(
        [SourceDocument("d", "T", "one\n\nthree")], tmp_path / "b", progress=False
    )
    assert a.checksum != b.checksum
    assert a.texts() == ["one", "two"]


def test_duplicate_ids_rejected(tmp_path: Path) -> None:
    from anygrain.corpus.records import Span

    docs = [
        SourceDocument(
            "d1", "T", "aa bb", passages=[Span(0, 2, "x"), Span(3, 5, "x")], origin="f.tsv:3"
        )
    ]
    with pytest.raises(InputError, match="duplicate passage id 'x'"):
        CorpusStore.build(docs, tmp_path / "c", progress=False)
    assert not (tmp_path / "c").exists()  # nothing half-written


def test_empty_corpus_and_empty_passages(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty corpus"):
        CorpusStore.build([], tmp_path / "c", progress=False)
    from anygrain.corpus.records import Span

    docs = [
        SourceDocument(
            "d1", "T", "aa   ", passages=[Span(0, 2, "a"), Span(2, 5, "b")], origin="f.tsv:7"
        )
    ]
    with pytest.raises(InputError, match="f.tsv:7.*empty text"):
        CorpusStore.build(docs, tmp_path / "c", progress=False)
    log = ErrorLog(ErrorPolicy.SKIP)
    s = CorpusStore.build(docs, tmp_path / "c", errors=log, progress=False)
    assert len(s) == 1 and log.n_skipped == 1 and s.manifest["skipped_records"] == 1


def test_id_table_is_exact_under_collisions() -> None:
    rng = np.random.default_rng(0)
    # Force many slot collisions with small hashes.
    hashes = rng.integers(1, 64, size=40).astype(np.uint64) * np.uint64(1 << 20)
    hashes = np.unique(hashes)
    table = build_id_table(hashes)
    size = len(table)
    for row, h in enumerate(hashes):
        slot = int(h & np.uint64(size - 1))
        while table[slot] != row:
            assert table[slot] != -1
            slot = (slot + 1) & (size - 1)
    assert (table >= 0).sum() == len(hashes)
    assert len(set(hash_ids(["a", "b", "a"]).tolist())) == 2


def test_manifest_is_json(squad_file: Path, tmp_path: Path) -> None:
    CorpusStore.build(str(squad_file), tmp_path / "c", progress=False)
    m = json.loads((tmp_path / "c" / "corpus.json").read_text())
    assert m["format_version"] == 1 and m["n_passages"] == 6
