"""Deleted documents: a tombstone file an index's manifest names, recorded on the index.

``anygrain delete`` does not touch an index's arrays: it writes
``tombstones-NNNNN.json`` (each deleted document id and its passage rows) and records
it in ``index.json`` (``tombstones``).  ``Index.load`` records them on the index it
opens (:func:`hide_deleted`); every search of it, whatever the door (``search``,
``search_encoded``, any unit, kind or composite), then leaves their rows out with the
metadata filter's row mask (:func:`anygrain.index.filters.search_mask`), asking for more
candidates than ``k`` so that ``k`` live hits still come back.  ``anygrain compact``
rebuilds the index without them (:mod:`anygrain.index.updater`).  This module imports no index kind, so the Index base
may use it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError


def tombstone_name(serial: int) -> str:
    return f"tombstones-{serial:05d}.json"


@dataclass(frozen=True)
class Tombstones:
    """Deleted documents and the passage rows they had."""

    docs: dict[str, list[int]]
    corpus_checksum: str

    @functools.cached_property
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


def hide_deleted(index: Any, manifest: dict[str, Any]) -> Any:
    """Record on ``index`` (an opened :class:`~anygrain.index.base.Index`) the tombstones its
    manifest names, which every search of it then applies; returns the index."""
    tomb = read_tombstones(index.path, manifest)
    if tomb is not None and tomb.docs:
        index.tombstones = tomb
    return index
