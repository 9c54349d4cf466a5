"""Dense passage index: a bi-encoder's passage vectors in FAISS, searched with its question encoder.

Layout (``subdir`` is ``dense`` unless a hybrid index nests it elsewhere)::

    index.json              manifest: corpus checksum, model fingerprint, factory, dim, timings
    corpus/                 the passage store (unless an existing store was reused)
    dense/dense.json        the dense settings, so a hybrid index can open this part alone
    dense/model/            the bi-encoder (BiEncoder.save), when the index carries a copy
    dense/vectors/          passage vectors in .npy shards (exact scores for reranking)
    dense/faiss.index       the FAISS index, memory-mapped on open

The index records the passage encoder's weight fingerprint: a question encoder
fine-tuned on its own (passage side frozen) can be passed at open time, while a
model whose passage side differs is refused, since its questions would live in a
different vector space from the stored passages.

A model given by name (an alias such as ``minilm``, a shipped model, a hub name) is not
copied: the index records the name (``model.ref`` in ``dense.json``) and the fingerprint,
and opening resolves the name again and hashes the weights it finds, refusing other
weights behind the same name.  A model given as a directory or an instance is copied
into ``dense/model/`` (``model.path``); ``DenseSettings.copy_model`` overrides the rule.

Questions, and passages of builds and ``add``, are encoded by the model or by its graphs on
ONNX Runtime (``runtime``: auto, onnx, torch; :mod:`anygrain.dense.onnx`), the same vectors
either way, so the runtime is recorded nowhere.  A model whose files are unchanged since its
graphs were exported is not loaded to search (the torch model loads on first use of
:attr:`DenseIndex.model`); its recorded fingerprint then stands for hashing the weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.corpus.source import open_corpus_of
from anygrain.corpus.store import CorpusStore
from anygrain.dense.build import FORMAT_VERSION, write_dense_index

# the build's and the opening's names, where callers found them before they had modules
from anygrain.dense.build import SETTINGS_FILE as SETTINGS_FILE
from anygrain.dense.build import DenseSettings as DenseSettings
from anygrain.dense.build import as_biencoder as as_biencoder
from anygrain.dense.build import build_model as build_model
from anygrain.dense.build import find_model as find_model
from anygrain.dense.build import model_reference as model_reference
from anygrain.dense.build import passage_encoder as passage_encoder
from anygrain.dense.onnx import OnnxBiEncoder, is_biencoder
from anygrain.dense.opening import open_questions
from anygrain.dense.shards import ShardSet
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.hits.hit import Hit
from anygrain.hits.results import hits_from_rows
from anygrain.index.encoded import EncodedQueries
from anygrain.index.lazy_model import LazyModel
from anygrain.index.registry import IndexKind, register_index
from anygrain.index.rows import RowsIndex
from anygrain.index.settings import BuildJob, BuildOptions, IndexSettings
from anygrain.vectors.faiss_index import FaissIndex

if TYPE_CHECKING:
    from anygrain.models.biencoder import BiEncoder

#: questions encoded at once by ``search`` (and hybrid search): the fastest batch on one
#: thread (longer batches pad every question to the longest; docs/benchmarks.md)
QUESTION_BATCH = 32


@register_index(IndexKind.DENSE)
class DenseIndex(RowsIndex, LazyModel["BiEncoder"]):
    """Dense passage retrieval; ``search`` returns passage hits scored by inner product."""

    takes_query_model = True
    format_version = FORMAT_VERSION
    load_options = frozenset({"model", "device", "store", "mmap", "runtime"})
    settings_type = DenseSettings
    update_module = "anygrain.dense.update"

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        store: CorpusStore,
        model: BiEncoder | Callable[[], BiEncoder],
        faiss_index: FaissIndex,
        settings: dict[str, Any],
        subdir: str = "dense",
        *,
        questions: BiEncoder | OnnxBiEncoder | None = None,
    ) -> None:
        """``model``: the bi-encoder, or what loads it on first use (questions on ONNX
        Runtime need it only to encode passages with torch); ``questions``: what encodes
        questions (default: the model)."""
        super().__init__(path, manifest)
        self.store = store
        self.hold_model(model, loaded=is_biencoder(model))  # a module is callable too
        self.questions: BiEncoder | OnnxBiEncoder = questions or self.model
        self.faiss = faiss_index
        self.settings = settings
        self.subdir = subdir
        self._vectors: ShardSet | None = None

    @property
    def runtime(self) -> Runtime:
        """What encodes this index's questions now."""
        return Runtime(self.questions.runtime)

    def passage_encoder(
        self, *, runtime: Runtime | str | None = None, device: str | None = None
    ) -> BiEncoder | OnnxBiEncoder:
        """What encodes new passages (``add``): the questions' runner when it is ONNX
        Runtime's and passages run there too (:func:`anygrain.dense.onnx.passage_runtime`,
        with the index's recorded ``bf16``), else the torch model (exported as needed)."""
        from anygrain.models.runtime import Role, choose_runtime

        bf16 = bool(self.settings.get("bf16", False))
        onnx = choose_runtime(runtime, device, role=Role.PASSAGES, bf16=bf16).onnx
        if onnx and isinstance(self.questions, OnnxBiEncoder):
            return self.questions
        fp = str(self.settings["model"]["fingerprint"])
        return passage_encoder(self.model, runtime, device, bf16=bf16, fingerprint=fp)

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

    # --- building ------------------------------------------------------------------------
    #: an interrupted build's encoded shards wait in ``.OUT.vectors.partial`` to be resumed
    scratch_name = "vectors"

    @classmethod
    def check_build(cls, settings: IndexSettings, options: BuildOptions) -> None:
        assert isinstance(settings, DenseSettings)
        find_model(settings.model)  # a wrong name fails before the corpus is read

    @classmethod
    def write(cls, job: BuildJob) -> None:
        """Encode ``job.corpus`` (resumably: shards wait in ``job.work``) and write the dense
        index.

        Without ``model`` the encoder is the default for the corpus language (``lang``, or
        detected): ``minilm`` for English, the multilingual ``me5-small`` for Chinese.
        """
        s = job.settings
        assert isinstance(s, DenseSettings)
        model, name = build_model(s, job.corpus)
        write_dense_index(
            job.out,
            job.corpus,
            model,
            s,
            job.options,
            model_name=name,
            vectors_dir=job.work,
            build=s,
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
        runtime: Runtime | str | None = None,
        **options: Any,
    ) -> DenseIndex:
        """Open the index; ``model`` replaces the saved encoder (e.g. a fine-tuned question
        side) or the one the index refers to by name; ``device`` is where questions are
        encoded (None: auto); ``runtime`` what encodes them (``auto``, ``onnx``, ``torch``:
        :mod:`anygrain.dense.onnx`).  On ONNX Runtime, a model whose files are unchanged
        since its graphs were exported is not loaded at all (no torch)."""
        path = Path(path)
        base = path / subdir
        f = base / SETTINGS_FILE
        if not f.exists():
            raise AnygrainError(
                f"{path}: no dense index under '{subdir}/' (missing {SETTINGS_FILE})"
            )
        settings = json.loads(f.read_text(encoding="utf-8"))
        store = store or open_corpus_of(path, manifest)
        # the runtime decided once, the question graphs found or exported (dense/opening.py)
        enc, questions = open_questions(path, subdir, settings, model, device, runtime)
        fx = FaissIndex.load(base / "faiss.index", factory=settings["factory"], mmap=mmap)
        if fx.ntotal != len(store):
            raise IndexMismatchError(
                f"{path}: FAISS index holds {fx.ntotal} vectors but the corpus {len(store)} passages; rebuild the index"
            )
        return cls(path, manifest, store, enc, fx, settings, subdir, questions=questions)

    # --- search --------------------------------------------------------------------------
    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int = QUESTION_BATCH
    ) -> np.ndarray:
        """Question vectors (float32, input order; from the model, or its ONNX graph)."""
        return self.questions.encode_questions(list(queries), batch_size=batch_size)

    def encode(self, queries: Sequence[str], *, batch_size: int = QUESTION_BATCH) -> EncodedQueries:
        """The question encoder's stage of :meth:`search`: one vector per query."""
        return EncodedQueries(list(queries), (self.encode_queries(queries, batch_size=batch_size),))

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

    def search_rows_encoded(
        self,
        encoded: EncodedQueries,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        **options: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        (qvecs,) = encoded.vectors
        return self.search_vectors(qvecs, k, nprobe=nprobe, ef_search=ef_search)

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
