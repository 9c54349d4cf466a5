"""The lexical part of a phrase index: a BM25 score for every phrase's passage, fused with
the dense phrase score (DenSPI's sparse + dense phrase scores, Seo et al. 2019).

A phrase's fused score for a question is::

    z_dense(phrase) + weight * z_bm25(passage of the phrase)

``z_dense`` standardises the dense score (start + end inner products) by the mean and
standard deviation of the question's top ``norm_depth`` start scores plus those of its
top ``norm_depth`` end scores (the MIPS results, best first); ``z_bm25`` standardises the
passage's BM25 score by the mean and deviation of the question's top ``norm_depth`` BM25
scores.  Both statistics depend only on the question, so the fused score is a fixed
function of (question, phrase): the best phrase by it is well defined, a passage's score
is still the max over its phrases, and a brute-force scan gives the same ranking.
``FusionNorm.RAW`` adds the raw scores instead (``dense + weight * bm25``).

Candidates are the dense candidates (each MIPS start with its best end, each end with its
best start) plus every phrase of the question's top ``passages`` BM25 passages, so a passage
that BM25 ranks high is reachable even when none of its tokens is in the dense top k.
"""

from __future__ import annotations

import enum
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anygrain.errors import AnygrainError, IndexMismatchError, parse_enum
from anygrain.utils.ranges import Range

if TYPE_CHECKING:
    from anygrain.corpus.store import CorpusStore
    from anygrain.sparse.bm25 import BM25Index

#: The folder of a phrase index that holds its BM25 index.
SPARSE_SUBDIR = "sparse"
#: Chosen on held-out SQuAD *training* articles (bench/search_settings.py), never on a test set.
DEFAULT_SPARSE_WEIGHT = 1.0
#: the BM25 side's weight: z-scores times it must stay finite in float32 (1e308 made every
#: fused score inf); far above 1 the dense side no longer counts anyway
WEIGHT_RANGE = Range("sparse weight", 0.0, 1000.0)
DEPTH_RANGE = Range("sparse fusion norm_depth", 1, 100_000, integer=True)
PASSAGES_RANGE = Range("sparse fusion passages", 1, 100_000, integer=True)


class FusionNorm(str, enum.Enum):
    """How the dense and BM25 scores are put on one scale before adding."""

    ZSCORE = "zscore"  # standardise each by the question's own top scores
    RAW = "raw"  # add the raw scores


@dataclass(frozen=True)
class SparseFusion:
    """How a phrase index fuses BM25 into phrase scores (saved in index.json)."""

    weight: float = DEFAULT_SPARSE_WEIGHT  # 0: pure dense phrase scores
    norm: FusionNorm = FusionNorm.ZSCORE
    norm_depth: int = 100  # top scores each side's statistics are taken over
    passages: int = 10  # BM25's top passages whose phrases are always candidates

    def __post_init__(self) -> None:
        object.__setattr__(self, "norm", parse_enum(FusionNorm, self.norm))
        WEIGHT_RANGE.check(self.weight)
        DEPTH_RANGE.check(self.norm_depth)
        PASSAGES_RANGE.check(self.passages)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "norm": self.norm.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> SparseFusion:
        try:
            return cls(**d)
        except TypeError as e:
            raise AnygrainError(f"{where}: invalid sparse fusion settings ({e})") from None
        except AnygrainError as e:
            raise AnygrainError(f"{where}: {e}" if where else str(e)) from None

    def with_weight(self, weight: float | None) -> SparseFusion:
        """These settings with a per-query weight override (None keeps the saved one)."""
        if weight is None:
            return self
        return replace(self, weight=WEIGHT_RANGE.check(weight))


@dataclass
class LexicalQuery:
    """One question's BM25 side: every passage's score and the normalisation."""

    scores: np.ndarray  # (n_passages,) float32 BM25 score of every passage row
    top_rows: np.ndarray  # the ``passages`` best rows with a positive score, best first
    mean: float
    std: float

    def z(self, rows: np.ndarray, norm: FusionNorm) -> np.ndarray:
        s = self.scores[rows].astype(np.float64)
        if norm is FusionNorm.RAW:
            return s
        return (s - self.mean) / self.std if self.std > 0 else np.zeros_like(s)


