"""The passage store: a corpus directory of Arrow IPC files, memory-mapped on open.

Layout of a corpus directory::

    corpus.json        manifest: format version, counts, source, split, checksum
    passages.arrow     id, doc_id, title, text, start, end, sent_starts, sent_ends, meta
    documents.arrow    doc_id, title, text, meta
    id_hash.npy        64-bit hash of each passage id, by row
    id_table.npy       open-addressing table: slot -> row (or -1), for O(1) lookup by id

Nothing here loads the whole corpus into Python objects: columns are read
zero-copy from the memory map, and rows are materialised on demand.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anygrain.corpus.formats import Source, parse_source
from anygrain.corpus.pydocs import surrogate_problem
from anygrain.corpus.records import Passage, SourceDocument
from anygrain.corpus.splitters import SplitSpec, split_document
from anygrain.errors import AnygrainError, ErrorLog, InputError
from anygrain.utils.atomic import atomic_dir, atomic_write_text
from anygrain.utils.progress import progress_bar

FORMAT = "anygrain.corpus"
FORMAT_VERSION = 1
MANIFEST = "corpus.json"

PASSAGE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("doc_id", pa.string()),
        ("title", pa.string()),
        ("text", pa.large_string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("sent_starts", pa.list_(pa.int32())),
        ("sent_ends", pa.list_(pa.int32())),
        ("meta", pa.string()),
    ]
)
DOCUMENT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("title", pa.string()),
        ("text", pa.large_string()),
        ("meta", pa.string()),
    ]
)


def hash_ids(ids: Iterable[str]) -> np.ndarray:
    """Stable 64-bit hashes of ids (blake2b), never 0 so 0 can mean 'empty' elsewhere."""
    out = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(i.encode("utf-8"), digest_size=8).digest(), "little")
            or 1
            for i in ids
        ),
        dtype=np.uint64,
    )
    return out


def build_id_table(hashes: np.ndarray) -> np.ndarray:
    """Open-addressing (linear probing) table from slot to row, built with vectorised rounds."""
    n = len(hashes)
    size = 1 << max(4, int(np.ceil(np.log2(max(2 * n, 2)))))
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int64)
    pos = (hashes & mask).astype(np.int64)
    pending = np.arange(n, dtype=np.int64)
    while pending.size:
        free = table[pos[pending]] == -1
        cand = pending[free]
        slots, first = np.unique(pos[cand], return_index=True)
        winners = cand[first]
        table[slots] = winners
        placed = np.zeros(n, dtype=bool)
        placed[winners] = True
        pending = pending[~placed[pending]]
        pos[pending] = (pos[pending] + 1) & (size - 1)
    return table


def checksum_record(pid: str, title: str, text: str) -> bytes:
    """One passage's part of the store checksum (SHA-256 over these, in row order)."""
    return f"{pid}\x00{title}\x00{text}\x01".encode()


def content_checksum(tables: Iterable[pa.Table], batch_size: int = 8192) -> str:
    """The store checksum of the passages of ``tables`` in row order, as :meth:`CorpusStore.build`
    computes it while writing."""
    sha = hashlib.sha256()
    for table in tables:
        for batch in table.to_batches(max_chunksize=batch_size):
            for pid, title, text in zip(
                batch.column("id").to_pylist(),
                batch.column("title").to_pylist(),
                batch.column("text").to_pylist(),
                strict=True,
            ):
                sha.update(checksum_record(pid, title, text))
    return sha.hexdigest()


def _read_segments(path: Path, names: list[str]) -> pa.Table:
    """The memory-mapped segments as one table (zero-copy: one chunk list per column)."""
    tables = [pa.ipc.open_file(pa.memory_map(str(path / n), "r")).read_all() for n in names]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


