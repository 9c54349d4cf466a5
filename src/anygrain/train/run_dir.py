"""A training run's directory and its lifecycle: skip, start or resume, finish.

Every trainer writes the same things into its output directory: its config file,
``train_log.jsonl`` (a ``start`` event, log steps, a ``done`` event carrying the
trajectory and data fingerprint) and ``checkpoints/``.  :class:`RunDir` owns those
steps so the four ``train_*`` functions keep only what differs: their data, model and
the fields of their start and done events.  It also checks ``out`` before anything is
written (:func:`anygrain.utils.targets.check_output_dir`): never one of the run's inputs
(a data file, the starting model, the index of query-side training), never an index or
corpus directory nor a place inside one or inside a saved model, never a symbolic link (the
run writes into ``out``, so it would write wherever the link points).  And since a run
writes *into* its directory (the model beside its checkpoints and log) rather than swapping
it whole, ``out`` must be missing, empty, or a directory an earlier run of the same trainer
wrote (:func:`check_run_target`): a saved or packed model, or a directory holding anything
else, is refused before anything is written, since saving the model there would replace
files the run did not write (``phrase/``, ``heads.safetensors``, ``packed.safetensors``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.train.checkpoint import latest_checkpoint, remove_checkpoints
from anygrain.train.runlog import TrainLog
from anygrain.train.saved_config import SavedConfig
from anygrain.utils.targets import MODEL, artefact_kind, check_output_dir, listed_entries, name_some

LOG_FILE = "train_log.jsonl"


def config_inputs(config: SavedConfig) -> list[str]:
    """What a run of ``config`` reads that may name a path: every string setting (or list
    of them) but ``out`` -- training data, corpora, the starting model, an index, a teacher.
    Those naming no existing path (a model alias, a device) are ignored by the check."""
    found: list[str] = []
    for key, value in config.to_dict().items():
        if key == "out":
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v:
                found.append(v)
    return found


def check_run_target(out: str | Path, config: SavedConfig) -> Path:
    """Refuse, before anything is written, an ``out`` a run of ``config`` must not write
    into: a symbolic link, an input, an index or corpus directory or a place inside an
    artefact (:func:`~anygrain.utils.targets.check_output_dir`); and, when it exists and is
    not empty, a directory no earlier run of this trainer wrote -- one without its config
    file (``config.FILE``), one whose config file is another trainer's, or one whose
    ``train_log.jsonl`` is not an anygrain training log.  Returns ``out`` as a Path."""
    what = "a training run"
    t = check_output_dir(out, config_inputs(config), what=what, may_be=(MODEL,))
    if not t.is_dir():
        return t
    names = listed_entries(t)
    if not names:
        return t
    cfg = t / config.FILE
    if not cfg.is_file():
        if artefact_kind(t) == MODEL:
            raise AnygrainError(
                f"{t}: is a saved model that no training run wrote here (no {config.FILE}); "
                "training there would replace its files. Give a new or empty --out"
            )
        raise AnygrainError(
            f"{t}: not empty ({name_some(names)}) and not a training run's directory (no "
            f"{config.FILE}); training there would replace or mix with what it holds. "
            "Give a new or empty --out"
        )
    fields = {f.name for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    try:
        saved = json.loads(cfg.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise AnygrainError(
            f"{cfg}: not a {config.WHAT} anygrain wrote ({type(e).__name__}); this directory "
            "is not a training run's: give a new or empty --out"
        ) from None
    if not isinstance(saved, dict) or not set(saved) <= fields:
        other = sorted(set(saved) - fields) if isinstance(saved, dict) else []
        why = f"fields {name_some(other)} are not" if other else "it is not"
        raise AnygrainError(
            f"{cfg}: {why} a {config.WHAT}'s: this directory holds another kind of run or "
            "someone else's files. Give a new or empty --out"
        )
    check_run_log(t / LOG_FILE)
    return t


def check_run_log(path: Path) -> None:
    """Refuse a ``train_log.jsonl`` that anygrain did not write (a line that is not a JSON
    object), naming the file and line, before the run reads or truncates it."""
    if not path.exists():
        return
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        lines, bad = [], "it is not UTF-8 text"
    else:
        bad = ""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad = f"line {n} is not JSON"
            break
        if not isinstance(rec, dict) or not isinstance(rec.get("step", 0), int):
            bad = f"line {n} is not a log record"
            break
    if bad:
        raise AnygrainError(
            f"{path}: not a training log anygrain wrote ({bad}); this directory holds "
            "someone else's files: give a new or empty --out"
        )


class RunDir:
    """``out`` for one training run of ``config``; ``progress`` echoes log messages."""

    def __init__(self, out: str | Path, config: SavedConfig, *, progress: bool) -> None:
        self.out = check_run_target(out, config)
        self.out.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.progress = progress
        self.log = TrainLog(self.out / LOG_FILE, echo=progress)

    def already_trained(self, model_file: str, data_fingerprint: str, *, resume: bool) -> bool:
        """True (and says so) when this very run finished here and its model file exists.

        A finished model from other settings or data is never trained over silently: with
        ``resume`` that is an error (the user meant another ``--out``, or ``--no-resume``
        to replace it). The message is not logged: a rerun with nothing to do leaves the
        log as it was.
        """
        if not resume:
            return False
        done = self.log.done()
        if done is None or not (self.out / model_file).exists():
            return False
        trajectory = self.config.trajectory()
        old = done.get("trajectory") or {}
        changed = sorted(
            k for k in old.keys() | trajectory.keys() if old.get(k) != trajectory.get(k)
        )
        if changed:
            what = "settings (" + ", ".join(changed) + ")"
        elif done.get("data_fingerprint") != data_fingerprint:
            what = "training data"
        else:
            if self.log.echo:
                print(f"{self.out}: already trained with these settings and data", file=sys.stderr)
            return True
        raise AnygrainError(
            f"{self.out}: holds a model already trained with other {what}; give another "
            "--out, or --no-resume to train over it"
        )

    def open(self, *, resume: bool) -> Path | None:
        """Save the config and return the checkpoint to resume from (None: start afresh).

        Without ``resume`` the earlier checkpoints and log are removed first, so nothing
        of another run is mixed into this one.
        """
        checkpoint = latest_checkpoint(self.out) if resume else None
        if not resume:
            remove_checkpoints(self.out)
            self.log.path.unlink(missing_ok=True)
        self.config.save(self.out)
        return checkpoint

    def resumed(self, checkpoint: Path, step: int) -> None:
        """Drop the log records after ``step`` (the resumed run writes them again) and say
        where it continues."""
        self.log.truncate_after(step)
        self.log.say(f"resumed from {checkpoint.name} (step {step})", step)

    def start(self, **fields: Any) -> None:
        """The ``start`` event of a fresh run (dropping any log of an unfinished one)."""
        self.log.truncate_after(-1)
        self.log.write({"event": "start", "step": 0, **fields})

    def finish(
        self, step: int, data_fingerprint: str, *, keep_checkpoints: bool, **fields: Any
    ) -> None:
        """The ``done`` event that :meth:`already_trained` looks for; checkpoints go unless
        kept, since the saved model supersedes them."""
        if not keep_checkpoints:
            remove_checkpoints(self.out)
        self.log.write(
            {
                "event": "done",
                "step": step,
                "trajectory": self.config.trajectory(),
                "data_fingerprint": data_fingerprint,
                **fields,
            }
        )
