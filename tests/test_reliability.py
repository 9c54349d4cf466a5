"""Never lose data, never serve a damaged index (issue 14): one table of cases per promise.

- An ``--out`` that holds anything but an index (or an index, without ``--overwrite``),
  or that overlaps the source, is refused before anything is touched.
- A damaged index file (flipped byte, truncated, missing) is refused on open, naming
  the file, by ``search``, ``eval`` and ``verify``.
- Temporary directories of killed runs are removed by the next run; a full disk
  leaves nothing behind; NaN vectors and unwritable run files are one-line errors.
- Every writer (issue 24: ``eval --run-out``, ``pack --out``, training ``--out``, ``index
  --out --overwrite``) goes through one target check: never over an input, never
  inside an index, model or corpus directory; ``--overwrite`` replaces only the files
  an index's manifest lists; packing a packed model is refused.
- Model weights are hashed on load whatever their size (once per process per version);
  ``verify`` opens the index as search does; sharded indexes refuse add/compact clearly.
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
from anygrain.index.base import Index
from anygrain.index.manifest import MANIFEST, UncheckedIndexWarning, read_manifest
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
def phrase_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved (full) phrase model directory."""
    from anygrain.phrase import PhraseEncoder

    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    return PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    ).save(tmp_path_factory.mktemp("phrase-model") / "m")


