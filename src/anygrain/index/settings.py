"""Typed build settings: each index kind's options as a frozen, validated dataclass.

``Index.build`` (and ``Index.build_from``) split their keyword options in two: the ones
every kind takes (:class:`BuildOptions`: how the corpus is read, progress, overwrite) and
the kind's own, which become its :class:`IndexSettings` subclass (``Bm25Settings``,
``DenseSettings``, ...).  An option the kind does not take is refused, naming the option,
the kind and what it takes, instead of being dropped.  The settings are saved in
``index.json`` (``settings.build``) and rebuilt from it on open (``Index.build_settings``).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from anygrain.encode.executor import Executor, ExecutorKind
from anygrain.errors import ErrorLog, UsageError

if TYPE_CHECKING:
    from anygrain.corpus.store import CorpusStore

S = TypeVar("S", bound="IndexSettings")


@dataclass(frozen=True)
class BuildOptions:
    """What every kind's build takes, beside its settings."""

    split: str | None = None  # how documents are cut into passages (corpus.splitters)
    errors: ErrorLog | None = None  # collects records skipped under ErrorPolicy.SKIP
    progress: bool = True
    corpus_dir: Path | None = None  # where to write the passage store (default: in the index)
    overwrite: bool = False  # replace the anygrain index already at the output
    # runs a corpus encode's shards (dense, phrase, hybrid's dense part); not recorded,
    # since every executor writes the same files
    executor: Executor | ExecutorKind | str | None = None
    # where encoders run: auto (a CUDA GPU when torch sees one), cpu, cuda[:N]; not
    # recorded: every device writes the same vectors, up to rounding
    device: str | None = None
    # what runs the encoders: auto | onnx | torch (anygrain.encode.runtime.Runtime; None:
    # auto); not recorded, both runtimes write the same vectors (to ~1e-5)
    runtime: str | None = None

    def __post_init__(self) -> None:
        if self.runtime is not None:
            from anygrain.encode.onnx_runtime import parse_runtime

            parse_runtime(self.runtime)  # refused before anything is read: torch missing


@dataclass(frozen=True)
class BuildJob:
    """What ``Index.build_with`` hands a kind's ``write``: one build, in one value."""

    out: Path  # the temporary directory the index is written in (renamed when complete)
    corpus: CorpusStore  # the passage store the index is built over
    settings: IndexSettings  # the kind's own settings (its ``settings_type``)
    options: BuildOptions
    # scratch outside ``out`` that survives a failed build (a resumable encode's shards)
    work: Path


#: the options every kind takes (``threads`` is taken by ``api.build_index`` before the build)
SHARED_OPTIONS = tuple(f.name for f in fields(BuildOptions))


@dataclass(frozen=True)
class IndexSettings:
    """Base of a kind's build settings; subclasses validate in ``__post_init__``."""

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_options(cls: type[S], kind: str, options: Mapping[str, Any]) -> S:
        """The settings from keyword options; an error for an option ``kind`` does not take."""
        names = cls.option_names()
        unknown = [k for k in options if k not in names]
        if unknown:
            s = "s" if len(unknown) > 1 else ""
            raise UsageError(
                f"index kind '{kind}' does not take the option{s} "
                f"{', '.join(repr(k) for k in unknown)}; it takes {', '.join(names)} "
                f"(and, like every kind, {', '.join(SHARED_OPTIONS)})"
            )
        return cls.from_values(options)

    @classmethod
    def from_values(cls: type[S], options: Mapping[str, Any]) -> S:
        """The settings from keyword options named in :meth:`option_names` (settings that
        nest others', like a hybrid index's, take flat options and nest them here)."""
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values; a model passed as an object (not a name or a
        directory) is recorded as None: the index's own copy of it is in the index."""
        return {f.name: _json_value(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls: type[S], d: Mapping[str, Any]) -> S:
        """Settings saved by :meth:`to_dict`, validated again.  Keys this version does not
        know (an option a newer anygrain added) are left out rather than refusing the index."""
        names = set(cls.option_names())
        return cls(**{k: v for k, v in d.items() if k in names})


def _json_value(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if v is None or isinstance(v, str | int | float | bool):
        return v
    if isinstance(v, dict):  # e.g. a sharded index's shard settings
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_value(x) for x in v]
    return None  # an in-memory object (a model): not something a JSON file can hold
