"""Growing and shrinking a corpus store: new documents as a new Arrow segment, or a copy
without some documents.

A store is write-once: :func:`append_segment` and :func:`write_subset` write into a
directory the caller swaps in atomically (see :mod:`anygrain.index.updater`), never into
the store a reader may have open.  Appending keeps every old passage at its row (indexes
address passages by row), adds the new passages after them as ``passages-NNNNN.arrow``
and ``documents-NNNNN.arrow`` (listed in ``corpus.json``'s ``segments``), and rebuilds
the id table.  The content checksum is recomputed over all passages, so a store grown by
appends has the checksum of a store built at once from the same passages.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anygrain.corpus.store import (
    DOCUMENT_SCHEMA,
    MANIFEST,
    PASSAGE_SCHEMA,
    CorpusStore,
    build_id_table,
    content_checksum,
    hash_ids,
)
from anygrain.errors import AnygrainError, InputError
from anygrain.utils.atomic import atomic_write_text


def check_new_ids(store: CorpusStore, segment: CorpusStore) -> None:
    """Refuse passage ids or document ids of ``segment`` that ``store`` already holds,
    naming them (ids must stay unique: searches, qrels and deletes go by id)."""
    new_pids = segment.column("id")
    _refuse_known(
        segment,
        [pid for pid in new_pids if pid in store],
        "passage id(s) already in the corpus",
        "nothing was added",
        field="id",
    )
    old_docs = store.documents_table().column("doc_id")
    new_docs = segment.documents_table().column("doc_id")
    _refuse_known(
        segment,
        pc.filter(new_docs, pc.is_in(new_docs, value_set=old_docs)).to_pylist(),
        "document id(s) already in the corpus",
        "to replace them, delete them and compact the index first",
        field="doc_id",
    )


def _refuse_known(
    segment: CorpusStore, known: list[str], what: str, advice: str, *, field: str
) -> None:
    """Refuse ``segment`` when it repeats ids the store holds, naming the first five."""
    if known:
        more = f" and {len(known) - 5} more" if len(known) > 5 else ""
        raise InputError(
            f"{len(known)} {what}: {', '.join(repr(d) for d in known[:5])}{more}; {advice}",
            path=str(segment.manifest.get("source", "")),
            field=field,
        )


def _fresh(path: Path) -> Path:
    """Unlink ``path`` before it is written: the directory being written may hard-link the
    live store's files, which must never change in place."""
    path.unlink(missing_ok=True)
    return path


def append_segment(store: CorpusStore, segment: CorpusStore, out: Path) -> dict[str, Any]:
    """Write into ``out`` (holding a copy or hard links of ``store``'s files) the store with
    ``segment``'s passages and documents appended; returns the new manifest."""
    check_new_ids(store, segment)
    out = Path(out)
    k = len(store.segments("passages"))
    names = {what: f"{what}-{k:05d}.arrow" for what in ("passages", "documents")}
    for what, name in names.items():
        seg_files = segment.segments(what)
        if len(seg_files) != 1:
            raise AnygrainError(f"{segment.path}: a new segment must be a freshly built store")
        shutil.copyfile(segment.path / seg_files[0], _fresh(out / name))
    hashes = np.concatenate(
        [np.asarray(store.id_hashes()), np.asarray(segment.id_hashes())]
    ).astype(np.uint64)
    np.save(_fresh(out / "id_hash.npy"), hashes)
    np.save(_fresh(out / "id_table.npy"), build_id_table(hashes))
    m = dict(store.manifest)
    segs = {what: [*store.segments(what), names[what]] for what in names}
    m.update(
        segments=segs,
        n_passages=len(store) + len(segment),
        n_documents=store.n_documents + segment.n_documents,
        checksum=content_checksum([store.passages_table(), segment.passages_table()]),
        skipped_records=int(m.get("skipped_records", 0))
        + int(segment.manifest.get("skipped_records", 0)),
        appended=[
            *m.get("appended", []),
            {
                "source": segment.manifest.get("source"),
                "source_format": segment.manifest.get("source_format"),
                "n_passages": len(segment),
                "n_documents": segment.n_documents,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            },
        ],
    )
    atomic_write_text(out / MANIFEST, json.dumps(m, indent=2, ensure_ascii=False))
    return m


def write_subset(store: CorpusStore, keep_rows: np.ndarray, drop_docs: set[str], out: Path) -> None:
    """Write a new one-segment store into the new directory ``out``: ``store``'s passages
    ``keep_rows`` (in order) and its documents but ``drop_docs``; ids and content are kept,
    so it equals a store built from the remaining documents."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=False)
    rows = pa.array(np.asarray(keep_rows, dtype=np.int64))
    passages = store.passages_table().take(rows)
    docs = store.documents_table()
    keep_docs = pc.invert(pc.is_in(docs.column("doc_id"), value_set=pa.array(sorted(drop_docs))))
    documents = docs.filter(keep_docs)
    for name, table, schema in (
        ("passages.arrow", passages, PASSAGE_SCHEMA),
        ("documents.arrow", documents, DOCUMENT_SCHEMA),
    ):
        with pa.OSFile(str(out / name), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
            for batch in table.to_batches(max_chunksize=4096):
                w.write_batch(batch)
    hashes = hash_ids(passages.column("id").to_pylist())
    np.save(out / "id_hash.npy", hashes)
    np.save(out / "id_table.npy", build_id_table(hashes))
    m = {k: v for k, v in store.manifest.items() if k not in ("segments",)}
    m.update(
        n_passages=passages.num_rows,
        n_documents=documents.num_rows,
        checksum=content_checksum([passages]),
        compacted={
            "from_checksum": store.checksum,
            "dropped_documents": len(drop_docs),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )
    atomic_write_text(out / MANIFEST, json.dumps(m, indent=2, ensure_ascii=False))
    for f in out.iterdir():  # on disk before the directory is swapped in
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
