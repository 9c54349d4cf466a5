"""Request and response models of the HTTP API (and so of its OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from anygrain.hits.hit import Hit, Unit, hits_json
from anygrain.serve.mcp_compact import PassageHits
from anygrain.serve.service import DEFAULT_K, MAX_BATCH, MAX_K, MAX_QUESTION_CHARS, RequestError

#: The search options a request may set, documented (the server takes whichever its index
#: lets a client set, :mod:`anygrain.serve.options`): name -> (JSON type, description).
SEARCH_OPTIONS = {
    "sparse_weight": ("number", "Phrase indexes: weight of the BM25 part (0: dense scores alone)"),
    "fusion": ("string", "Hybrid indexes: the fusion method (zscore, minmax, raw or rrf)"),
    "weight": ("number", "Hybrid indexes: the weight of the dense side"),
    "depth": ("integer", "Hybrid indexes: the candidates taken from each side"),
}


class HitOut(BaseModel):
    """One hit, as :meth:`anygrain.hits.hit.Hit.to_json` shapes it (the shape of
    ``anygrain search --json`` too). ``before + answer + after`` is the passage text;
    ``answer`` is the phrase or sentence (empty for passage and document hits, whose
    ``span`` is null)."""

    rank: int = Field(description="1 for the best hit")
    unit: Unit
    score: float
    passage_row: int = Field(description="The passage's row in the index's corpus")
    passage_id: str
    doc_id: str
    title: str
    text: str = Field(description="The passage text")
    span: tuple[int, int] | None = Field(
        description="Character span of the answer inside text (phrase and sentence hits)"
    )
    before: str
    answer: str
    after: str
    sentence: tuple[int, int] | None = Field(
        default=None, description="Answer hits: the span of the sentence holding the answer"
    )
    reader_score: float | None = Field(
        default=None, description="Answer hits: the reader's span score (start + end logit)"
    )
    retrieval_score: float | None = Field(
        default=None, description="Answer hits: the retriever's score of the passage read"
    )
    confidence: float | None = Field(
        default=None,
        description="Answer hits: the calibrated probability (0 to 1) that the answer is "
        "correct (null when the reader has no calibration); on passage hits, the best "
        "answer's confidence of a question left unanswered (below min_confidence)",
    )
    meta: dict[str, Any] = Field(
        default_factory=dict,
        description="The passage's metadata: its document's extra fields (JSONL's fields "
        "other than id, title and text), the passage's own, and start / end, the passage's "
        "character offsets in its document's text; a passage from a file adds source, "
        "page, headings, line, format and sha256",
    )
    char_start: int | None = Field(
        default=None,
        description="Where the hit (its answer, or its passage) starts in its document's "
        "text (the file's extracted text)",
    )
    char_end: int | None = Field(
        default=None, description="Where the hit ends in its document's text"
    )
    citation: str = Field(
        default="",
        description="Where the hit is: 'file › heading · page N' for a passage from a file, "
        "else its title",
    )


def hits_out(hits: list[Hit]) -> list[HitOut]:
    return [HitOut(**h) for h in hits_json(hits)]


class PassageOut(BaseModel):
    """One passage by id (:meth:`anygrain.serve.service.SearchService.passage`): what a
    hit's ``passage_id`` names, whole."""

    passage_id: str
    passage_row: int = Field(description="The passage's row in the index's corpus")
    doc_id: str
    title: str
    text: str = Field(description="The passage text")
    sentences: list[tuple[int, int]] = Field(
        description="Character spans of the passage's sentences inside text"
    )
    meta: dict[str, Any] = Field(
        default_factory=dict, description="The passage's metadata, as a hit's meta"
    )


class SearchResponse(BaseModel):
    question: str
    unit: Unit
    k: int
    hits: list[HitOut] = Field(
        default_factory=list,
        description="The full form: each hit whole, its passage text with it (absent in the "
        "compact form: see passages)",
    )
    hit_fields: list[str] | None = Field(
        default=None,
        description="The compact form: the names of a hit row's values, in order (rank, "
        "score, then span, answer and confidence where some hit has them; absent in the full "
        "form)",
    )
    passages: list[PassageHits] | None = Field(
        default=None,
        description="The compact form (the MCP search tool's default): each passage once, in "
        "the order of its best hit, with its hits under it as rows (absent in the full form)",
    )
    latency_ms: float = Field(description="Server-side time for this request, queueing included")


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[str] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"1 to {MAX_BATCH} questions, each 1 to {MAX_QUESTION_CHARS} characters",
    )
    unit: Unit | None = Field(
        default=None,
        description="Grain of the hits (default: the index's first unit); answer: a reader "
        "reads the top passages",
    )
    k: int = Field(
        default=DEFAULT_K,
        ge=1,
        description=f"Hits per question: 1 to the server's max_k (default {MAX_K}; /info's limits)",
    )
    min_confidence: float | None = Field(
        default=None,
        description="Unit answer: below this calibrated confidence (0 to 1) a question is "
        "not answered and its hits are the passages read",
    )
    sparse_weight: float | None = Field(
        default=None,
        description="Phrase indexes: weight of the BM25 part (0: dense alone); as in options",
    )
    options: dict[str, Any] | None = Field(
        default=None,
        description="The index's search options a request sets, by name: "
        + "; ".join(f"{name}: {doc}" for name, (_, doc) in SEARCH_OPTIONS.items()),
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description='Keep the top k hits whose metadata match: {"field": value}, '
        '{"field": [a, b]}, or operators ($ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, '
        "$and, $or, $not)",
    )

    def search_options(self) -> dict[str, Any]:
        """``options`` with ``sparse_weight`` given as a field of its own."""
        options = dict(self.options or {})
        if self.sparse_weight is not None:
            if options.get("sparse_weight", self.sparse_weight) != self.sparse_weight:
                raise RequestError("sparse_weight is given twice, with two values")
            options["sparse_weight"] = self.sparse_weight
        return options


