"""Issue 34, class 1: writers to one index exclude each other.

Every command that changes or replaces an index takes its writer lock
(:mod:`anygrain.utils.lock`) for the whole update.  With another writer at work it is
refused at once with one line naming that writer's pid, and nothing on disk changes;
two ``add`` runs at once never lose one's documents silently.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from reliability34_helpers import LockHolder, jsonl, one_line_error, tree
from typer.testing import CliRunner

from anygrain.api import add_documents
from anygrain.cli.main import app
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.utils.lock import IndexBusyError, lock_path, writer_lock

pytestmark = pytest.mark.usefixtures("torch_one_thread")

A = [(f"a{i}", f"alpha document {i} about apples and oranges") for i in range(30)]
B = [(f"b{i}", f"bravo document {i} about bananas") for i in range(10)]
C = [(f"c{i}", f"charlie document {i} about cherries") for i in range(2)]


def _bm25(root: Path) -> Path:
    src = jsonl(root / "a.jsonl", A)
    jsonl(root / "b.jsonl", B)
    jsonl(root / "c.jsonl", C)
    Index.build(str(src), kind="bm25", out=root / "idx", progress=False)
    return root / "idx"


@pytest.fixture(scope="module")
def phrase_dir(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("phrase") / "p"
    Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        progress=False,
        compress="none",
        keep=1.0,
    )
    return out


def _n_passages(idx: Path) -> int:
    return len(Index.load(idx).corpus)


# (name, what to prepare in the case's directory, the command given that directory)
def _prep_bm25(root: Path, phrase: Path) -> Path:
    return _bm25(root)


def _prep_deleted(root: Path, phrase: Path) -> Path:
    idx = _bm25(root)
    assert CliRunner().invoke(app, ["delete", str(idx), "--doc", "a1"]).exit_code == 0
    return idx


def _prep_phrase(root: Path, phrase: Path) -> Path:
    shutil.copytree(phrase, root / "p")
    return root / "p"


def _prep_refilter(root: Path, phrase: Path) -> Path:
    shutil.copytree(phrase, root / "p")
    shutil.copytree(phrase, root / "p2")  # an index to replace with --overwrite
    return root / "p2"


CASES = [
    ("add", _prep_bm25, lambda r: ["add", str(r / "idx"), str(r / "c.jsonl"), "-q"]),
    ("delete", _prep_bm25, lambda r: ["delete", str(r / "idx"), "--doc", "a2"]),
    ("compact", _prep_deleted, lambda r: ["compact", str(r / "idx"), "-q"]),
    (
        "index --overwrite",
        _prep_bm25,
        lambda r: ["index", str(r / "b.jsonl"), "--out", str(r / "idx"), "--overwrite", "-q"],
    ),
    ("attach-sparse", _prep_phrase, lambda r: ["attach-sparse", str(r / "p"), "-q"]),
    (
        "refilter --overwrite",
        _prep_refilter,
        lambda r: [
            "refilter",
            str(r / "p"),
            "--out",
            str(r / "p2"),
            "--keep",
            "0.5",
            "--overwrite",
            "-q",
        ],
    ),
]


@pytest.mark.parametrize(("name", "prep", "command"), CASES, ids=[c[0] for c in CASES])
def test_a_writer_at_work_refuses_the_next_and_nothing_changes(
    name: str, prep, command, tmp_path: Path, phrase_dir: Path
) -> None:
    target = prep(tmp_path, phrase_dir)
    holder = LockHolder(target)
    try:
        before = tree(tmp_path)
        line = one_line_error(CliRunner().invoke(app, command(tmp_path)))
        assert f"being updated by PID {holder.pid} (a test holding the lock)" in line, line
        assert "nothing was changed" in line
        assert tree(tmp_path) == before
    finally:
        holder.release()
    # once the holder is gone the same command runs, and leaves no lock file behind
    result = CliRunner().invoke(app, command(tmp_path))
    assert result.exit_code == 0, result.output
    assert not lock_path(target).exists()


def test_two_adds_at_once_keep_both_or_refuse_one(tmp_path: Path) -> None:
    """The issue's case: 30 passages, then `add` of 10 and of 2 at once, four times."""
    for run in range(4):
        root = tmp_path / f"run{run}"
        root.mkdir()
        idx = _bm25(root)
        procs = {
            n: subprocess.Popen(
                [sys.executable, "-m", "anygrain.cli", "add", str(idx), str(root / f), "-q"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n, f in ((10, "b.jsonl"), (2, "c.jsonl"))
        }
        outcome = {n: (p.wait(timeout=300), p.stderr.read()) for n, p in procs.items()}  # type: ignore[union-attr]
        added = sum(n for n, (rc, _) in outcome.items() if rc == 0)
        for _n, (rc, err) in outcome.items():
            if rc != 0:
                assert rc == 2, err
                # "by PID N", or "by another process" when the holder has created the lock
                # file but not yet written its PID into it
                assert "the index is being updated by" in err, err
                assert "nothing was changed" in err, err
                assert "Traceback" not in err
        assert added > 0
        assert _n_passages(idx) == 30 + added
        assert CliRunner().invoke(app, ["verify", str(idx)]).exit_code == 0


def test_two_threads_one_refused(tmp_path: Path) -> None:
    """Threads of one process exclude each other too (each takes its own lock)."""
    idx = _bm25(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        with writer_lock(idx, "adding documents"):
            entered.set()
            leave.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(60)
    try:
        add_documents(idx, str(tmp_path / "c.jsonl"), progress=False)
    except IndexBusyError as e:
        errors.append(e)
    finally:
        leave.set()
        t.join()
    assert len(errors) == 1 and "adding documents" in str(errors[0])
    assert _n_passages(idx) == 30


def test_nested_use_in_one_thread_is_allowed(tmp_path: Path) -> None:
    with writer_lock(tmp_path / "x", "outer"), writer_lock(tmp_path / "x", "inner"):
        assert lock_path(tmp_path / "x").exists()
    assert not lock_path(tmp_path / "x").exists()


def test_a_killed_writers_lock_file_does_not_block(tmp_path: Path) -> None:
    """The kernel drops a dead process's flock: a leftover file names no live holder."""
    idx = _bm25(tmp_path)
    lock_path(idx).write_text("999999999 adding documents\n")
    add_documents(idx, str(tmp_path / "c.jsonl"), progress=False)
    assert _n_passages(idx) == 32
    assert not lock_path(idx).exists()


def test_lock_path_is_beside_the_index_whatever_the_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "idx").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "idx")
    monkeypatch.chdir(tmp_path)
    want = tmp_path.resolve() / ".idx.lock"
    assert lock_path("idx") == lock_path("./idx") == lock_path(tmp_path / "link") == want


def test_an_unwritable_parent_is_one_line(tmp_path: Path) -> None:
    no_lock = writer_lock(Path("/proc/no-such-index"), "x")
    with pytest.raises(AnygrainError, match="cannot create the lock file"), no_lock:
        pass
