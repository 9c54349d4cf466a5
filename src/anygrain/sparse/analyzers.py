"""Analyzers turn text into BM25 terms, one per language.

English: lowercase, scikit-learn token pattern, English stopwords, Snowball
stemming (PyStemmer) — bm25s's own pipeline, so scores match raw bm25s.
Chinese: jieba word segmentation (whitespace means nothing in Chinese), lowercase,
punctuation and space tokens dropped; Latin words inside Chinese text are kept whole.
"""

from __future__ import annotations

import enum
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

import bm25s
import Stemmer

from anygrain.corpus.lang import Lang


class AnalyzerKind(str, enum.Enum):
    EN = "en"
    ZH = "zh"


class Analyzer(ABC):
    kind: AnalyzerKind

    @abstractmethod
    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]: ...

    def config(self) -> dict[str, object]:
        return {"kind": self.kind.value}


class EnglishAnalyzer(Analyzer):
    kind = AnalyzerKind.EN

    def __init__(self, stemming: bool = True, stopwords: bool = True) -> None:
        self.stemming = stemming
        self.stopwords = stopwords
        self._stemmer = Stemmer.Stemmer("english") if stemming else None

    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
        out = bm25s.tokenize(
            list(texts),
            lower=True,
            stopwords="en" if self.stopwords else None,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=progress,
        )
        return out  # type: ignore[return-value]

    def config(self) -> dict[str, object]:
        return {"kind": self.kind.value, "stemming": self.stemming, "stopwords": self.stopwords}


_ZH_KEEP = re.compile(r"\w", re.UNICODE)


class ChineseAnalyzer(Analyzer):
    kind = AnalyzerKind.ZH

    def __init__(self) -> None:
        import jieba

        jieba.setLogLevel(logging.WARNING)  # jieba logs its dictionary load at INFO
        self._jieba = jieba

    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
        cut = self._jieba.lcut
        return [[t.lower() for t in cut(text) if _ZH_KEEP.search(t)] for text in texts]

    def config(self) -> dict[str, object]:
        # what is applied, in the same terms as the English analyzer's record
        return {
            "kind": self.kind.value,
            "segmenter": "jieba",
            "stemming": False,
            "stopwords": False,
        }


def release_segmenter() -> None:
    """Free jieba's dictionary (65 MB resident) when it is loaded; it loads again on its
    next use.  A phrase build frees it once its BM25 part is written, so its memory goes
    to the dump instead (issue 34: the budget holds for Chinese)."""
    import gc
    import sys

    jieba = sys.modules.get("jieba")
    dt = getattr(jieba, "dt", None)
    if dt is None or not getattr(dt, "initialized", False):
        return
    with dt.lock:
        dt.FREQ, dt.total, dt.initialized = {}, 0, False
    gc.collect()
    from anygrain.utils.memory import trim_heap

    trim_heap()


def make_analyzer(lang: Lang | str, **options: object) -> Analyzer:
    kind = AnalyzerKind(Lang(lang).value)
    if kind is AnalyzerKind.ZH:
        return ChineseAnalyzer()  # its recorded options describe it; nothing to set
    return EnglishAnalyzer(**options)  # type: ignore[arg-type]


def analyzer_from_config(cfg: dict[str, object]) -> Analyzer:
    cfg = dict(cfg)
    kind = cfg.pop("kind")
    return make_analyzer(str(kind), **cfg)
