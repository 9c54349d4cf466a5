"""Accept a corpus source in any of the forms users pass: a store, a corpus dir, or FORMAT:PATH."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anygrain.corpus.store import MANIFEST, CorpusStore
from anygrain.errors import ErrorLog


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
