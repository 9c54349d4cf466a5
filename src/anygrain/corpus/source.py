"""Accept a corpus source in any of the forms users pass: a store, a corpus dir, or FORMAT:PATH."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anygrain.corpus.store import MANIFEST, CorpusStore
from anygrain.errors import AnygrainError, ErrorLog


def open_or_build_corpus(
    source: Any,
    out: Path,
    *,
    split: str | None = None,
    errors: ErrorLog | None = None,
    progress: bool = True,
) -> CorpusStore:
    """An existing :class:`CorpusStore` or corpus directory is reused; anything else is read into ``out``."""
    if isinstance(source, CorpusStore):
        return source
    if isinstance(source, str | Path) and (Path(source) / MANIFEST).exists():
        return CorpusStore(Path(source))
    return CorpusStore.build(source, out, split=split, errors=errors, progress=progress)


def path_ref(out: Path, target: Path) -> str:
    """A path an index at ``out`` records: relative when ``target`` sits beside or inside
    ``out``, so the set can be renamed or moved together, else absolute."""
    t, o = Path(target).resolve(), Path(out).resolve()
    if t.is_relative_to(o.parent):
        return os.path.relpath(t, o)
    return str(t)


def corpus_ref(out: Path, store: CorpusStore) -> str:
    """The corpus path an index records (a hybrid index keeps it at ``../corpus``)."""
    return path_ref(out, Path(store.path))


def open_corpus_of(path: Path, manifest: dict[str, Any]) -> CorpusStore:
    """The corpus an index was built on, checked against the checksum it recorded."""
    info = manifest.get("corpus") or {}
    cpath = Path(info.get("path", "corpus"))
    if not cpath.is_absolute():
        cpath = path / cpath
    store = CorpusStore(cpath)
    if info.get("checksum") and store.checksum != info["checksum"]:
        raise AnygrainError(
            f"{path}: corpus at {cpath} changed since the index was built (checksum mismatch); rebuild the index"
        )
    return store