class LexicalScorer:
    """BM25 over a phrase index's passages (a BM25 index nested in ``sparse/``)."""

    def __init__(self, bm25: BM25Index) -> None:
        self.bm25 = bm25

    def queries(self, queries: list[str], fusion: SparseFusion) -> list[LexicalQuery]:
        """Every passage's BM25 score per question, its top rows and statistics."""
        out = []
        for full in self.bm25.passage_scores(queries):
            top = self.bm25.top_rows(full, fusion.norm_depth)
            best = top[: fusion.passages]
            best = best[full[best] > 0]
            vals = full[top].astype(np.float64)
            out.append(LexicalQuery(full, best, float(vals.mean()), float(vals.std())))
        return out


def dense_stats(
    start_scores: np.ndarray, end_scores: np.ndarray, depth: int
) -> tuple[float, float]:
    """``(mean, std)`` of a phrase score from a question's MIPS scores (best first, -inf or
    NaN padding ignored): start and end are taken as independent, so the means and the
    variances add."""
    s = np.asarray(start_scores[:depth], np.float64)
    e = np.asarray(end_scores[:depth], np.float64)
    s, e = s[np.isfinite(s)], e[np.isfinite(e)]
    if not len(s) or not len(e):
        return 0.0, 0.0
    return float(s.mean() + e.mean()), float(np.sqrt(s.var() + e.var()))


def fuse(
    dense: np.ndarray,
    rows: np.ndarray,
    stats: tuple[float, float],
    lex: LexicalQuery,
    fusion: SparseFusion,
) -> np.ndarray:
    """Fused scores of phrases with dense scores ``dense`` in passage ``rows``."""
    d = dense.astype(np.float64)
    if fusion.norm is FusionNorm.ZSCORE:
        mean, std = stats
        d = (d - mean) / std if std > 0 else d - mean
    return (d + fusion.weight * lex.z(rows, fusion.norm)).astype(np.float32)


# --- the stored part -------------------------------------------------------------------


def write_sparse(out: Path, store: CorpusStore, *, lang: str | None, progress: bool) -> None:
    """Build the BM25 index of ``store`` into ``out/sparse`` (its corpus is the phrase
    index's: the manifest points one level up)."""
    from anygrain.sparse.bm25 import Bm25Settings, write_bm25_index

    # never written into: files there may be links to another index's (a staged update)
    shutil.rmtree(out / SPARSE_SUBDIR, ignore_errors=True)
    write_bm25_index(out / SPARSE_SUBDIR, store, Bm25Settings(lang=lang), progress=progress)
    from anygrain.sparse.analyzers import release_segmenter

    release_segmenter()  # the dump that follows has the memory (loaded again for queries)


def check_copied_part(src: Path, manifest: dict[str, Any], sub: str) -> None:
    """Refuse to copy ``src/sub`` unless each of its files is the one ``src``'s manifest
    recorded (every checksum, whatever the file's size) and it holds no other: the copy
    gets fresh checksums in its new index, so damage copied now would never be found."""
    from anygrain.utils.checksums import Problem, Verify, check_files

    files = manifest.get("files")
    if not isinstance(files, dict):
        raise AnygrainError(
            f"{src}: built by an older anygrain that recorded no checksums, so its files "
            "cannot be checked before they are copied; rebuild it"
        )
    part = {rel: v for rel, v in files.items() if rel.startswith(f"{sub}/")}
    problems = check_files(src, part, verify=Verify.FULL) if part else []
    root = src / sub
    if root.is_dir():
        problems += [
            Problem(f, "extra")
            for f in sorted(root.rglob("*"))
            if f.is_file() and f.relative_to(src).as_posix() not in part
        ]
    if not part and not problems:
        problems = [Problem(root, "missing")]
    if problems:
        more = f" and {len(problems) - 1} more file(s)" if len(problems) > 1 else ""
        raise AnygrainError(
            f"{problems[0]}{more}; {src} is damaged, so it is not copied: rebuild it "
            f"(`anygrain verify {src}` lists every bad file)"
        )


