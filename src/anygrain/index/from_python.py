"""Indexes built from Python objects (``Index.from_texts`` / ``Index.from_documents``).

The documents go through the same build as files (:meth:`Index.build`: the atomic
directory, the checksums in ``index.json``).  Without ``out`` the index is built in a
temporary directory that belongs to the returned index: removed by
:meth:`Index.close <anygrain.index.base.Index.close>`, when the index is garbage
collected, or at exit.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.corpus.records import SourceDocument
from anygrain.errors import parse_enum

if TYPE_CHECKING:
    from anygrain.index.base import Index
    from anygrain.index.registry import IndexKind


def build_documents(
    docs: list[SourceDocument],
    *,
    kind: IndexKind | str,
    out: str | Path | None,
    **options: Any,
) -> Index:
    """An index of ``kind`` over ``docs`` in ``out`` (a managed temporary directory when
    None); ``options`` are :meth:`Index.build`'s."""
    from anygrain.corpus.pydocs import check_out
    from anygrain.index.base import Index
    from anygrain.index.registry import IndexKind

    check_out(out)
    kind = parse_enum(IndexKind, kind)  # "unknown indexkind 5: use one of ..."
    options.setdefault("progress", False)
    if out is not None:
        return Index.build(docs, kind=kind, out=out, **options)
    tmp = Path(tempfile.mkdtemp(prefix="anygrain-"))
    try:
        index = Index.build(docs, kind=kind, out=tmp / "index", **options)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # the directory lives as long as the index: close(), garbage collection or exit
    index.managed_dir = weakref.finalize(index, shutil.rmtree, str(tmp), ignore_errors=True)
    return index