@pytest.fixture(scope="module")
def phrase(squad: Path, phrase_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("phrase") / "idx"
    Index.build(
        f"squad:{squad}", kind="phrase", out=out, model=str(phrase_model), compress="none", keep=1.0
    )
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
    # torch: the weights changed in place are what encodes (an ONNX graph is exported once)
    idx = Index.load(dense, runtime="torch")
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
    # torch: the weights changed in place are what encodes (an ONNX graph is exported once)
    idx = Index.load(phrase, runtime="torch")
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


# --- 6. every writer's target check (issue 24): never over an input, never inside an ---------
# --- index, model or corpus directory -----------------------------------------------------------

# Each case prepares tmp and returns (the --run-out target, what must survive untouched).
RunOutCase = Callable[[Path, Path, Path, Path], tuple[Path, Path]]


def _run_over_manifest(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    return idx / MANIFEST, idx


def _run_over_corpus_file(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    return idx / "corpus" / "passages.arrow", idx


def _run_new_file_in_index(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    return idx / "bm25" / "run.trec", idx


def _run_over_questions(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    return questions, questions


def _run_over_questions_link(
    tmp: Path, questions: Path, idx: Path, model: Path
) -> tuple[Path, Path]:
    link = tmp / "run.trec"
    os.link(questions, link)  # a hard link: another name, the same file
    return link, questions


def _run_inside_model(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    return model / "run.trec", model


def _run_inside_corpus(tmp: Path, questions: Path, idx: Path, model: Path) -> tuple[Path, Path]:
    corpus = CorpusStore.build(f"squad:{questions}", tmp / "corpus", progress=False)
    return corpus.path / "run.trec", corpus.path


RUN_OUT_CASES: dict[str, tuple[RunOutCase, str]] = {
    "over-index-manifest": (_run_over_manifest, "inside the anygrain index"),
    "over-index-corpus-file": (_run_over_corpus_file, "inside the anygrain index"),
    "new-file-in-index": (_run_new_file_in_index, "inside the anygrain index"),
    "over-questions": (_run_over_questions, "is the input"),
    "hard-link-of-questions": (_run_over_questions_link, "is the input"),
    "inside-a-saved-model": (_run_inside_model, "inside the saved model"),
    "inside-a-corpus": (_run_inside_corpus, "inside the corpus directory"),
}


@pytest.mark.parametrize("case", list(RUN_OUT_CASES))
def test_eval_run_out_never_replaces_an_input_or_an_artefact(
    case: str, tmp_path: Path, squad: Path, bm25: Path, phrase_model: Path
) -> None:
    from anygrain.api import evaluate_index

    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    questions = shutil.copy(squad, tmp_path / "questions.json")
    model = tmp_path / "model"
    shutil.copytree(phrase_model, model)
    prepare, says = RUN_OUT_CASES[case]
    target, keep = prepare(tmp_path, Path(questions), idx, model)
    before = snapshot(keep)
    r = cli("eval", idx, "--questions", f"squad:{questions}", "--run-out", target, "-q")
    one_line_error(r, str(target), says)
    assert snapshot(keep) == before
    # Python callers too (the index checks its questions as it evaluates them)
    with pytest.raises(AnygrainError, match=says):
        evaluate_index(idx, f"squad:{questions}", run_out=target, progress=False)
    assert snapshot(keep) == before
    assert Index.load(idx).search_one("Who created Python?")


def test_run_out_elsewhere_passes_the_check(tmp_path: Path, squad: Path, bm25: Path) -> None:
    from anygrain.eval.runs import check_run_path

    run = tmp_path / "runs" / "bm25.trec"
    assert check_run_path(run, [f"squad:{squad}", bm25]) == run
    (tmp_path / "old.trec").write_text("an earlier run\n")  # replacing a run is fine
    assert check_run_path(tmp_path / "old.trec", [f"squad:{squad}", bm25])


def _multicpr_root(tmp: Path) -> Path:
    root = tmp / "multi-cpr"
    for name in ("ecom", "video"):
        d = root / name
        d.mkdir(parents=True)
        (d / "corpus.tsv").write_text(f"1\t{name} passage one\n2\t{name} passage two\n")
        (d / "dev.query.txt").write_text(f"100\t{name} one\n")
        (d / "qrels.dev.tsv").write_text("100\t0\t1\t1\n")
    return root


# eval-domains: (--index pattern, --run-out, what the refusal says)
DOMAINS_RUN_OUT_CASES: dict[str, tuple[str, str, str]] = {
    "merged-over-a-query-file": ("{tmp}/merged", "{root}/ecom/dev.query.txt", "is the input"),
    "merged-over-qrels": ("{tmp}/merged", "{root}/video/qrels.dev.tsv", "is the input"),
    "merged-inside-the-index": ("{tmp}/merged", "{tmp}/merged/run.trec", "inside the anygrain"),
    "per-domain-inside-an-index": ("{tmp}/idx/{{domain}}", "{tmp}/idx/ecom/run", "inside the"),
}


@pytest.mark.parametrize("case", list(DOMAINS_RUN_OUT_CASES))
def test_eval_domains_run_out_never_replaces_an_input_or_an_index(
    case: str, tmp_path: Path
) -> None:
    root = _multicpr_root(tmp_path)
    for name in ("ecom", "video"):
        Index.build(
            f"multicpr:{root / name}", kind="bm25", out=tmp_path / "idx" / name, progress=False
        )
    Index.build(f"multicpr:{root}", kind="bm25", out=tmp_path / "merged", progress=False)
    index, run_out, says = (x.format(tmp=tmp_path, root=root) for x in DOMAINS_RUN_OUT_CASES[case])
    before = {p: snapshot(p) for p in (root, tmp_path / "idx", tmp_path / "merged")}
    r = cli("eval-domains", root, "--index", index, "--run-out", run_out, "-q")
    one_line_error(r, says)
    assert {p: snapshot(p) for p in (root, tmp_path / "idx", tmp_path / "merged")} == before


def test_model_config_names_match_the_model_base() -> None:
    # the target check knows saved models by these names without importing torch
    from anygrain.models.base import MODEL_FORMS
    from anygrain.utils.targets import MODEL_CONFIG_FILES

    assert set(MODEL_CONFIG_FILES) == {f.config_file for f in MODEL_FORMS.values()}


# pack: (model to pack: "full" | "packed", --out relative to the case's dir or the model)
PACK_CASES: dict[str, tuple[str, str, str]] = {
    "out-is-the-full-model": ("full", "{model}", "is the input"),
    "out-is-the-packed-model": ("packed", "{model}", "is the input"),
    "repack-a-packed-model": ("packed", "{tmp}/again", "already a packed model"),
    "out-inside-the-model": ("full", "{model}/packed", "inside the saved model"),
    "out-is-an-index": ("full", "{idx}", "is an anygrain index"),
    "out-inside-an-index": ("full", "{idx}/packed", "inside the anygrain index"),
}


@pytest.fixture(scope="module")
def packed_model(phrase_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from anygrain.phrase import PhraseEncoder
    from anygrain.phrase.packed import pack_phrase_model

    out = tmp_path_factory.mktemp("packed") / "p"
    return pack_phrase_model(PhraseEncoder.load(phrase_model), out, card="# card\n")


@pytest.mark.parametrize("case", list(PACK_CASES))
def test_pack_never_replaces_its_input_nor_packs_twice(
    case: str, tmp_path: Path, phrase_model: Path, packed_model: Path, bm25: Path
) -> None:
    which, out_pattern, says = PACK_CASES[case]
    model = tmp_path / "model"
    shutil.copytree(phrase_model if which == "full" else packed_model, model)
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    out = Path(out_pattern.format(model=model, tmp=tmp_path, idx=idx))
    before = {p: snapshot(p) for p in (model, idx)}
    one_line_error(cli("pack", model, "--out", out), says)
    assert {p: snapshot(p) for p in (model, idx)} == before
    assert not (tmp_path / "again").exists() and not (model / "packed").exists()


# training runs: (--out relative to the case's paths, what the refusal says)
TRAIN_OUT_CASES: dict[str, tuple[str, str]] = {
    "out-is-an-index": ("{idx}", "is an anygrain index"),
    "out-inside-an-index": ("{idx}/reader", "inside the anygrain index"),
    "out-is-the-training-data": ("{data}", "is the input"),
    "out-inside-a-saved-model": ("{model}/reader", "inside the saved model"),
    "out-is-a-corpus": ("{idx}/corpus", "is a corpus directory"),
}


@pytest.mark.parametrize("case", list(TRAIN_OUT_CASES))
def test_training_out_is_checked_before_anything_is_written(
    case: str, tmp_path: Path, squad: Path, bm25: Path, phrase_model: Path
) -> None:
    from anygrain.train.reader.config import ReaderTrainConfig
    from anygrain.train.run_dir import RunDir

    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    data = Path(shutil.copy(squad, tmp_path / "train.json"))
    model = tmp_path / "model"
    shutil.copytree(phrase_model, model)
    pattern, says = TRAIN_OUT_CASES[case]
    out = Path(pattern.format(idx=idx, data=data, model=model))
    before = {p: snapshot(p) for p in (idx, data, model)}
    one_line_error(cli("train", "reader", "--train", data, "--out", out), says)
    with pytest.raises(AnygrainError, match=says):  # every trainer's RunDir
        RunDir(out, ReaderTrainConfig(train=[f"squad:{data}"], out=str(out)), progress=False)
    assert {p: snapshot(p) for p in (idx, data, model)} == before
    assert not (idx / "reader").exists() and not (model / "reader").exists()


# --overwrite: (files put inside the index, needles of the refusal; None: replaced fine)
OVERWRITE_CASES: dict[str, tuple[list[str], list[str] | None]] = {
    "user-file-at-the-top": (["thesis.tex"], ["thesis.tex"]),
    "user-file-in-a-part": (["bm25/notes.md"], ["bm25/notes.md"]),
    "many-user-files": ([f"n{i}.txt" for i in range(5)], ["n0.txt", "n2.txt", "and 2 more"]),
    "only-anygrain-temporaries": ([".index.json.99999.ab12.tmp", ".DS_Store"], None),
}


@pytest.mark.parametrize("case", list(OVERWRITE_CASES))
def test_overwrite_replaces_only_what_the_index_owns(
    case: str, tmp_path: Path, squad: Path, bm25: Path
) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    put, says = OVERWRITE_CASES[case]
    for rel in put:
        (idx / rel).write_text("the user's")
    before = snapshot(idx)
    r = cli("index", squad, "--out", idx, "--overwrite", "-q")
    if says is None:
        assert r.exit_code == 0, r.output
        return
    one_line_error(r, str(idx), "files the index did not write", *says)
    assert snapshot(idx) == before
    with pytest.raises(AnygrainError, match="files the index did not write"):
        Index.build(f"squad:{squad}", kind="bm25", out=idx, overwrite=True, progress=False)
    assert snapshot(idx) == before


# --- 7. what a query goes through is checked, and verify opens the index (issue 24) -----------

MODEL_WEIGHTS = {
    "dense": "dense/model/question/model.safetensors",
    "phrase": "phrase/model/phrase/model.safetensors",
}


@pytest.mark.parametrize("kind", list(MODEL_WEIGHTS))
def test_model_weights_are_hashed_on_load_whatever_their_size(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anygrain.utils.checksums as checksums

    src: Path = request.getfixturevalue(kind)
    rel = MODEL_WEIGHTS[kind]
    assert rel in read_manifest(src)["files"]
    idx = tmp_path / "idx"
    shutil.copytree(src, idx)
    hashed: list[Path] = []
    real = checksums.hash_file
    monkeypatch.setattr(checksums, "hash_file", lambda p: hashed.append(p) or real(p))
    # small_limit=1 makes every file "large", as a 90 MB encoder is under the default
    Index.load(idx, small_limit=1)
    assert idx / rel in hashed
    hashed.clear()
    Index.load(idx, small_limit=1)  # once per process: this version was checked already
    assert idx / rel not in hashed
    Index.load(idx, verify="sizes")  # sizes only, when asked
    assert not hashed
    flip(idx / rel)
    st = (idx / rel).stat()
    os.utime(idx / rel, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(AnygrainError, match=rf"{rel}: damaged"):
        Index.load(idx, small_limit=1)
    one_line_error(cli("search", idx, "Who created Python?"), str(idx / rel), "damaged")


def _edit_kind(idx: Path, other: Path) -> None:
    m = json.loads((idx / MANIFEST).read_text())
    m["kind"] = "bogus"
    (idx / MANIFEST).write_text(json.dumps(m))


def _edit_corpus_path(idx: Path, other: Path) -> None:
    m = json.loads((idx / MANIFEST).read_text())
    m["corpus"]["path"] = str(other)
    (idx / MANIFEST).write_text(json.dumps(m))


def _edit_format_version(idx: Path, other: Path) -> None:
    m = json.loads((idx / MANIFEST).read_text())
    m["format_version"] = 99
    (idx / MANIFEST).write_text(json.dumps(m))


EDITED_MANIFESTS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "unknown-kind": (_edit_kind, "unknown index kind 'bogus'"),
    "corpus-path-to-another-corpus": (_edit_corpus_path, "corpus"),
    "format-version": (_edit_format_version, "format version 99"),
}


@pytest.mark.parametrize("case", list(EDITED_MANIFESTS))
def test_verify_refuses_what_search_refuses(case: str, tmp_path: Path, bm25: Path) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    docs = tmp_path / "other.jsonl"
    docs.write_text(json.dumps({"id": "x", "text": "another corpus altogether"}) + "\n")
    other = CorpusStore.build(f"jsonl:{docs}", tmp_path / "other-corpus", progress=False)
    edit, says = EDITED_MANIFESTS[case]
    edit(idx, other.path)
    searched = one_line_error(cli("search", idx, "Who created Python?"), says)
    assert one_line_error(cli("verify", idx), says) == searched


@pytest.fixture(scope="module")
def sharded(squad: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sharded") / "idx"
    Index.build(f"squad:{squad}", kind="sharded", of="bm25", shards=2, out=out, progress=False)
    return out


SHARDED_UPDATES: dict[str, tuple[list[str], str]] = {
    "add": (["add", "{idx}", "jsonl:{docs}"], "adding documents"),
    "compact": (["compact", "{idx}"], "compacting"),
}


@pytest.mark.parametrize("case", list(SHARDED_UPDATES))
def test_sharded_index_refuses_add_and_compact_clearly(
    case: str, tmp_path: Path, sharded: Path
) -> None:
    idx = tmp_path / "idx"
    shutil.copytree(sharded, idx)
    docs = tmp_path / "new.jsonl"
    docs.write_text(json.dumps({"id": "new", "text": "a brand new document"}) + "\n")
    assert cli("delete", idx, "--doc", "Python").exit_code == 0  # something to compact
    before = snapshot(idx)
    args, says = SHARDED_UPDATES[case]
    r = cli(*[a.format(idx=idx, docs=docs) for a in args])
    one_line_error(r, str(idx), says, "not supported for a sharded index")
    assert snapshot(idx) == before
    assert cli("verify", idx).exit_code == 0


def test_add_keeps_a_users_file_but_never_takes_it_as_the_index_s(
    tmp_path: Path, squad: Path, bm25: Path
) -> None:
    """add carries a file the user put inside the index over, unrecorded, so a later
    --overwrite still refuses to delete it."""
    idx = tmp_path / "idx"
    shutil.copytree(bm25, idx)
    (idx / "notes.md").write_text("the user's")
    more = write_squad(tmp_path / "more.json", [("New", "A passage about lighthouses.", [])])
    r = cli("add", idx, f"squad:{more}", "-q")
    assert r.exit_code == 0, r.output
    assert (idx / "notes.md").read_text() == "the user's"
    assert "notes.md" not in read_manifest(idx)["files"]
    one_line_error(cli("index", squad, "--out", idx, "--overwrite", "-q"), "notes.md")
    assert (idx / "notes.md").read_text() == "the user's"
