"""Re-scoring's settings as one typed group (:class:`Rescoring`).

A build asks for them (:class:`~anygrain.phrase.build.PhraseSettings`), the index records
them (:class:`~anygrain.phrase.record.PhraseIndexRecord`, as ``index.json``'s flat
``rescore*`` keys) and a search may override them (:mod:`anygrain.phrase.rescore`): one
group carried whole, so no layer passes the four values one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.utils.ranges import Range

#: passages re-scored per question (0: none, the compressed scores as they are)
RESCORE_RANGE = Range("phrase rescore passages", 0, 10_000, integer=True)
#: how far below the first passage's first-stage score another may be and still be re-scored
#: (fused scores span a few units: the top of the range re-scores all ``N``)
RESCORE_MARGIN_RANGE = Range("phrase rescore margin", 0.0, 1000.0)
#: characters of text each side of a passage's best first-stage phrase that re-scoring
#: re-encodes (0: the whole passage)
RESCORE_CONTEXT_RANGE = Range("phrase rescore context", 0, 1_000_000, integer=True)


class RescoreTokens(str, Enum):
    """Which tokens of a re-encoded passage re-scoring ranks spans over."""

    STORED = "stored"  # the index's stored tokens (its filter and keep fraction)
    MODEL = "model"  # those passing the model's own filter threshold (a keep-1 index's)
    ALL = "all"  # every word-boundary token, no filter

    @classmethod
    def parse(cls, value: RescoreTokens | str | None, where: str = "rescore_tokens") -> Any:
        """``value`` as a member (None: ``stored``); a one-line error naming the choices."""
        if value is None:
            return cls.STORED
        try:
            return cls(value)
        except ValueError:
            choices = "|".join(m.value for m in cls)
            raise AnygrainError(f"{where}: {value!r} is not one of {choices}") from None


#: The re-scoring a PQ-coded index records unless told otherwise: the first stage's top
#: passage always, and of the next two those within the margin of its first-stage (fused)
#: score, re-encoded and ranked over all their tokens (the codes lost the spans, a low keep
#: most of the tokens; re-encoding brings both back).  docs/benchmarks.md has the choice.
DEFAULT_RESCORE = 3
DEFAULT_RESCORE_MARGIN = 1.5
DEFAULT_RESCORE_TOKENS = RescoreTokens.ALL

#: each field's key in ``index.json``'s settings (and the build and search option's name)
KEYS = {
    "passages": "rescore",
    "margin": "rescore_margin",
    "tokens": "rescore_tokens",
    "context": "rescore_context",
}


@dataclass(frozen=True)
class Rescoring:
    """How a search re-scores a phrase index's top passages exactly; each field None where
    not given (a build's or a search's), so groups layer with :meth:`or_else`."""

    passages: int | None = None  # the first stage's top passages re-encoded (0: off)
    # a passage after the first only when its first-stage score is within this of the first's
    margin: float | None = None
    tokens: RescoreTokens | None = None  # over which tokens spans are ranked (None: stored)
    # characters each side of a passage's best first-stage phrase re-encoded (None, 0: all)
    context: int | None = None
    # a search's choice, never recorded: encode in bfloat16 (None: as the index was built)
    bf16: bool | None = None

    def __post_init__(self) -> None:
        if self.passages is not None:
            object.__setattr__(self, "passages", int(RESCORE_RANGE.check(self.passages)))
        if self.margin is not None:
            object.__setattr__(self, "margin", float(RESCORE_MARGIN_RANGE.check(self.margin)))
        if self.context is not None:
            object.__setattr__(self, "context", int(RESCORE_CONTEXT_RANGE.check(self.context)))
        if self.tokens is not None:
            object.__setattr__(self, "tokens", RescoreTokens.parse(self.tokens))

    @classmethod
    def given(
        cls,
        passages: int | None = None,
        margin: float | None = None,
        tokens: RescoreTokens | str | None = None,
        context: int | None = None,
        bf16: bool | None = None,
    ) -> Rescoring:
        """The group of values as a build or a search is given them (``tokens`` by name; an
        empty name counts as not given), each checked."""
        which = RescoreTokens.parse(tokens) if tokens else None
        return cls(passages, margin, which, context, bf16)

    @classmethod
    def of_options(cls, options: Mapping[str, Any]) -> Rescoring:
        """The group of the flat ``rescore*`` keys of ``options`` (a manifest's settings, a
        build's options); an empty ``rescore_tokens`` counts as not given."""
        return cls.given(*(options.get(k) for k in KEYS.values()))

    def to_options(self) -> dict[str, Any]:
        """The flat ``rescore*`` keys, None where not given (``bf16`` is never recorded)."""
        out = {k: getattr(self, f) for f, k in KEYS.items()}
        out["rescore_tokens"] = self.tokens.value if self.tokens is not None else None
        return out

    def or_else(self, other: Rescoring) -> Rescoring:
        """Each field as given here, else ``other``'s."""
        return Rescoring(
            *(
                getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
                for f in (*KEYS, "bf16")
            )
        )

    def recorded(self, source: Rescoring, *, pq: bool) -> Rescoring:
        """What an index records when asked for these (its ``source``'s, a refilter's or an
        update's, filling the gaps): product-quantized codes (``pq``: they find passages, not
        the spans inside them) default to :data:`DEFAULT_RESCORE` and its margin; the tokens
        default to :data:`DEFAULT_RESCORE_TOKENS` wherever passages are re-scored."""
        r = replace(self.or_else(source), bf16=None)
        if r.passages is None and pq:
            margin = DEFAULT_RESCORE_MARGIN if r.margin is None else r.margin
            r = replace(r, passages=DEFAULT_RESCORE, margin=margin)
        if r.passages and r.tokens is None:
            r = replace(r, tokens=DEFAULT_RESCORE_TOKENS)
        return r

    @property
    def n(self) -> int:
        """Passages re-scored per question (0: none)."""
        return int(self.passages or 0)

    @property
    def token_choice(self) -> RescoreTokens:
        """The tokens spans are ranked over (``stored`` when not given)."""
        return RescoreTokens.parse(self.tokens)

    @property
    def window(self) -> int | None:
        """Characters re-encoded each side of the best phrase (None: the whole passage)."""
        return self.context or None
