"""Dense passage index: a bi-encoder's passage vectors in FAISS, searched with its question encoder.

Layout (``subdir`` is ``dense`` unless a hybrid index nests it elsewhere)::

    index.json              manifest: corpus checksum, model fingerprint, factory, dim, timings
    corpus/                 the passage store (unless an existing store was reused)
    dense/dense.json        the dense settings, so a hybrid index can open this part alone
    dense/model/            the bi-encoder (BiEncoder.save), so the index carries its encoder
    dense/vectors/          passage vectors in .npy shards (exact scores for reranking)
    dense/faiss.index       the FAISS index, memory-mapped on open

The index records the passage encoder's weight fingerprint: a question encoder
fine-tuned on its own (passage side frozen) can be passed at open time, while a
model whose passage side differs is refused, since its questions would live in a
different vector space from the stored passages.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.lang import Lang, detect_lang
from anygrain.corpus.source import corpus_ref, open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.dense.faiss_index import FaissIndex, plan_training
from anygrain.dense.shards import DTYPES, ShardSet, encode_corpus
from anygrain.errors import AnygrainError, IndexMismatchError, parse_enum
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.base import (
    Index,
    IndexKind,
    UpdateOp,
    register_index,
    write_manifest,
)
from anygrain.index.settings import BuildOptions, IndexSettings
from anygrain.models.biencoder import BiEncoder
from anygrain.models.resolve import default_model
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.device import place

if TYPE_CHECKING:
    from anygrain.index.updater import StagedUpdate

SETTINGS_FILE = "dense.json"
#: questions encoded at once by ``search`` (and hybrid search): measured on a 2-core CPU,
#: one thread, minilm, 512 SQuAD questions: 16: 238, 32: 243, 64: 232, 128: 199,
#: 256: 152 questions/s (longer batches pad every question to the longest)
QUESTION_BATCH = 32


def as_biencoder(model: str | Path | BiEncoder) -> BiEncoder:
    """A BiEncoder from an instance, an anygrain model dir, or an alias / hub name / HF dir."""
    return model if isinstance(model, BiEncoder) else BiEncoder.from_pretrained(model)


def encoder_name(
    model: str | Path | BiEncoder | None, store: CorpusStore, lang: str | None = None
) -> str:
    """The name to record for ``model``; without one, the default encoder for the corpus
    language (``lang``, or detected from the passages)."""
    if model is None:
        return default_model(Lang(lang) if lang else detect_lang(store))
    return "" if isinstance(model, BiEncoder) else str(model)


@dataclass(frozen=True)
class DenseSettings(IndexSettings):
    """What ``Index.build(kind="dense")`` takes besides the shared options."""

    model: str | Path | BiEncoder | None = None  # default: the corpus language's encoder
    factory: str | None = None  # FAISS factory string (default: chosen from corpus size)
    lang: str | None = None  # en | zh: picks the default model (detected when None)
    dtype: str = "float32"  # of the stored passage vectors
    batch_size: int = 64
    bf16: bool = False
    shard_size: int = 50_000

    def __post_init__(self) -> None:
        if self.lang is not None:
            parse_enum(Lang, self.lang)
        if self.dtype not in DTYPES:
            raise AnygrainError(
                f"unknown vector dtype {self.dtype!r}: use one of {', '.join(DTYPES)}"
            )
        if self.batch_size < 1 or self.shard_size < 1:
            raise AnygrainError(
                "batch_size and shard_size must be at least 1, got "
                f"{self.batch_size}, {self.shard_size}"
            )

    @cached_property
    def encoder(self) -> BiEncoder | None:
        """The named model, loaded on first use and kept (None without one: the default
        follows the corpus language, known once the corpus is read)."""
        return None if self.model is None else as_biencoder(self.model)


def write_dense_index(
    out: Path,
    store: CorpusStore,
    model: str | Path | BiEncoder,
    settings: DenseSettings,
    options: BuildOptions,
    *,
    subdir: str = "dense",
    vectors_dir: Path | None = None,
    model_name: str = "",
    build: DenseSettings | None = None,
) -> dict[str, Any]:
    """Write ``model``, the vectors of ``store`` and their FAISS index under ``out/subdir``,
    and ``out/index.json``; returns the dense settings recorded there.

    ``settings`` says how (factory, dtype, batch and shard size, bf16; its ``model`` and
    ``lang`` are the caller's to resolve into ``model``), ``options`` where and how the
    encode runs (progress, executor, device: not recorded, every executor and device
    writes the same vectors).  ``vectors_dir`` is where shards are encoded before being
    moved under ``out``: point it outside a temporary build directory to make the encoding
    resumable.  ``model_name`` is recorded as the model's name (default: ``model`` when it
    is a name); ``build`` (the settings the index was asked for) as ``settings.build``.
    """
    s = settings
    out = Path(out)
    if not model_name and not isinstance(model, BiEncoder):
        model_name = str(model)
    enc = as_biencoder(model)
    base = out / subdir
    base.mkdir(parents=True, exist_ok=True)
    plan_training(len(store), enc.dim, s.factory)  # fail now, not after encoding
    t0 = time.time()
    fingerprint = enc.passage_fingerprint()
    enc.save(base / "model")
    t_model = time.time()
    target = base / "vectors"
    shards = encode_corpus(
        store,
        enc,
        vectors_dir or target,
        shard_size=s.shard_size,
        dtype=s.dtype,
        batch_size=s.batch_size,
        progress=options.progress,
        bf16=s.bf16,
        label=model_name,
        executor=options.executor,
        device=options.device,
    )
    t_encode = time.time()
    fx = FaissIndex.build(shards, s.factory, progress=options.progress)
    fx.save(base / "faiss.index")
    t_faiss = time.time()
    if vectors_dir is not None and Path(vectors_dir).resolve() != target.resolve():
        # Moved only once FAISS is built, so a failure there keeps the encoded vectors.
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(vectors_dir), str(target))  # a rename on the same filesystem
    recorded = {
        "subdir": subdir,
        "model": {
            "path": "model",
            "name": model_name or enc.config.base_model,
            "base_model": enc.config.base_model,
            "fingerprint": fingerprint,
            "passage": enc.config.passage.to_dict(),
            "question": enc.config.question.to_dict(),
        },
        "factory": fx.factory,
        "dim": fx.dim,
        "dtype": s.dtype,
        "n_vectors": fx.ntotal,
        "nprobe": fx.nprobe,
        "ef_search": fx.ef_search,
        "bf16": s.bf16,
        "timings": {
            "save_model_seconds": round(t_model - t0, 3),
            "encode_seconds": round(t_encode - t_model, 3),
            "faiss_seconds": round(t_faiss - t_encode, 3),
        },
    }
    atomic_write_text(base / SETTINGS_FILE, json.dumps(recorded, indent=2))
    write_manifest(
        out,
        IndexKind.DENSE,
        DenseIndex.format_version,
        corpus={
            "path": corpus_ref(out, store),
            "checksum": store.checksum,
            "n_passages": len(store),
        },
        model={
            "fingerprint": fingerprint,
            "base_model": enc.config.base_model,
            "path": str(Path(subdir) / "model"),
        },
        settings={"dense": recorded} | ({"build": build.to_dict()} if build is not None else {}),
    )
    return recorded


@register_index(IndexKind.DENSE)
class DenseIndex(Index):
    """Dense passage retrieval; ``search`` returns passage hits scored by inner product."""

    takes_query_model = True
    load_options = frozenset({"model", "device", "store", "mmap"})
    settings_type = DenseSettings
    updates = frozenset(UpdateOp)

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        model: BiEncoder,
        faiss_index: FaissIndex,
        settings: dict[str, Any],
        subdir: str = "dense",
    ) -> None:
        super().__init__(path, manifest)
        self.store = store
        self.model = model
        self.faiss = faiss_index
        self.settings = settings
        self.subdir = subdir
        self._vectors: ShardSet | None = None

    @property
    def corpus(self) -> CorpusStore:
        return self.store

    @property
    def dim(self) -> int:
        return self.faiss.dim

    @property
    def vectors(self) -> ShardSet:
        """The stored passage vectors (memory-mapped; opened on first use)."""
        if self._vectors is None:
            self._vectors = ShardSet.open(self.path / self.subdir / "vectors")
        return self._vectors

    # --- updates: new passages encoded, kept ones' vectors reused (anygrain.dense.update) -
    @classmethod
    def add_rows(cls, update: StagedUpdate) -> None:
        from anygrain.dense.update import add_dense

        add_dense(update)

    @classmethod
    def compact_rows(cls, update: StagedUpdate) -> None:
        from anygrain.dense.update import compact_dense

        compact_dense(update)

    # --- building ------------------------------------------------------------------------
    #: an interrupted build's encoded shards wait in ``.OUT.vectors.partial`` to be resumed
    scratch_name = "vectors"

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        assert isinstance(settings, DenseSettings)
        settings.encoder  # noqa: B018 -- a named model is loaded before the corpus is read

    @classmethod
    def write(
        cls,
        out: Path,
        corpus: CorpusStore,
        settings: IndexSettings,
        options: BuildOptions,
        work: Path,
    ) -> None:
        """Encode ``corpus`` (resumably: shards wait in ``work``) and write the dense index.

        Without ``model`` the encoder is the default for the corpus language (``lang``, or
        detected): ``minilm`` for English, the multilingual ``me5-small`` for Chinese.
        """
        assert isinstance(settings, DenseSettings)
        name = encoder_name(settings.model, corpus, settings.lang)
        write_dense_index(
            out,
            corpus,
            settings.encoder or name,  # loaded there (as a name is)
            settings,
            options,
            model_name=name,
            vectors_dir=work,
            build=settings,
        )

    # --- opening -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path,
        manifest: dict[str, Any],
        *,
        store: CorpusStore | None = None,
        model: str | Path | BiEncoder | None = None,
        subdir: str = "dense",
        mmap: bool = True,
        device: str | None = None,
        **options: Any,
    ) -> DenseIndex:
        """Open the index; ``model`` replaces the saved encoder (e.g. a fine-tuned question
        side); ``device`` is where questions are encoded (None: auto)."""
        path = Path(path)
        base = path / subdir
        f = base / SETTINGS_FILE
        if not f.exists():
            raise AnygrainError(
                f"{path}: no dense index under '{subdir}/' (missing {SETTINGS_FILE})"
            )
        settings = json.loads(f.read_text(encoding="utf-8"))
        store = store or open_corpus_of(path, manifest)
        want = settings["model"]["fingerprint"]
        if model is None:
            enc = BiEncoder.load(base / settings["model"]["path"])
            # Recorded by save(); hashing the weights again would cost a second per open.
            got = enc.config.passage_fingerprint
        else:
            enc = as_biencoder(model)
            got = enc.passage_fingerprint()
        if got != want:
            raise IndexMismatchError(
                f"{path}: the model's passage encoder (fingerprint {got}) is not the one this index "
                f"was built with ({want}, base {settings['model']['base_model']!r}); its questions would "
                "not match the stored passage vectors. Use the index's own model, a model fine-tuned "
                "on the question side only, or rebuild the index with this model."
            )
        if enc.dim != settings["dim"]:
            raise IndexMismatchError(
                f"{path}: model vectors have {enc.dim} dimensions, the index {settings['dim']}"
            )
        place(enc, device)
        fx = FaissIndex.load(base / "faiss.index", factory=settings["factory"], mmap=mmap)
        if fx.ntotal != len(store):
            raise IndexMismatchError(
                f"{path}: FAISS index holds {fx.ntotal} vectors but the corpus {len(store)} passages; rebuild the index"
            )
        return cls(path, manifest, store, enc, fx, settings, subdir)

    # --- search --------------------------------------------------------------------------
    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int = QUESTION_BATCH
    ) -> np.ndarray:
        """Question vectors (float32, input order)."""
        return self.model.encode_questions(list(queries), batch_size=batch_size)

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        batch_size: int = QUESTION_BATCH,
        **options: Any,
    ) -> list[list[Hit]]:
        rows, scores = self.search_rows(
            queries, k, nprobe=nprobe, ef_search=ef_search, batch_size=batch_size
        )
        return hits_from_rows(self.store, rows, scores)

    def search_rows(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        batch_size: int = QUESTION_BATCH,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw ``(rows, scores)`` of shape (n_queries, k); rows are -1 where fewer than ``k`` exist.

        Questions are encoded and searched ``batch_size`` at a time, so memory stays
        bounded for large question sets.
        """
        n = len(queries)
        rows = np.full((n, k), -1, dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float32)
        for i in range(0, n, batch_size):
            q = self.encode_queries(queries[i : i + batch_size], batch_size=batch_size)
            r, s = self.search_vectors(q, k, nprobe=nprobe, ef_search=ef_search)
            rows[i : i + len(q)], scores[i : i + len(q)] = r, s
        return rows, scores

    def search_vectors(
        self,
        qvecs: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search with ready-made question vectors: ``(rows, scores)``, best first."""
        return self.faiss.search(qvecs, k, nprobe=nprobe, ef_search=ef_search)

    def score_rows(self, qvecs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Exact inner products of each question with its candidate ``rows`` (n, m) from the stored
        vectors, whatever the FAISS compression; 0 where a row is -1 (as BM25's ``score_rows``)."""
        q = np.asarray(qvecs, dtype=np.float32)
        r = np.asarray(rows, dtype=np.int64)
        valid = r >= 0
        out = np.zeros(r.shape, dtype=np.float32)
        if valid.any():
            vecs = self.vectors.rows(r[valid])
            qi = np.nonzero(valid)[0]
            out[valid] = np.einsum("ij,ij->i", q[qi], vecs)
        return out

    def summary(self) -> dict[str, Any]:
        d = super().summary()
        model = self.settings["model"]  # the name the encoder was given (an alias, a hub name)
        d["model"] = {
            "name": model.get("name") or model["base_model"],
            "base_model": model["base_model"],
            "fingerprint": model["fingerprint"],
        }
        return d

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "faiss": {
                "ntotal": self.faiss.ntotal,
                "nprobe": self.faiss.nprobe,
                "ef_search": self.faiss.ef_search,
            },
            "faiss_index_bytes": os.path.getsize(self.path / self.subdir / "faiss.index"),
        }