class QuestionResult(BaseModel):
    question: str
    hits: list[HitOut]


class BatchResponse(BaseModel):
    unit: Unit
    k: int
    results: list[QuestionResult]
    latency_ms: float = Field(description="Server-side time for the whole batch")


class HealthResponse(BaseModel):
    status: str = Field(
        description="ok, or unhealthy (with a 503) when the index cannot be searched"
    )
    kind: str
    uptime_s: float
    searches: int = Field(description="Search calls made (queued requests are batched)")
    questions: int = Field(description="Questions answered")
    reloads: int = Field(
        default=0, description="Times the index was reopened after its files changed on disk"
    )
    error: str | None = Field(
        default=None, description="Why the index cannot be searched (unhealthy only)"
    )


class InfoResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    index: str = Field(description="The index directory's name")
    kind: str = Field(description="bm25, dense, hybrid or phrase")
    format: str | None
    format_version: int | None
    created: str | None
    model: dict[str, Any] | None = Field(
        description="The encoder: its name (when recorded), base model and fingerprint"
    )
    corpus: dict[str, Any]
    counts: dict[str, Any] | None = Field(description="Phrase indexes: vector counts and sizes")
    units: list[str] = Field(
        description="The units this index accepts (answer when a reader is available)"
    )
    default_unit: str
    fusion: dict[str, Any] | None = Field(
        default=None, description="Hybrid indexes: the fusion method, weight and depth"
    )
    shards: int | None = Field(default=None, description="Sharded indexes: how many shards")
    reader: str | None = Field(
        default=None,
        description="Unit answer: the reader (a shipped name or its directory's name); "
        "null when the server has none",
    )
    read: int | None = Field(
        default=None, description="Unit answer: passages the reader reads per question"
    )
    question_precision: str = Field(
        default="float32",
        description="float32, or bfloat16: the question encoder's linear layers (phrase indexes)",
    )
    search_threads: int = Field(
        default=1,
        description="Threads searching at once: 2 for a phrase index that re-scores passages "
        "(re-encoding makes search the costly stage), else 1",
    )
    read_threads: int | None = Field(
        default=None,
        description="Unit answer: threads reading answers at once (null when the server has "
        "no reader)",
    )
    limits: dict[str, int]
    filter_fields: list[FilterField] | None = Field(
        default=None,
        description="The metadata fields a filter may name, each with a few values, as seen "
        "in a sample of the corpus's passages (the MCP info tool; null where not listed)",
    )


class ErrorResponse(BaseModel):
    error: str = Field(
        description="What was wrong with the request (4xx), or with the index on disk (503)"
    )


# --- documents, filter fields (the MCP tools'; the compact search form: mcp_compact) -------


class DocumentPassage(BaseModel):
    passage_id: str
    text: str
    start: int | None = Field(
        default=None, description="Where the passage starts in its document's text"
    )
    end: int | None = Field(
        default=None, description="Where the passage ends in its document's text"
    )
    meta: dict[str, Any] | None = Field(
        default=None,
        description="The passage's metadata where it differs from the document's (a page, "
        "headings)",
    )


class DocumentOut(BaseModel):
    """A document's passages by document id, whole passages up to a size."""

    doc_id: str
    title: str
    meta: dict[str, Any] = Field(
        default_factory=dict, description="The document's metadata (its first passage's)"
    )
    n_passages: int = Field(description="The document's passages in all")
    offset: int = Field(description="The first passage returned (0 for the first)")
    passages: list[DocumentPassage] = Field(description="Passages in document order")
    next_offset: int | None = Field(
        default=None,
        description="The offset to ask for the rest, where passages were left out to keep "
        "within max_chars (none: the document's end)",
    )


class FilterField(BaseModel):
    """A metadata field a search filter may name."""

    field: str = Field(description="Its name (a dotted name reaches into an object)")
    types: list[str] = Field(description="The JSON types of its values")
    examples: list[Any] = Field(description="A few of its values (a list field's items)")


SearchResponse.model_rebuild()
InfoResponse.model_rebuild()