class _Writer:
    """Streams passages and documents to Arrow files in batches while hashing the content."""

    def __init__(self, tmp: Path, batch_size: int) -> None:
        self.batch_size = batch_size
        self.p_sink = pa.OSFile(str(tmp / "passages.arrow"), "wb")
        self.p_writer = pa.ipc.new_file(self.p_sink, PASSAGE_SCHEMA)
        self.d_sink = pa.OSFile(str(tmp / "documents.arrow"), "wb")
        self.d_writer = pa.ipc.new_file(self.d_sink, DOCUMENT_SCHEMA)
        self.p_rows: list[dict[str, Any]] = []
        self.d_rows: list[dict[str, Any]] = []
        self.sha = hashlib.sha256()
        # Passage ids are hashed a batch at a time: a 1M-passage corpus never sits in
        # Python strings, only in 8 bytes a passage.
        self.hash_chunks: list[np.ndarray] = []
        self.n_passages = 0
        self.n_docs = 0

    def add(self, doc: SourceDocument, passages: list[Passage]) -> None:
        self.d_rows.append(
            {
                "doc_id": doc.doc_id,
                "title": doc.title,
                "text": doc.text,
                "meta": json.dumps(doc.meta, ensure_ascii=False) if doc.meta else None,
            }
        )
        self.n_docs += 1
        for p in passages:
            self.sha.update(checksum_record(p.id, p.title, p.text))
            self.n_passages += 1
            self.p_rows.append(
                {
                    "id": p.id,
                    "doc_id": p.doc_id,
                    "title": p.title,
                    "text": p.text,
                    "start": p.start,
                    "end": p.end,
                    "sent_starts": [s for s, _ in p.sentences],
                    "sent_ends": [e for _, e in p.sentences],
                    "meta": json.dumps(p.meta, ensure_ascii=False) if p.meta else None,
                }
            )
        if len(self.p_rows) >= self.batch_size:
            self.flush()
        if len(self.d_rows) >= self.batch_size:
            self._flush_docs()

    def flush(self) -> None:
        if self.p_rows:
            self.hash_chunks.append(hash_ids(r["id"] for r in self.p_rows))
            self.p_writer.write_batch(
                pa.RecordBatch.from_pylist(self.p_rows, schema=PASSAGE_SCHEMA)
            )
            self.p_rows = []

    def hashes(self) -> np.ndarray:
        if not self.hash_chunks:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate(self.hash_chunks)

    def _flush_docs(self) -> None:
        if self.d_rows:
            self.d_writer.write_batch(
                pa.RecordBatch.from_pylist(self.d_rows, schema=DOCUMENT_SCHEMA)
            )
            self.d_rows = []

    def close(self) -> None:
        self.flush()
        self._flush_docs()
        self.p_writer.close()
        self.p_sink.close()
        self.d_writer.close()
        self.d_sink.close()


