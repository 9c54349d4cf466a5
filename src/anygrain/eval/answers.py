"""Answer matching for open-domain QA retrieval, as DPR and DensePhrases score it.

``has_answer`` reproduces DPR's ``has_answer`` (``dpr/data/qa_validation.py``):

* **strings**: text and answer are NFD-normalised and tokenised with DPR's
  ``SimpleTokenizer`` (tokens are ``[\\p{L}\\p{N}\\p{M}]+`` runs or any single
  ``[^\\p{Z}\\p{C}]`` character), lower-cased; the answer matches when its token
  sequence occurs contiguously in the text's.  So ``"cat"`` does not match
  ``"category"`` and punctuation must line up token for token.
* **regex** (CuratedTREC): ``regex.search(pattern, text, IGNORECASE | UNICODE |
  MULTILINE)`` on NFD text; a pattern that does not compile never matches (DPR's
  ``regex_match`` returns ``False``); it is logged once.

Two deliberate differences, both for data DPR was not built for:

* **CJK**: Chinese and Japanese are written without spaces, so DPR's rule turns a
  whole clause into one token and an answer like ``"北京"`` would never match
  ``"北京是中国的首都"``.  We make every Han, Hiragana, Katakana and Bopomofo
  character (with its combining marks) a token of its own, which for CJK answers
  is a normalised substring test on characters.  Latin words and numbers stay
  whole.  This only differs from DPR where a CJK character touches a letter or
  digit with no space between; pass ``cjk_chars=False`` for DPR's exact rule.
* **Empty answers**: an answer with no tokens would match every text in DPR's loop
  (an empty slice equals an empty list); we never let it match.

``phrase_match`` scores a *phrase* (phrase-level hits) as DensePhrases does:
SQuAD-normalised exact match against any answer, or for regex answers
``pattern.match(phrase)`` -- anchored at the start of the phrase, not a full match.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

import regex as rx

from anygrain.eval.squad import exact_match

__all__ = ["AnswerMatcher", "has_answer", "phrase_match", "regex_match", "tokenize"]

log = logging.getLogger(__name__)

_FLAGS = rx.IGNORECASE | rx.UNICODE | rx.MULTILINE
_CJK_CLASS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Bopomofo}"
# DPR's SimpleTokenizer: alphanumeric runs, else any single non-space, non-control char.
_DPR_TOKEN = rx.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]")
_HAS_CJK = rx.compile(rf"[{_CJK_CLASS}]")
# Splits an alphanumeric run: each CJK character (with its marks) alone, the rest whole.
_SPLIT_CJK = rx.compile(rf"[{_CJK_CLASS}]\p{{M}}*|[^{_CJK_CLASS}]+")


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def tokenize(text: str, *, cjk_chars: bool = True) -> list[str]:
    """NFD-normalise, tokenise as DPR's SimpleTokenizer does and lower-case.

    With ``cjk_chars`` each CJK character becomes its own token; the split is done
    after DPR's tokenisation, and only when the text has CJK at all, so English
    text costs no more than DPR's own tokenizer.
    """
    t = _nfd(text)
    tokens = _DPR_TOKEN.findall(t)
    if cjk_chars and _HAS_CJK.search(t):
        split: list[str] = []
        for tok in tokens:
            if len(tok) > 1 and _HAS_CJK.search(tok):
                split.extend(_SPLIT_CJK.findall(tok))
            else:
                split.append(tok)
        tokens = split
    return [tok.lower() for tok in tokens]


@lru_cache(maxsize=8192)
def _cached_tokens(text: str, cjk_chars: bool) -> tuple[str, ...]:
    """Tokens of a unit's text; the same passages come back for many questions."""
    return tuple(tokenize(text, cjk_chars=cjk_chars))


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> rx.Pattern[str] | None:
    try:
        return rx.compile(_nfd(pattern), _FLAGS)
    except (rx.error, TypeError, ValueError, OverflowError) as e:
        log.warning("answer regex %r does not compile (%s); it never matches", pattern, e)
        return None


def regex_match(text: str, pattern: str) -> bool:
    """True when ``pattern`` occurs anywhere in ``text`` (DPR's ``regex_match``)."""
    compiled = _compile(pattern)
    return compiled is not None and compiled.search(_nfd(text)) is not None


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0:
        return False
    first = needle[0]
    for i in range(len(haystack) - n + 1):
        if haystack[i] == first and list(haystack[i : i + n]) == list(needle):
            return True
    return False


class AnswerMatcher:
    """One question's answers, prepared once and tested against many texts.

    Evaluation checks every retrieved unit of a question against the same answers;
    tokenising or compiling them once per question keeps that cheap.
    """

    def __init__(
        self, answers: Iterable[str], *, regex: bool = False, cjk_chars: bool = True
    ) -> None:
        self.answers = [a for a in answers if isinstance(a, str)]
        self.regex = regex
        self.cjk_chars = cjk_chars
        if regex:
            self._patterns = [p for p in (_compile(a) for a in self.answers) if p is not None]
            self._tokens: list[list[str]] = []
        else:
            self._patterns = []
            self._tokens = [
                t for t in (tokenize(a, cjk_chars=cjk_chars) for a in self.answers) if t
            ]

    def in_text(self, text: str) -> bool:
        """DPR's ``has_answer``: does ``text`` contain any answer?"""
        if self.regex:
            t = _nfd(text)
            return any(p.search(t) is not None for p in self._patterns)
        if not self._tokens:
            return False
        words = _cached_tokens(text, self.cjk_chars)
        return any(_contains(words, a) for a in self._tokens)

    def matches_phrase(self, phrase: str) -> bool:
        """DensePhrases' phrase score: normalised exact match, or regex match at the start."""
        if self.regex:
            p = _nfd(phrase)
            return any(pat.match(p) is not None for pat in self._patterns)
        return bool(self.answers) and exact_match(phrase, self.answers) == 1.0


def has_answer(
    text: str, answers: Iterable[str], *, regex: bool = False, cjk_chars: bool = True
) -> bool:
    """True when ``text`` contains one of ``answers`` (DPR's token or regex rule)."""
    return AnswerMatcher(answers, regex=regex, cjk_chars=cjk_chars).in_text(text)


def phrase_match(phrase: str, answers: Iterable[str], regex: bool = False) -> bool:
    """True when a retrieved phrase *is* one of ``answers`` (DensePhrases' rule)."""
    return AnswerMatcher(answers, regex=regex).matches_phrase(phrase)
