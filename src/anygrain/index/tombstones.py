"""Deleted documents: a tombstone file an index's manifest names, and the search filter.

``anygrain delete`` does not touch an index's arrays: it writes
``tombstones-NNNNN.json`` (each deleted document id and its passage rows) and records
it in ``index.json`` (``tombstones``).  Every index opened by ``Index.load`` with
tombstones searches through :func:`hide_deleted`, which asks the index for more
candidates than ``k`` and drops hits of deleted rows or documents, so ``k`` hits still
come back.  ``anygrain compact`` rebuilds the index without them
(:mod:`anygrain.index.updater`).  This module imports no index kind, so the Index base
may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError

#: Doubling rounds before a search gives up looking for ``k`` live hits (phrase indexes
#: may hold many hits per deleted passage; every other kind needs one round).
MAX_ROUNDS = 12


def tombstone_name(serial: int) -> str:
    return f"tombstones-{serial:05d}.json"


@dataclass(frozen=True)
class Tombstones:
    """Deleted documents and the passage rows they had."""

    docs: dict[str, list[int]]
    corpus_checksum: str

    @property
    def rows(self) -> frozenset[int]:
        return frozenset(r for rows in self.docs.values() for r in rows)

    def to_json(self) -> str:
        return json.dumps(
            {"corpus_checksum": self.corpus_checksum, "docs": self.docs}, ensure_ascii=False
        )


def read_tombstones(path: str | Path, manifest: dict[str, Any]) -> Tombstones | None:
    """The tombstones ``manifest`` records for the index at ``path`` (None when none)."""
    info = manifest.get("tombstones")
    if not info:
        return None
    f = Path(path) / str(info["file"])
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise AnygrainError(f"{f}: unreadable tombstone file ({e}); the index is damaged") from e
    # rows stay valid when documents are added (old rows never move), so the corpus the
    # tombstones were written for is recorded, not required
    return Tombstones(
        {str(k): [int(r) for r in v] for k, v in data["docs"].items()},
        str(data.get("corpus_checksum", "")),
    )


def filter_hits(hits: Sequence[Any], rows: frozenset[int], docs: frozenset[str]) -> list[Any]:
    """``hits`` without those of deleted passage rows or documents."""
    return [h for h in hits if h.passage_row not in rows and h.doc_id not in docs]


def filtered_search(
    search: Callable[..., list[list[Any]]], tomb: Tombstones
) -> Callable[..., list[list[Any]]]:
    """``search`` that never returns a hit of a deleted document.

    The first round asks for ``k`` plus the number of deleted rows (enough for passage
    hits: each deleted row takes at most one place); while a query still has fewer than
    ``k`` live hits and the index returned all it was asked for, the depth doubles."""
    rows, docs = tomb.rows, frozenset(tomb.docs)

    def search_live(queries: Sequence[str], k: int = 10, **options: Any) -> list[list[Any]]:
        want = k + len(rows)
        for _ in range(MAX_ROUNDS):
            found = search(queries, want, **options)
            live = [filter_hits(hits, rows, docs) for hits in found]
            short = any(len(lv) < k and len(h) >= want for lv, h in zip(live, found, strict=True))
            if not short:
                break
            want *= 2
        return [lv[:k] for lv in live]

    return search_live


def hide_deleted(index: Any, manifest: dict[str, Any]) -> Any:
    """Make ``index.search`` (an opened :class:`~anygrain.index.base.Index`) skip the
    documents its manifest's tombstones delete; returns the index."""
    tomb = read_tombstones(index.path, manifest)
    if tomb is not None and tomb.docs:
        index.tombstones = tomb
        index.search = filtered_search(index.search, tomb)
    return index
