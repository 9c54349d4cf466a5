"""Analyzers turn text into BM25 terms, one per language.

English: lowercase, scikit-learn token pattern, English stopwords, Snowball
stemming (PyStemmer) — bm25s's own pipeline, so scores match raw bm25s.
Other languages PyStemmer has a Snowball stemmer for (French, German, Spanish, Russian,
...): the same pipeline with that stemmer and bm25s's stop words for it where it has them;
a language with no stemmer: the same without stemming.
Chinese: jieba word segmentation (whitespace means nothing in Chinese), lowercase,
punctuation and space tokens dropped; Latin words inside Chinese text are kept whole.
A corpus in several languages: each passage by its language's analyzer, terms of all but
the main language tagged with it (``fr:chat``), a query by every one of them, so that a
term scores only against passages of its own language.
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
    SNOWBALL = "snowball"  # any other language, stemmed where PyStemmer can
    MULTI = "multi"


#: the languages bm25s has a stop word list for
BM25S_STOPWORDS = frozenset(
    {"en", "de", "nl", "fr", "es", "pt", "it", "ru", "sv", "no", "zh", "tr", "ko", "da"}
)


class Analyzer(ABC):
    kind: AnalyzerKind

    @abstractmethod
    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]: ...

    def tokenize_passages(
        self, texts: Sequence[str], langs: Sequence[str] | None = None
    ) -> list[list[str]]:
        """Terms of passages to index, ``langs`` their languages (for a multilingual
        analyzer; one language's analyzer reads them all alike)."""
        return self.tokenize(texts)

    def config(self) -> dict[str, object]:
        return {"kind": self.kind.value}

    def describe(self) -> str:
        """What it does, in a few words, for the line a build prints."""
        return self.kind.value


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

    def describe(self) -> str:
        return _words("english" if self.stemming else None, self.stopwords)


def _words(stemmer: str | None, stopwords: bool) -> str:
    stem = f"{stemmer.capitalize()} Snowball stemmer" if stemmer else "no stemming"
    return f"{stem}, {'stop words' if stopwords else 'no stop words'}"


class SnowballAnalyzer(Analyzer):
    """English's pipeline for another language: its PyStemmer stemmer where there is one,
    bm25s's stop words for it where there are some."""

    kind = AnalyzerKind.SNOWBALL

    def __init__(self, lang: str, stemming: bool = True, stopwords: bool = True) -> None:
        from anygrain.corpus.lang import SNOWBALL

        self.lang = lang
        algorithm = SNOWBALL.get(lang)
        if algorithm not in Stemmer.algorithms():
            algorithm = None  # an older PyStemmer
        self.algorithm = algorithm if stemming else None
        self.stemming = self.algorithm is not None
        self.stopwords = stopwords and lang in BM25S_STOPWORDS
        self._stemmer = Stemmer.Stemmer(self.algorithm) if self.algorithm else None

    @staticmethod
    def can_stem(lang: str) -> bool:
        from anygrain.corpus.lang import SNOWBALL

        return SNOWBALL.get(lang) in Stemmer.algorithms()

    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
        out = bm25s.tokenize(
            list(texts),
            lower=True,
            stopwords=self.lang if self.stopwords else None,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=progress,
        )
        return out  # type: ignore[return-value]

    def config(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "lang": self.lang,
            "stemming": self.stemming,
            "stopwords": self.stopwords,
        }

    def describe(self) -> str:
        return _words(self.algorithm, self.stopwords)


class MultiAnalyzer(Analyzer):
    """One analyzer per language of a corpus: a passage's terms by its language's, tagged
    with the language unless it is the main one; a query's by all of them."""

    kind = AnalyzerKind.MULTI

    def __init__(self, main: str, analyzers: dict[str, Analyzer]) -> None:
        self.main = main
        self.analyzers = analyzers

    def tokenize(self, texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in texts]
        for lang, analyzer in self.analyzers.items():
            tag = "" if lang == self.main else f"{lang}:"
            for terms, more in zip(out, analyzer.tokenize(texts), strict=True):
                terms.extend(tag + t for t in more)
        return out

    def tokenize_passages(
        self, texts: Sequence[str], langs: Sequence[str] | None = None
    ) -> list[list[str]]:
        if langs is None:
            return self.tokenize(texts)
        out: list[list[str]] = [[] for _ in texts]
        for lang, analyzer in self.analyzers.items():
            picked = [i for i, code in enumerate(langs) if code == lang]
            if not picked:
                continue
            tag = "" if lang == self.main else f"{lang}:"
            for i, terms in zip(picked, analyzer.tokenize([texts[i] for i in picked]), strict=True):
                out[i] = [tag + t for t in terms] if tag else terms
        return out

    def config(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "main": self.main,
            "langs": {lang: a.config() for lang, a in self.analyzers.items()},
        }

    def describe(self) -> str:
        return "; ".join(f"{lang}: {a.describe()}" for lang, a in self.analyzers.items())


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

    def describe(self) -> str:
        return "jieba word segmentation, no stemming"


def release_segmenter() -> None:
    """Free jieba's dictionary (large, resident) when it is loaded; it loads again on its
    next use.  A phrase build frees it once its BM25 part is written, so its memory goes
    to the dump instead (the budget holds for Chinese)."""
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
    """The analyzer of one language (an ISO 639-1 code: en, zh, fr, de, ...)."""
    code = lang.value if isinstance(lang, Lang) else str(lang)
    if code == Lang.ZH.value:
        return ChineseAnalyzer()  # its recorded options describe it; nothing to set
    if code == Lang.EN.value:
        return EnglishAnalyzer(**options)  # type: ignore[arg-type]
    return SnowballAnalyzer(code, **options)  # type: ignore[arg-type]


def analyzer_from_config(cfg: dict[str, object]) -> Analyzer:
    cfg = dict(cfg)
    kind = str(cfg.pop("kind"))
    if kind == AnalyzerKind.MULTI.value:
        langs = cfg["langs"]
        assert isinstance(langs, dict)
        return MultiAnalyzer(
            str(cfg["main"]), {lang: analyzer_from_config(c) for lang, c in langs.items()}
        )
    if kind == AnalyzerKind.SNOWBALL.value:
        return make_analyzer(str(cfg.pop("lang")), **cfg)
    return make_analyzer(kind, **cfg)
