"""The options of the index kinds, one typed group per part of a build: how a corpus is
encoded, a hybrid index's fusion, BM25's parameters, a phrase index's filter, compression and
lexical part, and a Ray encode; and the groups of any kind: a record file's fields, the
answer grain's reading.

Each group is a dataclass whose fields are named as the build settings they set
(``Bm25Settings.k1``, ``PhraseSettings.keep``, ...; tests/test_cli_kind_options.py checks
them against each kind's settings), so ``anygrain index`` hands the given ones on as they
are; :func:`~anygrain.cli.common.config_options` makes each field an option, written once
here for every command that takes it (``search``, ``eval`` and ``refilter`` too, with their
own help where the option means something else there).  The kinds' settings classes are not
imported: their modules import FAISS and torch, which ``anygrain --help`` must not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anygrain.cli.common import SPLIT_HELP
from anygrain.composite.fusion import FusionMethod
from anygrain.phrase.options import Compress


def option(help: str, cli: str | None = None, **meta: Any) -> Any:
    """A field for an option that is not given unless set (None)."""
    return field(default=None, metadata={"help": help, **({"cli": cli} if cli else {}), **meta})


@dataclass(frozen=True)
class EncodingOptions:
    """How a corpus is read and encoded: a build from a corpus takes them, ``--from``
    (which reuses built indexes) refuses them."""

    split: str = field(default="auto", metadata={"help": SPLIT_HELP})
    lang: str | None = option(
        "en | zh, or for BM25 any ISO 639-1 code (fr, de, es, ...) "
        "(detected when omitted: BM25 per document)"
    )
    model: str | None = option(
        "Encoder: alias (minilm, me5-small), hub name or directory "
        "(default: minilm, or me5-small for a Chinese corpus)"
    )
    copy_model: bool | None = option(
        "Dense, hybrid and phrase: carry a copy of the model in the index "
        "(default: only for a model given as a directory; a name, such as a shipped "
        "model's, is recorded and resolved on open)",
        "--copy-model/--no-copy-model",
    )
    factory: str | None = option(
        "FAISS factory string (default: chosen from corpus size)", "--faiss"
    )


@dataclass(frozen=True)
class FusionOptions:
    """A hybrid index's fusion of its BM25 and dense scores (``HybridSettings``)."""

    fusion: FusionMethod | None = option("Hybrid fusion method (default zscore)")
    weight: float | None = option(
        "Hybrid: weight of the dense side (default: the method's)", "--fusion-weight"
    )
    depth: int | None = option(
        "Hybrid: candidates taken from each system (default 100)", "--fusion-depth"
    )


@dataclass(frozen=True)
class Bm25Options:
    """BM25's parameters (``Bm25Settings``: a BM25 index, and a hybrid index's BM25 part)."""

    k1: float | None = option(
        "BM25 (bm25, and hybrid's BM25 part): term-frequency saturation k1 (default 0.9)",
        "--bm25-k1",
    )
    b: float | None = option(
        "BM25 (bm25, and hybrid's BM25 part): length normalisation b, 0 to 1 (default 0.4)",
        "--bm25-b",
    )


@dataclass(frozen=True)
class PhraseOptions:
    """A phrase index's filter, compression, memory and lexical part (``PhraseSettings``)."""

    threshold: float | None = option("Phrase filter threshold tau (phrase indexes)")
    keep: float | None = option(
        "Phrase indexes, instead of --threshold: keep about this fraction of the start and "
        "end vectors (the filter's trade-off of size against accuracy)"
    )
    compress: Compress | None = option(
        "Phrase indexes: quantize the FAISS vectors (spans scored decoded; default: the "
        "phrase kind's, see docs/cli.md)"
    )
    pq_m: int | None = option("pq, opq-pq: bytes per vector (default dim/8)")
    memory_budget: str | None = option(
        "Phrase indexes: resident memory the build may use, e.g. 1.5G (the default); sets "
        "shard and batch sizes and builds FAISS in blocks"
    )
    keep_dump: bool | None = option(
        "Phrase indexes: keep the float16 vectors (default: only with --compress none)",
        "--keep-dump/--no-keep-dump",
    )
    sparse: bool | None = option(
        "Phrase indexes: fuse a BM25 score of each phrase's passage (default on)",
        "--sparse/--no-sparse",
    )
    sparse_from: str | None = option(
        "Phrase indexes: copy this BM25 index (same corpus) as the lexical part", path=True
    )
    bf16: bool | None = option(
        "Encode the passages in bfloat16 autocast (torch). Phrase indexes: the default where "
        "torch encodes them on a CPU with native bfloat16 (AVX-512 BF16, AMX), float32 "
        "elsewhere; dense and hybrid: float32 by default. Recorded in the index",
        "--bf16/--no-bf16",
    )
    int8: bool | None = option(
        "Phrase indexes: encode the passages on ONNX Runtime's int8 passage graph (its "
        "encoder layers' weight matmuls quantized; CPU only, not with --bf16 or --runtime "
        "torch): faster where the CPU has int8 dot-product instructions (AVX-512 VNNI, "
        "AVX-VNNI, Arm dot product), a little less accurate. Default: off. Recorded in the "
        "index",
        "--int8/--no-int8",
    )
    sparse_weight: float | None = option(
        "Phrase indexes: weight of the BM25 part of phrase scores (0: dense scores alone)"
    )
    rescore: int | None = option(
        "Phrase indexes: passages each search re-encodes and re-scores exactly by default "
        "(its top N; default: the phrase kind's, see docs/cli.md; 0: none)"
    )
    rescore_margin: float | None = option(
        "Phrase indexes: re-score a passage after the first only when its first-stage score "
        "is within this of the first's (default: the phrase kind's; 1000: all N)"
    )
    rescore_tokens: str | None = option(
        "Phrase indexes: rank the re-scored passages' spans over the tokens the index "
        "stored (stored), those passing the model's own filter (model) or every token "
        "(all; the default)",
        metavar="stored|model|all",
    )
    rescore_context: int | None = option(
        "Phrase indexes: re-encode only this many characters each side of a re-scored "
        "passage's best first-stage phrase (default: the phrase kind's; 0: the whole passage)",
        metavar="CHARS",
    )


