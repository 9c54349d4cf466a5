"""Shared by tests/test_reliability_34_*.py: what a directory tree holds (to check that a
refused command changed nothing on disk), a holder of an index's writer lock in another
process, and the one-line error a command printed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import Result

HOLD_LOCK = """
import sys
from anygrain.utils.lock import writer_lock
with writer_lock(sys.argv[1], "a test holding the lock"):
    print("held", flush=True)
    sys.stdin.read()
"""


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (hidden ones too) with its kind and content hash, links
    as their target: equal before and after means nothing was written, removed or left."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
    return out


class LockHolder:
    """A process holding the writer lock of ``target`` until :meth:`release`."""

    def __init__(self, target: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "held", line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def one_line_error(result: Result) -> str:
    """The error a command printed: exit status 2, one ``error:`` line, no traceback."""
    text = result.output
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


def jsonl(path: Path, rows: list[tuple[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, text in rows:
            f.write(json.dumps({"id": doc_id, "title": doc_id, "text": text}) + "\n")
    return path