def copy_sparse(bm25_dir: Path, out: Path, store: CorpusStore) -> None:
    """Copy an existing BM25 index over the same corpus into ``out/sparse``; its recorded
    corpus checksum must be ``store``'s (rows must mean the same passages), and its files
    must match its manifest (:func:`check_copied_part`)."""
    from anygrain.index.manifest import read_manifest

    m = read_manifest(bm25_dir)
    if m.get("kind") != "bm25":
        raise AnygrainError(f"{bm25_dir}: a {m.get('kind')} index, not a bm25 index")
    got = (m.get("corpus") or {}).get("checksum")
    if got != store.checksum:
        raise IndexMismatchError(
            f"{bm25_dir} was built over another corpus (checksum {got}) than the phrase "
            f"index ({store.checksum}); build the BM25 index from the phrase index's corpus"
        )
    check_copied_part(bm25_dir, m, "bm25")
    dest = out / SPARSE_SUBDIR
    shutil.copytree(bm25_dir / "bm25", dest / "bm25")
    m["corpus"] = {**m["corpus"], "path": "../corpus"}
    (dest / "index.json").write_text(json.dumps(m, indent=2, ensure_ascii=False))


def open_sparse(path: Path, store: CorpusStore) -> LexicalScorer:
    """The BM25 part of the phrase index at ``path``."""
    from anygrain.index.manifest import read_manifest
    from anygrain.sparse.bm25 import BM25Index

    d = path / SPARSE_SUBDIR
    if not (d / "index.json").exists():
        raise AnygrainError(f"{path}: incomplete phrase index (missing {SPARSE_SUBDIR}/)")
    m = read_manifest(d)
    if (m.get("corpus") or {}).get("checksum") != store.checksum:
        raise IndexMismatchError(
            f"{d}: its BM25 part covers another corpus than the phrase index; attach it again"
        )
    return LexicalScorer(BM25Index.open(d, m, store=store))


def attach_sparse(
    index: str | Path,
    *,
    bm25_from: str | Path | None = None,
    weight: float | None = None,
    lang: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Give an existing phrase index a lexical part in place (built over its corpus, or
    copied from the BM25 index ``bm25_from`` over the same corpus), or replace the one it
    has; returns the fusion settings now saved.  The phrase vectors are not touched.

    Atomic, as an ``add`` is (:func:`anygrain.index.updater.staged_index`): the new part
    and ``index.json`` are written in a hard-linked copy of the index that is swapped in
    whole, so a crash at any point leaves the old index, never one whose ``index.json``
    names a ``sparse/`` that is gone; and it holds the index's writer lock throughout."""
    from anygrain.corpus.source import open_corpus_of
    from anygrain.index.manifest import read_manifest, rewrite_manifest
    from anygrain.index.updater import real_index_path, staged_index
    from anygrain.utils.lock import writer_lock

    path = real_index_path(index)  # a link's index is updated, not the link replaced
    if weight is not None:
        SparseFusion().with_weight(weight)  # a bad weight is refused before any work
    with writer_lock(path, "attaching a BM25 part"):
        m = read_manifest(path)
        if m.get("kind") != "phrase":
            raise AnygrainError(
                f"{path}: a {m.get('kind')} index; attach-sparse needs a phrase index"
            )
        open_corpus_of(path, m)  # the corpus is the one recorded, before any work
        old = (m.get("settings") or {}).get("sparse")
        fusion = (
            SparseFusion.from_dict(old, str(path / "index.json")) if old else SparseFusion()
        ).with_weight(weight)
        with staged_index(path) as (staged, _work):
            store = open_corpus_of(staged, m)
            # never written into: the staged files are hard links to the live index's
            shutil.rmtree(staged / SPARSE_SUBDIR, ignore_errors=True)
            if bm25_from is not None:
                copy_sparse(Path(bm25_from), staged, store)
            else:
                write_sparse(staged, store, lang=lang, progress=progress)
            rewrite_manifest(staged, m, settings={**m["settings"], "sparse": fusion.to_dict()})
    return fusion.to_dict()