class CorpusStore:
    """A memory-mapped passage store with O(1) access by row and by id."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        mf = self.path / MANIFEST
        if not mf.exists():
            raise AnygrainError(f"{self.path}: not an anygrain corpus (no {MANIFEST})")
        self.manifest: dict[str, Any] = json.loads(mf.read_text(encoding="utf-8"))
        if self.manifest.get("format") != FORMAT:
            raise AnygrainError(f"{mf}: not an anygrain corpus manifest")
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise AnygrainError(
                f"{self.path}: corpus format version {self.manifest.get('format_version')}, expected {FORMAT_VERSION}; rebuild it"
            )
        self._passages = _read_segments(self.path, self.segments("passages"))
        self._documents: pa.Table | None = None
        self._doc_rows: dict[str, int] | None = None
        # doc_id -> its metadata as stored (JSON), for the documents that have any
        self._doc_meta: dict[str, str] | None = None
        self._hashes = np.load(self.path / "id_hash.npy", mmap_mode="r")
        self._table = np.load(self.path / "id_table.npy", mmap_mode="r")
        self._cols = {name: self._passages.column(name) for name in PASSAGE_SCHEMA.names}

    def __reduce__(self) -> tuple[type[CorpusStore], tuple[Path]]:
        # pickled as its (absolute) path, not its memory-mapped tables, which pickle would
        # copy whole: a process unpickling it (a Ray worker) reopens the same directory
        return (CorpusStore, (self.path.absolute(),))

    def segments(self, what: str) -> list[str]:
        """The Arrow files holding ``what`` (``passages`` or ``documents``), in row order:
        one from a build, one more per append (:mod:`anygrain.corpus.append`)."""
        return list((self.manifest.get("segments") or {}).get(what) or [f"{what}.arrow"])

    # --- building -----------------------------------------------------------
    @classmethod
    def build(
        cls,
        source: str | Source | Iterable[SourceDocument],
        out: str | Path,
        *,
        split: str | SplitSpec | None = None,
        errors: ErrorLog | None = None,
        progress: bool = True,
        batch_size: int = 4096,
    ) -> CorpusStore:
        """Read ``source``, split it and write a corpus directory atomically."""
        # the sentence splitter (syntok, regex) is a build's: opening a store never needs it
        from anygrain.corpus.sentences import split_sentences

        errors = errors or ErrorLog()
        spec = SplitSpec.parse(split)
        src_desc, fmt_name = "<iterable>", "python"
        if isinstance(source, str | Path):
            source = parse_source(str(source))
        if isinstance(source, Source):
            src_desc, fmt_name = str(source.path), source.format.name
            docs: Iterable[SourceDocument] = source.documents(errors)
        else:
            docs = source
        out = Path(out)
        t0 = time.time()
        with atomic_dir(out) as tmp:
            w = _Writer(tmp, batch_size)
            try:
                for doc in progress_bar(
                    docs, desc="reading documents", unit="doc", disable=not progress
                ):
                    bad = surrogate_problem(doc)  # UTF-8 cannot store it: say where, once
                    if bad is not None:
                        errors.handle(InputError(bad[1], path=doc.origin or None, field=bad[0]))
                        continue
                    passages = []
                    for sp in split_document(doc, spec):
                        text = doc.text[sp.start : sp.end]
                        if not text.strip():
                            errors.handle(
                                InputError(
                                    "empty text", path=doc.origin or None, field=f"passage {sp.id}"
                                )
                            )
                            continue
                        passages.append(
                            Passage(
                                id=str(sp.id),
                                doc_id=doc.doc_id,
                                title=sp.title if sp.title is not None else doc.title,
                                text=text,
                                start=sp.start,
                                end=sp.end,
                                sentences=split_sentences(text),
                                meta=sp.meta,
                            )
                        )
                    w.add(doc, passages)
            finally:
                w.close()
            if not w.n_passages:
                raise InputError("empty corpus: no passages were read", path=src_desc)
            hashes = w.hashes()
            w.hash_chunks = []
            cls._check_duplicates(tmp / "passages.arrow", hashes, src_desc)
            np.save(tmp / "id_hash.npy", hashes)
            np.save(tmp / "id_table.npy", build_id_table(hashes))
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "n_passages": w.n_passages,
                "n_documents": w.n_docs,
                "source": src_desc,
                "source_format": fmt_name,
                "split": str(spec),
                "checksum": w.sha.hexdigest(),
                "skipped_records": errors.n_skipped,
                "build_seconds": round(time.time() - t0, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
        return cls(out)

    @staticmethod
    def _check_duplicates(passages: Path, hashes: np.ndarray, src: str) -> None:
        """Equal hashes are rare: only their ids are read back (from the written file)."""
        order = np.argsort(hashes, kind="stable")
        sh = hashes[order]
        same = np.nonzero(sh[1:] == sh[:-1])[0]
        if not same.size:
            return
        table = pa.ipc.open_file(pa.memory_map(str(passages), "r")).read_all()
        col = table.column("id")
        for k in same:
            a, b = int(order[k]), int(order[k + 1])
            ids = {a: col[a].as_py(), b: col[b].as_py()}
            if ids[a] == ids[b]:
                raise InputError(
                    f"duplicate passage id {ids[a]!r} (rows {a} and {b})", path=src, field="id"
                )

    # --- access -----------------------------------------------------------------
    def __len__(self) -> int:
        return self._passages.num_rows

    @property
    def checksum(self) -> str:
        return str(self.manifest["checksum"])

    def row_of(self, pid: str) -> int:
        """Row of a passage id in O(1); raises KeyError for an unknown id."""
        h = hash_ids([pid])[0]
        size = len(self._table)
        slot = int(h & np.uint64(size - 1))
        while True:
            row = int(self._table[slot])
            if row < 0:
                raise KeyError(pid)
            if self._hashes[row] == h and self._cols["id"][row].as_py() == pid:
                return row
            slot = (slot + 1) & (size - 1)

    def __contains__(self, pid: object) -> bool:
        try:
            self.row_of(str(pid))
        except KeyError:
            return False
        return True

    def passage(self, row: int) -> Passage:
        if not 0 <= row < len(self):
            raise IndexError(f"passage row {row} out of range (0..{len(self) - 1})")
        c = self._cols
        meta = c["meta"][row].as_py()
        return Passage(
            id=c["id"][row].as_py(),
            doc_id=c["doc_id"][row].as_py(),
            title=c["title"][row].as_py(),
            text=c["text"][row].as_py(),
            start=c["start"][row].as_py(),
            end=c["end"][row].as_py(),
            sentences=list(
                zip(c["sent_starts"][row].as_py(), c["sent_ends"][row].as_py(), strict=True)
            ),
            meta=json.loads(meta) if meta else {},
        )

    def column(self, name: str, rows: Sequence[int] | np.ndarray | None = None) -> list[Any]:
        """Values of one column for ``rows`` (all rows when None)."""
        col = self._cols[name]
        if rows is None:
            return col.to_pylist()
        return col.take(pa.array(np.asarray(rows, dtype=np.int64))).to_pylist()

    def texts(self, rows: Sequence[int] | np.ndarray | None = None) -> list[str]:
        return self.column("text", rows)

    def titles(self, rows: Sequence[int] | np.ndarray | None = None) -> list[str]:
        return self.column("title", rows)

    def hit_meta(self, rows: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Each row's metadata, as :attr:`Hit.meta <anygrain.hits.hit.Hit.meta>` returns it:
        its document's extra fields (JSONL's fields other than id, title and text), then the
        passage's own (a source's pre-cut units: a WikiText section, say) over them, then
        ``start`` and ``end``, the passage's character offsets in its document's text (over
        any field of that name).  One ``take`` per column for all the rows."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return []
        metas, starts, ends = (self.column(c, rows) for c in ("meta", "start", "end"))
        docs = self._documents_meta()
        doc_ids = self.column("doc_id", rows) if docs else [None] * len(metas)
        out = []
        for meta, start, end, doc in zip(metas, starts, ends, doc_ids, strict=True):
            m: dict[str, Any] = {}
            dm = docs.get(doc) if doc is not None else None
            if dm:
                m.update(json.loads(dm))
            if meta:
                m.update(json.loads(meta))
            m["start"] = int(start)
            m["end"] = int(end)
            out.append(m)
        return out

    def _documents_meta(self) -> dict[str, str]:
        """doc_id -> metadata JSON of the documents that have metadata (read once; empty,
        and nothing held, for a corpus whose documents have none)."""
        if self._doc_meta is None:
            docs = self.documents_table()
            col = docs.column("meta")
            found: dict[str, str] = {}
            if col.null_count < len(col):
                has = docs.filter(pc.is_valid(col))
                found = dict(
                    zip(
                        has.column("doc_id").to_pylist(),
                        has.column("meta").to_pylist(),
                        strict=True,
                    )
                )
            self._doc_meta = found
        return self._doc_meta

    def document_metas(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(doc_id, metadata)`` of each document that has metadata, in row order."""
        for doc_id, meta in self._documents_meta().items():
            yield doc_id, json.loads(meta)

    def iter_batches(self, batch_size: int = 1024) -> Iterator[tuple[int, pa.Table]]:
        """``(first_row, table_slice)`` over the store, zero-copy."""
        for start in range(0, len(self), batch_size):
            yield start, self._passages.slice(start, batch_size)

    def passages_table(self) -> pa.Table:
        """The passages' Arrow table (every segment's, memory-mapped)."""
        return self._passages

    def id_hashes(self) -> np.ndarray:
        """The hash of each passage row's id (``id_hash.npy``, memory-mapped)."""
        return self._hashes

    # --- documents ---------------------------------------------------------------
    def documents_table(self) -> pa.Table:
        """The documents' Arrow table (every segment's), read on first use."""
        if self._documents is None:
            self._documents = _read_segments(self.path, self.segments("documents"))
        return self._documents

    def document_text(self, doc_id: str) -> str:
        docs = self.documents_table()
        if self._doc_rows is None:
            self._doc_rows = {d: i for i, d in enumerate(docs.column("doc_id").to_pylist())}
        if doc_id not in self._doc_rows:
            raise KeyError(doc_id)
        return str(docs.column("text")[self._doc_rows[doc_id]].as_py())

    @property
    def n_documents(self) -> int:
        return int(self.manifest["n_documents"])

    # --- slices ------------------------------------------------------------------
    def write_rows(
        self, start: int, stop: int, out: str | Path, *, batch_size: int = 4096
    ) -> CorpusStore:
        """A corpus of this one's rows ``[start, stop)`` (row ``start`` becomes row 0) and the
        documents they come from, written atomically to ``out``: one shard of a sharded index.

        Its checksum is computed as :meth:`build` computes it, over the slice's passages.
        """
        if not 0 <= start < stop <= len(self):
            raise AnygrainError(f"row range [{start}, {stop}) outside the corpus (0..{len(self)})")
        out = Path(out)
        part = self._passages.slice(start, stop - start)
        checksum = content_checksum([part], batch_size)
        docs = self.documents_table()
        wanted = pa.array(sorted(set(part.column("doc_id").to_pylist())))
        doc_part = docs.filter(pc.is_in(docs.column("doc_id"), value_set=wanted))
        hashes = np.ascontiguousarray(self._hashes[start:stop])
        with atomic_dir(out) as tmp:
            for name, table, schema in (
                ("passages.arrow", part, PASSAGE_SCHEMA),
                ("documents.arrow", doc_part, DOCUMENT_SCHEMA),
            ):
                with (
                    pa.OSFile(str(tmp / name), "wb") as sink,
                    pa.ipc.new_file(sink, schema) as w,
                ):
                    w.write_table(table.combine_chunks())
            np.save(tmp / "id_hash.npy", hashes)
            np.save(tmp / "id_table.npy", build_id_table(hashes))
            manifest = {
                **{k: self.manifest[k] for k in ("format", "format_version", "source")},
                "source_format": self.manifest.get("source_format"),
                "split": self.manifest.get("split"),
                "n_passages": stop - start,
                "n_documents": doc_part.num_rows,
                "checksum": checksum,
                "rows_of": {"checksum": self.checksum, "start": start, "stop": stop},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
        return CorpusStore(out)
