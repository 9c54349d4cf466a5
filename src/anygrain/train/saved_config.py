"""The one way a training config is saved beside its run and read back.

Every trainer's config is a dataclass that also derives from :class:`SavedConfig`; it
names its file, what it is (for error messages) and which fields are bookkeeping (they
may change between a run and its resume because they never change the weights).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_write_text

C = TypeVar("C", bound="SavedConfig")

# Help for the fields every trainer has.
BF16_HELP = "bfloat16 autocast: ~1.3x faster on CPUs with native bf16, several times slower without"
THREADS_HELP = "torch and FAISS threads (default: theirs); 1 on a CPU shared with other jobs"
CHECKPOINT_EVERY_HELP = "Steps between checkpoints (0: end of each epoch only)"


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flags: str | None = None,
    choices: type[enum.Enum] | None = None,
    argument: bool = False,
    path: bool = False,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A config field that is also a command-line option, so the option is written once
    (:func:`anygrain.cli.common.config_options` reads this metadata): ``help``; ``flags``,
    its declarations when not ``--field-name`` (``--x/--no-x`` for a bool); ``choices``, an
    enum a string field's value must name; ``argument``, positional instead; ``path``, a
    path on the command line (the config keeps it as a string)."""
    meta: dict[str, Any] = {"help": help}
    if flags is not None:
        meta["cli"] = flags
    if choices is not None:
        meta["choices"] = choices
    if argument:
        meta["argument"] = True
    if path:
        meta["path"] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class SavedConfig:
    """Serialisation for dataclass configs: ``to_dict``/``from_dict``, ``save``/``load`` and
    ``trajectory`` (the settings a resumed run must share)."""

    FILE: ClassVar[str] = "train_config.json"
    WHAT: ClassVar[str] = "training config"
    BOOKKEEPING: ClassVar[frozenset[str]] = frozenset()
    # Fields added after runs were made, with the value that reproduces those runs: left out
    # of the trajectory at that value, so older checkpoints and logs still match.
    ADDED: ClassVar[dict[str, Any]] = {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (subclasses turn enums into their values)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload,no-any-return]

    @classmethod
    def from_dict(cls: type[C], d: dict[str, Any]) -> C:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise AnygrainError(f"unknown {cls.WHAT} field(s): {', '.join(unknown)}")
        return cls(**d)

    @staticmethod
    def str_list(value: str | Iterable[Any]) -> list[str]:
        """A repeatable option's values as strings; one value given alone becomes a list."""
        return [str(v) for v in ([value] if isinstance(value, str) else value)]

    def below_one(self, *names: str) -> list[str]:
        """The problems of the settings among ``names`` that must be at least 1."""
        return [f"{name} must be >= 1" for name in names if getattr(self, name) < 1]

    def trajectory(self) -> dict[str, Any]:
        """The settings that determine the weights; resuming requires them unchanged."""
        return {
            k: v
            for k, v in self.to_dict().items()
            if k not in self.BOOKKEEPING and not (k in self.ADDED and self.ADDED[k] == v)
        }

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / self.FILE
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, ensure_ascii=False))
        return path

    @classmethod
    def load(cls: type[C], directory: str | Path) -> C:
        path = Path(directory) / cls.FILE
        if not path.exists():
            raise AnygrainError(f"{directory}: no {cls.FILE}")
        # here, not at the top: importing the readers package loads every reader, and a
        # config (what ``anygrain train --help`` is made of) is imported without them
        from anygrain.corpus.readers._io import load_json

        d = load_json(path)  # syntax errors name the file and line
        if not isinstance(d, dict):
            raise AnygrainError(f"{path}: expected a JSON object")
        return cls.from_dict(d)
