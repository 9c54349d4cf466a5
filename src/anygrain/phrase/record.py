"""What a phrase index wrote: the ``settings`` and ``counts`` of its ``index.json``, typed.

:func:`anygrain.phrase.build.finish_index` writes both; opening
(:class:`~anygrain.phrase.index.PhraseIndex`), refiltering (:mod:`anygrain.phrase.refilter`),
adding and compacting (:mod:`anygrain.phrase.update`) read them.  The records read and write
the keys the manifest has always had (its format version is unchanged), in the order a
build writes them; keys they do not know (a sharded index's own) are left to the manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anygrain.errors import AnygrainError
from anygrain.phrase.rescore_settings import Rescoring

if TYPE_CHECKING:
    from anygrain.phrase.dump import DumpStats

#: The float16 vectors; optional once the FAISS indexes hold codes to decode.
DUMP_FILES = ("start.npy", "end.npy")
#: keys written even when None (the others are left out when None)
_WRITTEN_AS_NULL = frozenset({"threshold", "nprobe", "pq_m"})


@dataclass(frozen=True)
class PhraseIndexRecord:
    """A phrase index's ``settings`` in ``index.json``: how its dump was made, then (set by
    ``finish_index``) how its FAISS indexes store the vectors."""

    max_phrase_words: int
    threshold: float | None  # the filter's tau (a logit); None: every token the model kept
    keep: float | None = None  # the fraction of vectors asked for (instead of a threshold)
    dim: int | None = None
    dtype: str = "float16"
    include_title: bool | None = None
    max_passage_length: int | None = None
    doc_stride: int | None = None
    bf16: bool = False
    int8: bool = False  # passages on ONNX Runtime's int8 passage graph (absent: False)
    sparse: dict[str, Any] | None = None  # the lexical part's fusion (SparseFusion.to_dict)
    build: dict[str, Any] | None = None  # the settings the index was asked for
    refiltered_from: dict[str, Any] | None = None  # {"path", "threshold"} of the source
    # each ``add`` since the build, in order: {"passages": n, "bf16": ..., "int8": ...: the
    # precision that encoded them} (float32 where ONNX Runtime's float graph did, whatever
    # ``bf16`` says; each add resolves int8 as a build does)
    adds: list[dict[str, Any]] | None = None
    # the FAISS part
    factory: str | None = None
    nprobe: int | None = None
    faiss_blocks: dict[str, int] | None = None  # blocks beside start.faiss / end.faiss
    compress: str | None = None
    pq_m: int | None = None
    dump: bool | None = None  # the float16 dump kept beside the FAISS indexes
    span_vectors: str | None = None  # where span scoring reads vectors: "dump" or "codes"
    # how a search re-scores passages exactly by default (the flat ``rescore*`` keys)
    rescoring: Rescoring = Rescoring()

    @classmethod
    def from_manifest(cls, settings: Mapping[str, Any]) -> PhraseIndexRecord:
        """The record of an ``index.json``'s ``settings``."""
        missing = [k for k in ("max_phrase_words", "threshold") if k not in settings]
        if missing:
            raise AnygrainError(
                f"index.json: the phrase settings lack {missing[0]!r}; rebuild the index"
            )
        names = {f.name for f in fields(cls)} - {"rescoring"}
        known = {k: v for k, v in settings.items() if k in names}
        return cls(**known, rescoring=Rescoring.of_options(settings))

    def to_manifest(self) -> dict[str, Any]:
        """The ``settings`` of ``index.json``, in the order a build writes them."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Rescoring):
                out.update((k, x) for k, x in v.to_options().items() if x is not None)
                continue
            if v is not None or f.name in _WRITTEN_AS_NULL:
                out[f.name] = v
        return out

    def dump_part(self) -> PhraseIndexRecord:
        """The record without its FAISS part (what ``finish_index`` sets again)."""
        return replace(
            self,
            factory=None,
            nprobe=None,
            faiss_blocks=None,
            compress=None,
            pq_m=None,
            dump=None,
            span_vectors=None,
        )

    @property
    def codes(self) -> bool:
        """Whether span scoring reads the vectors decoded from the FAISS codes."""
        return self.span_vectors == "codes"

    def blocks(self, side: str) -> int:
        """FAISS blocks beside ``side``'s index (0: one whole index)."""
        return int((self.faiss_blocks or {}).get(side, 0))


@dataclass(frozen=True)
class PhraseCounts:
    """The counts of a phrase index's ``index.json``: what its dump holds; the per-passage
    ratios and file sizes are derived when written."""

    passages: int
    tokens_seen: int
    tokens_kept: int
    start_vectors: int
    end_vectors: int

    @classmethod
    def of_dump(cls, stats: DumpStats) -> PhraseCounts:
        return cls(stats.n_passages, stats.n_tokens_seen, stats.n_kept, stats.n_start, stats.n_end)

    @classmethod
    def from_manifest(cls, counts: Mapping[str, Any]) -> PhraseCounts:
        return cls(*(int(counts[f.name]) for f in fields(cls)))

    def plus(self, other: PhraseCounts) -> PhraseCounts:
        """These counts with ``other``'s added (passages appended to the index)."""
        return PhraseCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_manifest(self, base: Path) -> dict[str, Any]:
        """The ``counts`` of ``index.json``, sizes read from the files in ``base``."""
        sizes = {f.name: f.stat().st_size for f in base.iterdir() if f.is_file()}
        n_p = max(self.passages, 1)
        n_bytes = sum(sizes.values())
        return {
            "passages": self.passages,
            "tokens_seen": self.tokens_seen,
            "tokens_kept": self.tokens_kept,
            "start_vectors": self.start_vectors,
            "end_vectors": self.end_vectors,
            "vectors_per_passage": round((self.start_vectors + self.end_vectors) / n_p, 3),
            "tokens_kept_per_passage": round(self.tokens_kept / n_p, 3),
            "kept_fraction": round(self.tokens_kept / max(self.tokens_seen, 1), 4),
            "bytes": n_bytes,
            "bytes_per_passage": round(n_bytes / n_p, 1),
            "faiss_bytes": sum(v for k, v in sizes.items() if k.endswith(".faiss")),
            "dump_bytes": sum(sizes.get(name, 0) for name in DUMP_FILES),
        }
