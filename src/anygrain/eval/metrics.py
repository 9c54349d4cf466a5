"""Retrieval and answer metrics, registered by name and parsed from strings like ``mrr@10``.

Each metric is computed per question from a :class:`~anygrain.eval.relevance.Judged`
list (see there for when a unit counts as relevant) and averaged over the
questions it applies to.  A metric *applies* to a question when the question has
what its definition needs -- answers or qrels for ranking metrics, qrels for
nDCG, qrels or gold ids (with answers) for R-precision, answer strings for EM/F1;
questions it does not apply to are left out of its mean and counted, never
dropped silently.  Questions with neither answers nor qrels (SQuAD v2
unanswerable ones) apply to no metric.

On qrels the ranking metrics equal trec_eval's (checked against pytrec_eval):
``top@k`` = ``success_k``, ``mrr@k`` = ``recip_rank`` on the run cut at ``k``,
``p@k`` = ``P_k``, ``recall@k`` = ``recall_k``, ``ndcg@k`` = ``ndcg_cut_k``,
``rprec`` = ``Rprec``.  A question with no retrieved units scores 0 on every
ranking metric (trec_eval's ``-c``); see ``evaluate(drop_empty=True)`` for the
Multi-CPR script's convention.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError
from anygrain.eval.answers import phrase_match
from anygrain.eval.relevance import Judged, gold_sets
from anygrain.eval.squad import exact_match, f1
from anygrain.hits.hit import Hit

__all__ = [
    "Metric",
    "UnknownMetricError",
    "available_metrics",
    "get_metric",
    "parse_metrics",
    "register_metric",
]


class UnknownMetricError(AnygrainError, ValueError):
    """A metric name that is not registered, or is missing/has a bad cutoff."""


MetricFn = Callable[[Judged, int], float]


@dataclass(frozen=True)
class _Family:
    name: str
    takes_k: bool
    fn: MetricFn
    applies: Callable[[Question], bool]
    needs: str


_REGISTRY: dict[str, _Family] = {}
_ALIASES: dict[str, str] = {}


def register_metric(
    name: str,
    *,
    takes_k: bool,
    applies: Callable[[Question], bool],
    needs: str,
    aliases: Iterable[str] = (),
) -> Callable[[MetricFn], MetricFn]:
    """Register a metric family; ``needs`` words the error when nothing applies."""

    def deco(fn: MetricFn) -> MetricFn:
        _REGISTRY[name] = _Family(name, takes_k, fn, applies, needs)
        for a in aliases:
            _ALIASES[a] = name
        return fn

    return deco


@dataclass(frozen=True)
class Metric:
    """A parsed metric: a registered family with its cutoff (``top@5``)."""

    family: str
    k: int | None = None

    @property
    def name(self) -> str:
        return f"{self.family}@{self.k}" if self.k is not None else self.family

    @property
    def doc(self) -> str:
        return (_REGISTRY[self.family].fn.__doc__ or "").strip()

    @property
    def needs(self) -> str:
        return _REGISTRY[self.family].needs

    def applies(self, question: Question) -> bool:
        """Whether this metric is defined for ``question``."""
        return _REGISTRY[self.family].applies(question)

    def depth(self, question: Question) -> int:
        """How many hits this metric may read for ``question``."""
        if self.k is not None:
            return self.k
        if self.family == "rprec":
            return _r(question)
        return 1

    def __call__(self, judged: Judged) -> float:
        return _REGISTRY[self.family].fn(judged, self.k or 0)

    def __str__(self) -> str:
        return self.name


def available_metrics() -> list[str]:
    """Registered metric names as users write them (``top@k``, ``em``, ...)."""
    return sorted(f"{n}@k" if f.takes_k else n for n, f in _REGISTRY.items())


_SPEC = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(?:@\s*(\S+))?\s*$")


def get_metric(spec: str | Metric) -> Metric:
    """Parse ``"top@5"``, ``"MRR@10"``, ``"rprec"``, ... into a :class:`Metric`."""
    if isinstance(spec, Metric):
        return spec
    valid = ", ".join(available_metrics())
    m = _SPEC.match(str(spec).lower())
    family = _ALIASES.get(m.group(1), m.group(1)) if m else None
    if m is None or family not in _REGISTRY:
        raise UnknownMetricError(f"unknown metric {spec!r}; valid metrics: {valid}")
    fam = _REGISTRY[family]
    ks = m.group(2)
    if not fam.takes_k:
        if ks is not None:
            raise UnknownMetricError(f"metric {family!r} takes no cutoff (got {spec!r})")
        return Metric(family)
    if ks is None:
        raise UnknownMetricError(
            f"metric {family!r} needs a cutoff, e.g. {family}@10 (got {spec!r})"
        )
    if not ks.isdigit() or int(ks) < 1:
        raise UnknownMetricError(f"cutoff in {spec!r} must be a positive integer")
    return Metric(family, int(ks))


def parse_metrics(specs: str | Iterable[str | Metric]) -> list[Metric]:
    """Parse a comma-separated string or a list of names; duplicates are dropped."""
    items = specs.split(",") if isinstance(specs, str) else list(specs)
    out: list[Metric] = []
    for s in items:
        if isinstance(s, str) and not s.strip():
            continue
        m = get_metric(s)
        if m not in out:
            out.append(m)
    if not out:
        raise UnknownMetricError(
            f"no metrics given; valid metrics: {', '.join(available_metrics())}"
        )
    return out


# --- applicability -----------------------------------------------------------------


def _ranked(q: Question) -> bool:
    return q.answerable


def _has_qrels(q: Question) -> bool:
    return bool(q.qrels)


def _has_ids(q: Question) -> bool:
    # Unanswerable (SQuAD v2) questions keep their paragraph as ``gold``; they are
    # skipped here too so every metric averages over the same answerable questions.
    return bool(q.qrels) or (bool(q.answers) and bool(gold_sets(q)))


def _has_answers(q: Question) -> bool:
    return bool(q.answers)


def _has_string_answers(q: Question) -> bool:
    return bool(q.answers) and not q.answers_are_regex


def _r(q: Question) -> int:
    if q.qrels:
        return sum(1 for r in q.qrels.values() if r > 0)
    return max((len(s) for s in gold_sets(q)), default=0)


def _log2_discount(i: int) -> float:
    return 1.0 / math.log2(i + 2)


# --- the metrics -------------------------------------------------------------------


@register_metric(
    "top",
    takes_k=True,
    applies=_ranked,
    needs="answers or qrels",
    aliases=("success", "hits", "acc"),
)
def top_k(j: Judged, k: int) -> float:
    """Top-k accuracy (DPR): 1 if any of the top k units is relevant, else 0.

    With qrels this is trec_eval's ``success_k``.
    """
    return 1.0 if j.first_relevant(k) is not None else 0.0


@register_metric("mrr", takes_k=True, applies=_ranked, needs="answers or qrels", aliases=("rr",))
def mrr_k(j: Judged, k: int) -> float:
    """Reciprocal rank of the first relevant unit within the top k; 0 if none.

    Equals trec_eval's ``recip_rank`` computed on the run truncated to k.
    """
    i = j.first_relevant(k)
    return 0.0 if i is None else 1.0 / (i + 1)


@register_metric(
    "p", takes_k=True, applies=_ranked, needs="answers or qrels", aliases=("precision",)
)
def precision_k(j: Judged, k: int) -> float:
    """Precision at k: relevant units in the top k divided by k (trec_eval ``P_k``).

    Fewer than k retrieved units still divide by k.
    """
    return j.n_relevant_in(k) / k


@register_metric("recall", takes_k=True, applies=_ranked, needs="answers or qrels", aliases=("r",))
def recall_k(j: Judged, k: int) -> float:
    """Recall at k: relevant units in the top k / relevant units in the qrels (``recall_k``).

    A question whose qrels hold no relevant unit scores 0, as in trec_eval.  With
    answer strings only the number of relevant units is unknown, so recall@k is
    defined as top@k (the "answer recall" DPR papers report).  For Multi-CPR (one
    relevant passage per query) recall@1000 is the hit rate its script reports.
    """
    if not j.uses_qrels:
        return top_k(j, k)
    n = j.n_relevant
    return j.n_relevant_in(k) / n if n else 0.0


@register_metric("ndcg", takes_k=True, applies=_has_qrels, needs="graded qrels")
def ndcg_k(j: Judged, k: int) -> float:
    """nDCG at k, trec_eval's ``ndcg_cut_k``: gain = qrels grade, discount 1/log2(rank+1).

    The ideal DCG ranks all judged relevant units of the qrels by grade; a question
    without relevant units scores 0.  Defined only for questions with qrels.
    """
    dcg = sum(j.gain(i) * _log2_discount(i) for i in range(min(k, len(j))))
    ideal = sum(g * _log2_discount(i) for i, g in enumerate(j.ideal_gains[:k]))
    return dcg / ideal if ideal > 0 else 0.0


@register_metric(
    "rprec",
    takes_k=False,
    applies=_has_ids,
    needs="qrels, or gold ids and answers",
    aliases=("r_prec",),
)
def r_precision(j: Judged, k: int) -> float:
    """R-precision: with R relevant ids, the fraction of the top R units that are relevant.

    With qrels, R = units with rel > 0 and this is trec_eval's ``Rprec``.  Without
    qrels it is KILT's R-precision against ``question.gold``.  Gold ids may name
    documents (KILT pages: matched by ``doc_id``, or by ``title`` against the gold
    ids and ``meta['titles']``) or units (passage ids, as SQuAD's gold passage):
    whichever a retrieved unit matches sets the grain.  At document grain the
    ranking is reduced to distinct documents first (first occurrence kept), as KILT
    de-duplicates provenance pages.  With several provenance sets
    (``question.meta['gold_sets']``) R-precision is computed per set (R = its size)
    and the maximum is taken, as KILT does; otherwise ``gold`` is one set.  R = 0
    and no matching unit score 0.
    """
    if j.uses_qrels:
        r = j.n_relevant
        return j.n_relevant_in(r) / r if r else 0.0
    return _gold_rprec(j)


def _gold_rprec(j: Judged) -> float:
    q = j.question
    sets = gold_sets(q)
    from_meta = bool(q.meta.get("gold_sets")) if q.meta else False
    raw_titles = q.meta.get("titles") if q.meta and not from_meta else None
    titles = {str(t) for t in raw_titles} if isinstance(raw_titles, (list, tuple)) else set()
    ids = {i for s in sets for i in s}

    def doc_match(h: Hit, pool: set[str], alias: set[str]) -> bool:
        return h.doc_id in pool or (bool(h.title) and (h.title in pool or h.title in alias))

    ranked: list[Hit] = []
    seen: set[str] = set()
    if any(doc_match(h, ids, titles) for h in j.hits):
        key = "doc_id"
    elif any(h.unit_id in ids for h in j.hits):
        key = "unit_id"
    else:
        return 0.0
    for h in j.hits:
        kv = getattr(h, key)
        if kv not in seen:
            seen.add(kv)
            ranked.append(h)
    best = 0.0
    for s in sets:
        r = len(s)
        pool = set(s)
        if key == "doc_id":
            num = sum(1 for h in ranked[:r] if doc_match(h, pool, titles))
        else:
            num = sum(1 for h in ranked[:r] if h.unit_id in pool)
        if r:
            best = max(best, num / r)
    return best


def _top1_answer(j: Judged) -> str:
    return j.hits[0].answer_text if j.hits else ""


@register_metric(
    "em", takes_k=False, applies=_has_answers, needs="answer strings", aliases=("exact_match",)
)
def em(j: Judged, k: int) -> float:
    """Exact match of the top-1 hit's answer text (the phrase, for phrase hits) with an answer.

    SQuAD v1.1 normalisation (CMRC 2018's when the answers are Chinese); for regex
    answers the phrase must match a pattern from its start (DensePhrases).
    """
    q = j.question
    if q.answers_are_regex:
        return float(bool(j.hits) and phrase_match(_top1_answer(j), q.answers, regex=True))
    return exact_match(_top1_answer(j), q.answers)


@register_metric(
    "f1", takes_k=False, applies=_has_string_answers, needs="answer strings (not regexes)"
)
def f1_metric(j: Judged, k: int) -> float:
    """Token F1 of the top-1 hit's answer text against the answers, max over answers.

    SQuAD v1.1 bag-of-tokens F1, or CMRC 2018's character-level LCS F1 for Chinese;
    undefined for regex answers.
    """
    return f1(_top1_answer(j), j.question.answers)