@dataclass(frozen=True)
class RayOptions:
    """An encode on Ray (dense, hybrid, phrase), as ``api.ray_executor`` takes it."""

    address: str | None = option(
        "Encode on Ray (dense, hybrid, phrase): local (start one for this build), auto (join "
        "the cluster on this machine) or HOST:PORT; see docs/scale.md",
        "--ray",
        metavar="ADDRESS",
    )
    workers: int | None = option("With --ray: encoding actors, one model each (default 2)")
    retries: int | None = option("With --ray: tries again per failed shard (default 2)")
    timeout: float | None = option(
        "With --ray auto or HOST:PORT: how long to wait for the cluster to answer before "
        "failing (default 30)",
        "--ray-timeout",
        metavar="SECONDS",
    )


@dataclass(frozen=True)
class RecordFieldOptions:
    """Which fields of a record file hold the text, id, title and metadata (the API's
    ``FIELD_OPTIONS``): ``index`` and ``add`` read a corpus with them."""

    text_field: str | None = option(
        "CSV, TSV, JSONL (also in a folder): the field holding the text "
        "(default: text, contents, body or content)"
    )
    id_field: str | None = option(
        "CSV, TSV, JSONL: the field holding the document id (default: id or _id, else FILE:LINE)"
    )
    title_field: str | None = option(
        "CSV, TSV, JSONL: the field holding the title (default: title)"
    )
    meta_fields: str | None = option(
        "CSV, TSV, JSONL: the fields kept as metadata, comma-separated (default: every other field)"
    )


@dataclass(frozen=True)
class AnswerOptions:
    """The answer grain's reading, over any index kind (the API's ``READ_OPTIONS``):
    ``search`` takes every one, ``eval-reader`` those that shape what is read."""

    read: int | None = option(
        "Answer grain: read the top K passages with a reader (1 to 100, default 3); "
        "implies --unit answer"
    )
    reader: str | None = option(
        "Answer grain: reader directory or shipped name (default: the shipped reader for the "
        "corpus language)"
    )
    retriever_weight: float | None = option(
        "Answer grain: weight of the passage's retrieval score beside the reader's (default 1.5)"
    )
    min_confidence: float | None = option(
        'Answer grain: below this calibrated confidence (0..1) say "not found" and show the '
        "passages read as evidence (needs a reader with a confidence calibration)"
    )
    read_window: int | None = option(
        "Answer grain over a phrase index: read this many tokens around the phrase that "
        "found each passage, not the whole passage (32 to 512; 0: whole passages; default 128)"
    )
    read_sure: float | None = option(
        "Answer grain over a phrase index: read every passage whole only when the first "
        "window's best span has a probability below this (0..1; 1: read every passage's "
        "window; default 0.33)"
    )


#: what ``search`` and ``eval`` mean by the options they share with ``index``: this search's
#: value, the index's own by default
SEARCH_HELP = {
    "fusion": "Hybrid indexes: fusion method (default: the index's)",
    "weight": "Hybrid indexes: weight of the dense side",
    "depth": "Hybrid indexes: candidates from each system",
    "rescore": "Phrase indexes: re-encode each question's top N passages and rank their "
    "spans exactly (default: the index's setting; 0: off)",
    "rescore_margin": "Phrase indexes, re-scoring: re-score a passage after the first only "
    "when its first-stage score is within this of the first's (default: the index's; "
    "1000: all N)",
    "rescore_tokens": "Phrase indexes, re-scoring: rank spans over the re-encoded passages' "
    "stored tokens, those passing the model's own filter, or every token (default: the "
    "index's; stored for indexes that record none)",
    "rescore_context": "Phrase indexes, re-scoring: re-encode this many characters each side "
    "of a passage's best first-stage phrase (default: the index's; 0: the whole passage)",
}
