"""The Index base class, its on-disk manifest and the registry of index kinds.

Every index is a directory with ``index.json`` naming its kind, format version,
the corpus checksum and model fingerprint it was built with, and its settings.
``Index.load(dir)`` reads the kind from ``index.json`` (never from the file name)
and dispatches to the registered class.
"""

from __future__ import annotations

import enum
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.search.hit import Hit, Unit
from anygrain.utils.atomic import atomic_write_text

MANIFEST = "index.json"
FORMAT = "anygrain.index"


class IndexKind(str, enum.Enum):
    BM25 = "bm25"
    DENSE = "dense"
    HYBRID = "hybrid"
    PHRASE = "phrase"


_REGISTRY: dict[IndexKind, type[Index]] = {}


def register_index(kind: IndexKind):  # type: ignore[no-untyped-def]
    """Class decorator: make ``Index.load`` and ``Index.build`` dispatch to this class."""

    def deco(cls: type[Index]) -> type[Index]:
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls

    return deco


def _ensure_loaded() -> None:
    # Index kinds register themselves on import.
    import anygrain.search.kinds  # noqa: F401


def read_manifest(path: Path) -> dict[str, Any]:
    f = Path(path) / MANIFEST
    if not f.exists():
        raise AnygrainError(f"{path}: not an anygrain index (no {MANIFEST})")
    try:
        m = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise AnygrainError(f"{f}: corrupt manifest ({e.msg}, line {e.lineno})") from None
    if m.get("format") != FORMAT:
        raise AnygrainError(f"{f}: not an anygrain index manifest")
    return m


def write_manifest(path: Path, kind: IndexKind, version: int, **fields: Any) -> dict[str, Any]:
    m = {
        "format": FORMAT,
        "kind": kind.value,
        "format_version": version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **fields,
    }
    atomic_write_text(Path(path) / MANIFEST, json.dumps(m, indent=2, ensure_ascii=False))
    return m


class Index(ABC):
    """A searchable index over a corpus store."""

    kind: ClassVar[IndexKind]
    format_version: ClassVar[int] = 1
    default_unit: ClassVar[Unit] = Unit.PASSAGE

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = Path(path)
        self.manifest = manifest

    # --- construction -------------------------------------------------
    @staticmethod
    def build(source: Any, *, kind: IndexKind | str, out: str | Path, **settings: Any) -> Index:
        """Build an index of ``kind`` from a source (``FORMAT:PATH``, path, or corpus store)."""
        _ensure_loaded()
        k = IndexKind(kind)
        if k not in _REGISTRY:
            raise AnygrainError(f"index kind '{k.value}' is not available")
        return _REGISTRY[k].build_from(source, Path(out), **settings)

    @classmethod
    @abstractmethod
    def build_from(cls, source: Any, out: Path, **settings: Any) -> Index: ...

    @staticmethod
    def load(path: str | Path, **options: Any) -> Index:
        """Open an index directory, whatever its kind."""
        _ensure_loaded()
        p = Path(path)
        m = read_manifest(p)
        try:
            kind = IndexKind(m.get("kind"))
        except ValueError:
            raise AnygrainError(f"{p / MANIFEST}: unknown index kind {m.get('kind')!r}") from None
        cls = _REGISTRY[kind]
        if m.get("format_version") != cls.format_version:
            raise IndexMismatchError(
                f"{p}: index format version {m.get('format_version')} but this anygrain reads "
                f"version {cls.format_version}; rebuild the index"
            )
        return cls.open(p, m, **options)

    @classmethod
    @abstractmethod
    def open(cls, path: Path, manifest: dict[str, Any], **options: Any) -> Index: ...

    # --- search ---------------------------------------------------------
    @abstractmethod
    def search(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Hit]]:
        """Top-``k`` hits for each query, best first."""

    def search_one(self, query: str, k: int = 10, **options: Any) -> list[Hit]:
        return self.search([query], k, **options)[0]

    @property
    def corpus(self):  # type: ignore[no-untyped-def]
        """The passage store this index was built over."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), **self.manifest}
