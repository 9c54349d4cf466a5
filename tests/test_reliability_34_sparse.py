"""Issue 34, class 3 (damage laundered by a copy) and the attach-sparse swap.

``index --sparse-from B`` and ``attach-sparse --from B`` check B's BM25 files against B's
manifest before copying them (the copy gets fresh checksums, so damage copied would never
be found again); a damaged B is refused with one line and nothing changes.  And a
SIGKILL at any point of ``attach-sparse`` leaves an index whose ``index.json`` names only
parts that are there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability34_helpers import one_line_error, tree
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files
from anygrain.utils.atomic import remove_stale

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def built(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bm25/`` (over the squad file) and ``p/`` (a phrase index with a BM25 part)."""
    root = tmp_path_factory.mktemp("built")
    Index.build(f"squad:{squad}", kind="bm25", out=root / "bm25", progress=False)
    Index.build(
        f"squad:{squad}", kind="phrase", out=root / "p", model=str(model_dir), progress=False
    )
    return root


def _a_bm25_file(b: Path) -> Path:
    return max((f for f in (b / "bm25").rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)


def _flip(b: Path) -> None:
    f = _a_bm25_file(b)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def _truncate(b: Path) -> None:
    f = _a_bm25_file(b)
    f.write_bytes(f.read_bytes()[:-1])


def _remove(b: Path) -> None:
    _a_bm25_file(b).unlink()


def _extra(b: Path) -> None:
    (b / "bm25" / "planted.npy").write_bytes(b"\0" * 16)


def _no_checksums(b: Path) -> None:
    m = json.loads((b / "index.json").read_text())
    del m["files"]
    (b / "index.json").write_text(json.dumps(m))


DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    ("a flipped byte", _flip, "damaged (its checksum differs"),
    ("a truncated file", _truncate, "truncated or overwritten"),
    ("a missing file", _remove, "missing"),
    ("a planted file", _extra, "planted.npy: not part of the index as built"),
    ("no checksums", _no_checksums, "recorded no checksums"),
]


@pytest.mark.parametrize(("name", "damage", "says"), DAMAGE, ids=[d[0] for d in DAMAGE])
@pytest.mark.parametrize("command", ["index --sparse-from", "attach-sparse --from"])
def test_a_damaged_bm25_index_is_not_copied(
    name: str,
    damage: Callable[[Path], None],
    says: str,
    command: str,
    built: Path,
    squad: Path,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    shutil.copytree(built / "bm25", tmp_path / "B")
    shutil.copytree(built / "p", tmp_path / "p")
    damage(tmp_path / "B")
    before = tree(tmp_path)
    args = {
        "index --sparse-from": [
            "index",
            f"squad:{squad}",
            "--kind",
            "phrase",
            "--model",
            str(model_dir),
            "--sparse-from",
            str(tmp_path / "B"),
            "--out",
            str(tmp_path / "new"),
            "-q",
        ],
        "attach-sparse --from": [
            "attach-sparse",
            str(tmp_path / "p"),
            "--from",
            str(tmp_path / "B"),
        ],
    }[command]
    line = one_line_error(CliRunner().invoke(app, args))
    assert says in line, line
    assert "is damaged, so it is not copied" in line or "cannot be checked" in line, line
    assert tree(tmp_path) == before


def test_a_whole_bm25_index_is_copied(built: Path, tmp_path: Path) -> None:
    shutil.copytree(built / "bm25", tmp_path / "B")
    shutil.copytree(built / "p", tmp_path / "p")
    r = CliRunner().invoke(
        app, ["attach-sparse", str(tmp_path / "p"), "--from", str(tmp_path / "B")]
    )
    assert r.exit_code == 0, r.output
    assert check_index_files(tmp_path / "p") == []


KILLER = """
import os, signal, sys
import anygrain.index.manifest as manifest
import anygrain.phrase.lexical as lexical

point = sys.argv[2]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if point == "part written":
    write = lexical.write_sparse
    lexical.write_sparse = lambda *a, **k: (write(*a, **k), die())
elif point == "manifest written":
    rewrite = manifest.rewrite_manifest
    manifest.rewrite_manifest = lambda *a, **k: (rewrite(*a, **k), die())
elif point == "old index moved aside":
    replace = os.replace
    def kill_after_moving_aside(src, dst):
        replace(src, dst)
        if ".old." in os.path.basename(dst):
            die()
    os.replace = kill_after_moving_aside
lexical.attach_sparse(sys.argv[1], weight=2.0, progress=False)
print("finished")
"""


@pytest.mark.parametrize("point", ["part written", "manifest written", "old index moved aside"])
def test_sigkill_during_attach_sparse_leaves_a_whole_index(
    point: str, built: Path, tmp_path: Path
) -> None:
    p = tmp_path / "p"
    shutil.copytree(built / "p", p)
    r = subprocess.run(
        [sys.executable, "-c", KILLER, str(p), point], capture_output=True, text=True
    )
    assert r.returncode == -9, (r.returncode, r.stdout, r.stderr)
    remove_stale(p)  # what the next writer of p does first: puts a moved-aside index back
    m = json.loads((p / "index.json").read_text())
    assert m["settings"].get("sparse"), m["settings"]
    assert (p / "sparse" / "index.json").is_file()
    assert check_index_files(p) == []
    weight = m["settings"]["sparse"]["weight"]
    assert weight in (1.0, 2.0)  # the old index or the new one, whole
    Index.load(p).search(["Who created Python?"], k=1)
    leftovers = [e.name for e in tmp_path.iterdir() if e.name != "p"]
    assert leftovers in ([], [".p.lock"]), leftovers  # a killed holder's file: no flock
