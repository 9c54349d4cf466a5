"""Reading-comprehension answer scores: SQuAD v1.1 EM/F1, and CMRC 2018's for Chinese.

English (and any gold set without Chinese characters) is scored with the official
SQuAD v1.1 script's definitions: lower-case, drop ASCII punctuation, drop the
articles *a/an/the*, collapse whitespace; EM is equality of the normalised
strings, F1 the bag-of-tokens overlap of whitespace tokens; both take the max over
gold answers.  As in v1.1, an empty normalised prediction or gold scores F1 0.

When any gold answer contains a Chinese (Han) character, the CMRC 2018 official
script (v5) is followed instead, because whitespace tokens mean nothing in Chinese:

* segmentation is *mixed*: each character in U+4E00..U+9FA5 (and each of the
  script's punctuation characters) is a token, runs of other characters are
  word-tokenised;
* EM compares the lower-cased, stripped strings after removing the script's
  punctuation list (``_CMRC_PUNCT``: CJK punctuation and ``- : _ * ^ / \\ ~ ` + =``
  -- not ``, . ! ?`` and the like, exactly as the official list);
* F1 uses the **longest common substring** of the two segment sequences (with
  punctuation removed), not a bag-of-tokens overlap.

The official script tokenises non-Chinese runs with ``nltk.word_tokenize``; we use
a small regex that keeps numbers like ``3,000``/``2.5`` and words whole and splits
other punctuation off, which agrees with NLTK on the short Latin fragments found in
Chinese answers (NLTK is not a dependency).

The language is picked from the golds only (``lang=`` overrides it), so a Chinese
question whose gold is all Latin, like ``"iPhone 6"``, gets SQuAD's rules.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

__all__ = [
    "exact_match",
    "f1",
    "is_chinese",
    "mixed_segmentation",
    "normalize_answer",
]

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ZH_CHAR = re.compile(r"[\u4e00-\u9fa5]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
# The punctuation list of the official CMRC 2018 script ("……" is two characters and,
# as there, never matches a single character).
_CMRC_PUNCT = frozenset(
    ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=",
     "，", "。", "：", "？", "！", "“", "”", "；", "’", "《", "》", "……", "·", "、",
     "「", "」", "（", "）", "－", "～", "『", "』"]
)  # fmt: skip
_LATIN_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|\w+(?:['’]\w+)*|[^\w\s]")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation: lower, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def is_chinese(answers: Iterable[str]) -> bool:
    """True when any answer contains a Han character: pick CMRC 2018 scoring."""
    return any(_HAN.search(a) for a in answers)


def mixed_segmentation(s: str, *, remove_punct: bool = False) -> list[str]:
    """CMRC 2018's segmentation: Chinese characters one by one, other runs as words."""
    s = s.lower().strip()
    out: list[str] = []
    run = ""
    for ch in s:
        if remove_punct and ch in _CMRC_PUNCT:
            continue
        if _ZH_CHAR.match(ch) or ch in _CMRC_PUNCT:
            if run:
                out.extend(_LATIN_TOKEN.findall(run))
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.extend(_LATIN_TOKEN.findall(run))
    return out


def _cmrc_strip(s: str) -> str:
    return "".join(ch for ch in s.lower().strip() if ch not in _CMRC_PUNCT)


def _longest_common_substring(a: list[str], b: list[str]) -> int:
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                if cur[j + 1] > best:
                    best = cur[j + 1]
        prev = cur
    return best


def _f1_squad(pred: str, gold: str) -> float:
    p = normalize_answer(pred).split()
    g = normalize_answer(gold).split()
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def _f1_cmrc(pred: str, gold: str) -> float:
    g = mixed_segmentation(gold, remove_punct=True)
    p = mixed_segmentation(pred, remove_punct=True)
    lcs = _longest_common_substring(g, p)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(g)
    return 2 * precision * recall / (precision + recall)


def _chinese(golds: list[str], lang: str | None) -> bool:
    if lang is None:
        return is_chinese(golds)
    if lang not in ("en", "zh"):
        raise ValueError(f"lang must be 'en', 'zh' or None (detect), got {lang!r}")
    return lang == "zh"


def exact_match(pred: str, golds: Iterable[str], *, lang: str | None = None) -> float:
    """1.0 when ``pred`` equals any gold after normalisation, else 0.0.

    ``lang`` forces SQuAD (``"en"``) or CMRC 2018 (``"zh"``) rules; by default
    CMRC's are used when a gold answer contains a Han character.
    """
    golds = list(golds)
    if _chinese(golds, lang):
        p = _cmrc_strip(pred)
        return float(any(_cmrc_strip(g) == p for g in golds))
    p = normalize_answer(pred)
    return float(any(normalize_answer(g) == p for g in golds))


def f1(pred: str, golds: Iterable[str], *, lang: str | None = None) -> float:
    """Max F1 of ``pred`` over golds: SQuAD bag-of-tokens, or CMRC's LCS for Chinese.

    ``lang`` as for :func:`exact_match`.
    """
    golds = list(golds)
    if not golds:
        return 0.0
    score = _f1_cmrc if _chinese(golds, lang) else _f1_squad
    return max(score(pred, g) for g in golds)
