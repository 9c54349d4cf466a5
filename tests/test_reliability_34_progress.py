"""Issue 34: a phrase build's log, redirected to a file, filled with a new progress bar
per dump shard and hundreds of carriage-return refreshes.  Now a build draws one bar over
its passages (shards advance it), and when stderr is not a terminal the bar writes plain
lines (every ``PLAIN_INTERVAL`` seconds and at the end), never a carriage return."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from anygrain.utils.progress import progress_counter

pytestmark = pytest.mark.usefixtures("torch_one_thread")

BUILD = """
import sys, torch
torch.set_num_threads(1)
from anygrain.index.base import Index
Index.build(sys.argv[1], kind="phrase", out=sys.argv[2], model=sys.argv[3], shard_size=2,
            sparse=False, progress=True)
"""


def test_a_build_logged_to_a_file_has_one_bar_of_plain_lines(
    squad: Path, model_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "build.log"
    with open(log, "w") as err:
        r = subprocess.run(
            [sys.executable, "-c", BUILD, f"squad:{squad}", str(tmp_path / "p"), str(model_dir)],
            stderr=err,
            stdout=subprocess.PIPE,
            timeout=600,
        )
    text = log.read_text()
    assert r.returncode == 0, text
    assert "\r" not in text  # no refreshes in place
    dump = [ln for ln in text.splitlines() if "dumping phrases" in ln]
    assert dump and "shard" not in " ".join(dump)  # one bar, not one per shard
    assert len(dump) <= 4, dump  # its first line, the last, and any every 30 seconds
    assert dump[-1].split("dumping phrases")[1].lstrip(": ").startswith("100%"), dump


def test_a_bar_on_a_terminal_is_left_as_it_was(tmp_path: Path) -> None:
    class Tty:
        def __init__(self) -> None:
            self.parts: list[str] = []

        def isatty(self) -> bool:
            return True

        def write(self, s: str) -> None:
            self.parts.append(s)

        def flush(self) -> None:
            pass

    tty = Tty()
    old = sys.stderr
    sys.stderr = tty  # type: ignore[assignment]
    try:
        with progress_counter(desc="x", total=3, mininterval=0) as bar:
            for _ in range(3):
                bar.update(1)
    finally:
        sys.stderr = old
    assert any("\r" in p for p in tty.parts)  # refreshed in place
