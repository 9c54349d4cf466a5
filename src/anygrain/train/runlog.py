"""What every trainer shares around its loop: the JSONL run log and the Ctrl-C guard."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from anygrain.utils.atomic import atomic_write_text


class TrainLog:
    """``train_log.jsonl``: one JSON object per log step or event."""

    def __init__(self, path: Path, echo: bool) -> None:
        self.path = path
        self.echo = echo

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(ln) for ln in lines if ln.strip()]

    def truncate_after(self, step: int) -> None:
        """Drop records a resumed run will write again."""
        if not self.path.exists():
            return
        keep = [
            ln
            for ln in self.path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and json.loads(ln).get("step", 0) <= step
        ]
        atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def say(self, message: str, step: int, **fields: Any) -> None:
        self.write({"event": "info", "step": step, "message": message, **fields})
        if self.echo:
            print(message, file=sys.stderr, flush=True)

    def done(self) -> dict[str, Any] | None:
        """The ``done`` event when it is the log's last record (messages written after it,
        such as a rerun's "already trained", do not count); None while a run is unfinished."""
        last = next((r for r in reversed(self.records()) if r.get("event") != "info"), None)
        return last if last is not None and last.get("event") == "done" else None


@contextmanager
def defer_sigint() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) until the block ends, so an update or a checkpoint is never
    half done; either then raises KeyboardInterrupt, which the trainers answer by saving a
    checkpoint."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        raise KeyboardInterrupt
