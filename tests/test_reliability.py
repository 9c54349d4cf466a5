"""Never lose data, never serve a damaged index (issue 14): one table of cases per promise.

- An ``--out`` that holds anything but an index (or an index, without ``--overwrite``),
  or that overlaps the source, is refused before anything is touched.
- A damaged index file (flipped byte, truncated, missing) is refused on open, naming
  the file, by ``search``, ``eval`` and ``verify``.
- Temporary directories of killed runs are removed by the next run; a full disk
  leaves nothing behind; NaN vectors and unwritable run files are one-line errors.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from dense_helpers import single_threaded, tiny_biencoder
from test_phrase_helpers import make_tiny_model, write_squad
from typer.testing import CliRunner, Result

from anygrain.cli.main import app
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError
from anygrain.index.base import MANIFEST, Index, UncheckedIndexWarning, read_manifest
from anygrain.utils.atomic import remove_stale

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


def cli(*args: object) -> Result:
    """Run the CLI; a Python exception escaping it (a traceback for the user) fails the test."""
    r = runner.invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"traceback from {args}: {r.exception!r}\n{r.output}")
    return r


def one_line_error(r: Result, *needles: str) -> str:
    """The command failed with exit 2 and one ``error:`` line holding every needle."""
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (or ``root`` itself) with its contents."""
    if root.is_file():
        return {".": root.read_bytes()}
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def dead_pid() -> int:
    """The pid of a process that has exited, as a SIGKILLed build's would be."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_squad(tmp_path_factory.mktemp("data") / "tiny.json")


@pytest.fixture(scope="module")
def bm25(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bm25") / "idx"
    Index.build(f"squad:{squad}", kind="bm25", out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def dense(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dense") / "idx"
    model = tiny_biencoder(0)
    Index.build(f"squad:{squad}", kind="dense", out=out, model=model, progress=False, shard_size=4)
    return out


@pytest.fixture(scope="module")
def hybrid(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hybrid") / "idx"
    model = tiny_biencoder(0)
    Index.build(f"squad:{squad}", kind="hybrid", out=out, model=model, progress=False)
    return out


@pytest.fixture(scope="module")
def phrase(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from anygrain.phrase import PhraseEncoder

    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    model = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    ).save(tmp_path_factory.mktemp("phrase-model") / "m")
    out = tmp_path_factory.mktemp("phrase") / "idx"
    Index.build(f"squad:{squad}", kind="phrase", out=out, model=str(model), progress=False)
    return out


# --- 1. --out is refused before anything is touched ------------------------------------------

# Each case prepares the tmp dir and returns (source, out, what must survive untouched).
OutCase = Callable[[Path, Path, Path], tuple[str, Path, Path]]


def _unrelated_file(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    out = tmp / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    return str(squad), out, out


def _regular_file(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    out = tmp / "notes.txt"
    out.write_text("keep me")
    return str(squad), out, out


def _corpus_dir(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    out = tmp / "corpus"
    CorpusStore.build(f"squad:{squad}", out, progress=False)
    return str(squad), out, out


def _out_is_source(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    src = tmp / "docs"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"id": "a", "text": "some text"}) + "\n")
    return f"jsonl:{src}", src, src


def _out_contains_source(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    out = tmp / "work"
    out.mkdir()
    shutil.copy(squad, out / "squad.json")
    return f"squad:{out / 'squad.json'}", out, out


def _source_is_the_index_corpus(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    # `anygrain index IDX/corpus --out IDX` used to delete the corpus and leave a broken index
    idx = tmp / "idx"
    shutil.copytree(bm25, idx)
    return str(idx / "corpus"), idx, idx


def _existing_index(tmp: Path, squad: Path, bm25: Path) -> tuple[str, Path, Path]:
    idx = tmp / "idx"
    shutil.copytree(bm25, idx)
    return str(squad), idx, idx


OUT_CASES: dict[str, tuple[OutCase, str]] = {
    "unrelated-file": (_unrelated_file, "not an anygrain index"),
    "regular-file": (_regular_file, "not a directory"),
    "corpus-dir": (_corpus_dir, "not an anygrain index"),
    "out-is-source": (_out_is_source, "is the source"),
    "out-contains-source": (_out_contains_source, "contains the source"),
    "source-is-index-corpus": (_source_is_the_index_corpus, "contains the source"),
    "existing-index": (_existing_index, "--overwrite"),
}


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_index_refuses_out(case: str, tmp_path: Path, squad: Path, bm25: Path) -> None:
    prepare, says = OUT_CASES[case]
    source, out, keep = prepare(tmp_path, squad, bm25)
    before = snapshot(keep)
    one_line_error(cli("index", source, "--out", out, "-q"), str(out), says)
    assert snapshot(keep) == before
    # Python callers get the same protection as the CLI
    with pytest.raises(AnygrainError, match=says):
        Index.build(source, kind="bm25", out=out, progress=False)
    assert snapshot(keep) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_index_refuses_the_current_directory(
    tmp_path: Path, squad: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "keep.txt").write_text("precious")
    monkeypatch.chdir(tmp_path)
    one_line_error(cli("index", squad, "--out", ".", "-q"), "not an anygrain index")
    assert (tmp_path / "keep.txt").read_text() == "precious"


def test_overwrite_replaces_an_index_but_never_its_own_source(
    tmp_path: Path, squad: Path, bm25: Path
) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    r = cli("index", squad, "--out", idx, "-q", "--overwrite")
    assert r.exit_code == 0, r.output
    assert Index.load(idx).manifest["created"]
    before = snapshot(idx)
    one_line_error(cli("index", idx / "corpus", "--out", idx, "--overwrite", "-q"), "source")
    assert snapshot(idx) == before
    # an empty directory is fine without --overwrite
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("index", squad, "--out", empty, "-q").exit_code == 0


def test_refilter_refuses_out_too(tmp_path: Path, phrase: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = cli("refilter", phrase, "--out", out, "--keep", "0.5", "-q")
    one_line_error(r, "not an anygrain index")
    assert (out / "keep.txt").read_text() == "precious"
    one_line_error(
        cli("refilter", phrase, "--out", phrase / "sub", "--keep", "0.5", "-q"), "inside"
    )


# --- 2. leftovers of killed runs are cleaned --------------------------------------------------


def test_stale_temp_dirs_of_a_killed_build_are_removed(tmp_path: Path, squad: Path) -> None:
    out = tmp_path / "idx"
    pid = dead_pid()
    stale = tmp_path / f".idx.pid{pid}.k3j2h1g0.tmp"  # as atomic_dir names its temp dir
    (stale / "dense" / "model").mkdir(parents=True)
    (stale / "dense" / "model" / "model.safetensors").write_bytes(b"\0" * 100_000)
    live = tmp_path / f".idx.pid{os.getpid()}.a1b2c3d4.tmp"  # a build still running
    live.mkdir()
    stale_file = tmp_path / f".idx.{pid}.tmp"
    stale_file.write_bytes(b"half")
    other = tmp_path / f".other.pid{pid}.zzzz.tmp"  # not ours to touch: another target
    other.mkdir()
    r = cli("index", squad, "--out", out, "-q")
    assert r.exit_code == 0, r.output
    assert not stale.exists() and not stale_file.exists()
    assert live.exists() and other.exists()


def test_a_swap_cut_short_puts_the_old_index_back(tmp_path: Path, bm25: Path) -> None:
    # killed between moving the old index aside and moving the new one in
    old = tmp_path / f".idx.old.{dead_pid()}"
    shutil.copytree(bm25, old)
    remove_stale(tmp_path / "idx")
    assert not old.exists()
    assert Index.load(tmp_path / "idx").kind.value == "bm25"


def test_stale_shard_files_in_a_resumable_vectors_dir_are_removed(
    tmp_path: Path, squad: Path
) -> None:
    from anygrain.dense.shards import encode_corpus

    store = CorpusStore.build(f"squad:{squad}", tmp_path / "corpus", progress=False)
    vecs = tmp_path / "vectors"
    vecs.mkdir()
    half = vecs / f".vectors-00000.npy.{dead_pid()}.tmp"
    half.write_bytes(b"\x93NUMPY half a shard")
    encode_corpus(store, tiny_biencoder(0), vecs, shard_size=4, progress=False)
    assert not half.exists()


# --- 3 and 5. damaged indexes are refused, naming the file ------------------------------------

BM25_FILES = [
    "bm25/data.csc.index.npy",
    "bm25/indices.csc.index.npy",
    "bm25/indptr.csc.index.npy",
    "bm25/vocab.index.json",
    "bm25/params.index.json",
    "corpus/passages.arrow",
    "corpus/documents.arrow",
    "corpus/id_hash.npy",
    "corpus/id_table.npy",
    "corpus/corpus.json",
]
DENSE_FILES = [
    "dense/faiss.index",
    "dense/dense.json",
    "dense/vectors/vectors-00000.npy",
    "dense/vectors/shards.json",
    "dense/model/question/model.safetensors",
    "dense/model/question/config.json",
    "dense/model/anygrain_model.json",
    "corpus/passages.arrow",
]


def flip(f: Path) -> None:
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))


def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])


def remove(f: Path) -> None:
    f.unlink()


PHRASE_FILES = [
    "phrase/start.npy",
    "phrase/tokens.npy",
    "phrase/passage_ptr.npy",
    "phrase/end.faiss",
    "phrase/start_ids.npy",
    "phrase/model/heads.safetensors",
]
HYBRID_FILES = ["sparse/bm25/data.csc.index.npy", "dense/faiss.index", "sparse/index.json"]

DAMAGE = {
    "flip": (flip, "damaged"),
    "truncate": (truncate, "truncated"),
    "remove": (remove, "missing"),
}
DAMAGE_CASES = [
    (kind, rel, how)
    for kind, files in (
        ("bm25", BM25_FILES),
        ("dense", DENSE_FILES),
        ("phrase", PHRASE_FILES),
        ("hybrid", HYBRID_FILES),
    )
    for rel in files
    for how in ("flip", "truncate")
] + [("bm25", "bm25/vocab.index.json", "remove"), ("dense", "dense/faiss.index", "remove")]


@pytest.mark.parametrize(("kind", "rel", "how"), DAMAGE_CASES)
def test_damaged_file_is_refused_by_search_and_verify(
    kind: str, rel: str, how: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    src: Path = request.getfixturevalue(kind)
    assert rel in read_manifest(src)["files"]  # the table above still names real files
    idx = tmp_path / "idx"
    shutil.copytree(src, idx)
    damage, says = DAMAGE[how]
    damage(idx / rel)
    one_line_error(cli("search", idx, "Who created Python?"), str(idx / rel), says)
    r = cli("verify", idx)
    assert r.exit_code == 1 and f"{idx / rel}: {says}" in r.output, r.output


@pytest.mark.parametrize(
    ("kind", "rel"),
    [
        ("dense", "dense/faiss.index"),
        ("bm25", "bm25/data.csc.index.npy"),
        ("bm25", "corpus/passages.arrow"),
    ],
)
def test_flipped_byte_is_refused_by_eval(
    kind: str, rel: str, tmp_path: Path, squad: Path, request: pytest.FixtureRequest
) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(request.getfixturevalue(kind), idx)
    flip(idx / rel)
    one_line_error(cli("eval", idx, "--questions", f"squad:{squad}", "-q"), str(idx / rel))


def _manifest_list(idx: Path) -> None:
    (idx / MANIFEST).write_text("[1, 2]")


def _manifest_garbage(idx: Path) -> None:
    (idx / MANIFEST).write_bytes(b"\xff\xfe{not json")


def _no_bm25_dir(idx: Path) -> None:
    shutil.rmtree(idx / "bm25")


def _no_bm25_dir_unchecked(idx: Path) -> None:
    # an index from before checksums: the missing folder is still one line
    m = json.loads((idx / MANIFEST).read_text())
    del m["files"]
    (idx / MANIFEST).write_text(json.dumps(m))
    shutil.rmtree(idx / "bm25")


def _files_not_an_object(idx: Path) -> None:
    m = json.loads((idx / MANIFEST).read_text())
    m["files"] = ["bm25"]
    (idx / MANIFEST).write_text(json.dumps(m))


BROKEN_MANIFESTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "manifest-is-a-list": (_manifest_list, "not an anygrain index manifest"),
    "manifest-not-utf8": (_manifest_garbage, "corrupt manifest"),
    "files-not-an-object": (_files_not_an_object, "corrupt manifest"),
    "no-bm25-dir": (_no_bm25_dir, "bm25/"),
    "no-bm25-dir-old-index": (_no_bm25_dir_unchecked, "missing bm25/"),
}


@pytest.mark.parametrize("case", list(BROKEN_MANIFESTS))
def test_broken_layout_is_one_line(case: str, tmp_path: Path, bm25: Path) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    breaks, says = BROKEN_MANIFESTS[case]
    breaks(idx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedIndexWarning)
        one_line_error(cli("search", idx, "Who created Python?"), says)


def test_old_index_without_checksums_opens_with_a_warning(tmp_path: Path, bm25: Path) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    m = json.loads((idx / MANIFEST).read_text())
    del m["files"]
    (idx / MANIFEST).write_text(json.dumps(m))
    with pytest.warns(UncheckedIndexWarning, match="rebuild the index"):
        Index.load(idx)
    one_line_error(cli("verify", idx), "recorded no checksums")


def test_verify_reports_every_bad_missing_and_extra_file(tmp_path: Path, bm25: Path) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    r = cli("verify", idx)
    assert r.exit_code == 0 and "ok:" in r.output, r.output
    flip(idx / "bm25/data.csc.index.npy")
    (idx / "corpus/id_hash.npy").unlink()
    (idx / "stray.txt").write_text("x")
    r = cli("verify", idx)
    assert r.exit_code == 1, r.output
    assert f"{idx}/bm25/data.csc.index.npy: damaged" in r.output
    assert f"{idx}/corpus/id_hash.npy: missing" in r.output
    assert f"{idx}/stray.txt: not part of the index" in r.output
    assert "3 problem(s)" in r.output


def test_load_checks_large_files_by_size_unless_asked(tmp_path: Path, bm25: Path) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    flip(idx / "corpus/passages.arrow")
    with pytest.raises(AnygrainError, match=r"passages\.arrow: damaged"):
        Index.load(idx)
    # above the limit only sizes are checked on open; `full` hashes whatever the size
    Index.load(idx, small_limit=10)
    Index.load(idx, verify="sizes")
    with pytest.raises(AnygrainError, match=r"passages\.arrow: damaged"):
        Index.load(idx, verify="full", small_limit=10)
    with pytest.raises(AnygrainError, match="unknown verify 'most'"):
        Index.load(idx, verify="most")


def test_external_corpus_files_are_checked_too(tmp_path: Path, squad: Path) -> None:
    corpus = CorpusStore.build(f"squad:{squad}", tmp_path / "corpus", progress=False)
    idx = tmp_path / "idx"
    Index.build(corpus.path, kind="bm25", out=idx, progress=False)
    assert "corpus/passages.arrow" not in read_manifest(idx)["files"]
    flip(tmp_path / "corpus" / "passages.arrow")
    with pytest.raises(AnygrainError, match=r"corpus/passages\.arrow: damaged"):
        Index.load(idx)


# --- 4. NaN vectors ---------------------------------------------------------------------------


def test_nan_model_is_an_error_naming_the_model(dense: Path) -> None:
    idx = Index.load(dense)
    with torch.no_grad():
        for p in idx.model.question.model.parameters():  # type: ignore[attr-defined]
            p.fill_(float("nan"))
    with pytest.raises(
        AnygrainError, match=r"model .*dense/model/question: 1 of 1 question vectors are NaN"
    ):
        idx.search(["Who created Python?"])


def test_nan_passage_vectors_stop_the_build(tmp_path: Path, squad: Path) -> None:
    model = tiny_biencoder(0)
    with torch.no_grad():
        for p in model.passage.model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(AnygrainError, match=r"model tiny-bert-0: \d+ of \d+ passage vectors"):
        Index.build(
            f"squad:{squad}", kind="dense", out=tmp_path / "idx", model=model, progress=False
        )
    assert not (tmp_path / "idx").exists()


def test_nan_phrase_model_is_an_error_naming_the_model(phrase: Path) -> None:
    idx = Index.load(phrase)
    with torch.no_grad():
        for p in idx.model.parameters():  # type: ignore[attr-defined]
            p.fill_(float("nan"))
    with pytest.raises(AnygrainError, match=r"model .*tiny-bert.*question start vectors are NaN"):
        idx.search(["Who created Python?"])


def test_check_finite_counts_bad_rows() -> None:
    from anygrain.models.encoder import check_finite

    ok = np.ones((3, 2), dtype=np.float32)
    assert check_finite(ok, "m", "question") is ok
    bad = ok.copy()
    bad[1, 0] = np.inf
    with pytest.raises(AnygrainError, match="model m: 1 of 3 question vectors"):
        check_finite(bad, "m", "question")


# --- 5. the remaining tracebacks --------------------------------------------------------------


def test_jsonl_directory_source(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.jsonl").write_text(json.dumps({"id": "a", "text": "alpha text"}) + "\n")
    (docs / "b.jsonl").write_text(json.dumps({"id": "b", "text": "beta text"}) + "\n")
    (docs / "readme.md").write_text("not read")
    r = cli("index", f"jsonl:{docs}", "--out", tmp_path / "idx", "-q")
    assert r.exit_code == 0, r.output
    assert len(Index.load(tmp_path / "idx").corpus) == 2
    (docs / "c.jsonl").write_text(json.dumps({"id": "a", "text": "again"}) + "\n")
    one_line_error(
        cli("index", f"jsonl:{docs}", "--out", tmp_path / "i2", "-q"), "c.jsonl", "duplicate"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(cli("index", f"jsonl:{empty}", "--out", tmp_path / "i3", "-q"), "without .jsonl")
    # a format that reads only files says so instead of a traceback
    one_line_error(cli("index", f"squad:{docs}", "--out", tmp_path / "i4", "-q"), "is a directory")


def test_run_out_directory_fails_before_evaluating(
    tmp_path: Path, squad: Path, bm25: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anygrain.eval as ev

    def never(*a: object, **k: object) -> None:
        raise AssertionError("evaluation started")

    monkeypatch.setattr(ev, "evaluate", never)
    one_line_error(
        cli("eval", bm25, "--questions", f"squad:{squad}", "--run-out", tmp_path, "-q"),
        "is a directory",
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_error(
        cli("eval", bm25, "--questions", f"squad:{squad}", "--run-out", blocker / "run.trec", "-q"),
        "not a directory",
    )


def test_disk_full_while_indexing_leaves_nothing(
    tmp_path: Path, squad: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bm25s

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bm25s.BM25, "save", full)
    out = tmp_path / "idx"
    one_line_error(cli("index", squad, "--out", out, "-q"), str(out), "no space left")
    assert list(tmp_path.iterdir()) == []
