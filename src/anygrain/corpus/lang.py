"""Language handling shared by splitters, analyzers and metrics."""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anygrain.errors import AnygrainError

if TYPE_CHECKING:
    import numpy as np

    from anygrain.corpus.store import CorpusStore

# CJK unified ideographs (+ext A), compatibility ideographs, kana, hangul, CJK punctuation.
CJK_RE = re.compile(
    r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff00-\uffef]"
)


class Lang(str, enum.Enum):
    EN = "en"
    ZH = "zh"


def is_cjk(text: str, threshold: float = 0.2) -> bool:
    """True when a meaningful share of the non-space characters is CJK."""
    chars = [c for c in text[:2000] if not c.isspace()]
    if not chars:
        return False
    return sum(1 for c in chars if CJK_RE.match(c)) / len(chars) >= threshold


def detect_lang(store: CorpusStore, sample: int = 200) -> Lang:
    """The corpus language from up to ``sample`` passages spread over the store."""
    import numpy as np

    n = len(store)
    rows = np.linspace(0, n - 1, num=min(sample, n), dtype=np.int64)
    text = "".join(store.texts(rows))
    return Lang.ZH if is_cjk(text) else Lang.EN


def text_languages(texts: Sequence[str], sample: int = 200, share: float = 0.1) -> list[str]:
    """The languages of ``texts`` (a reader's training passages): up to ``sample`` of them,
    spread over the list, each judged on its own; a language is kept when at least ``share``
    of them are in it (a run over English and Chinese files records both), the most common
    first.  Empty for no texts."""
    if not texts:
        return []
    n = len(texts)
    picked = sorted(
        {round(i * (n - 1) / max(min(sample, n) - 1, 1)) for i in range(min(sample, n))}
    )
    counts = Counter(Lang.ZH if is_cjk(texts[i]) else Lang.EN for i in picked)
    return [lang.value for lang, c in counts.most_common() if c >= share * len(picked)]


# --- per-document language, for the BM25 analysers ---------------------------------------

#: ISO 639-1 code -> PyStemmer's (Snowball) algorithm, where it has one
SNOWBALL = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech",
    "da": "danish", "nl": "dutch", "en": "english", "eo": "esperanto", "et": "estonian",
    "fi": "finnish", "fr": "french", "de": "german", "el": "greek", "hi": "hindi",
    "hu": "hungarian", "id": "indonesian", "ga": "irish", "it": "italian", "lt": "lithuanian",
    "ne": "nepali", "no": "norwegian", "fa": "persian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "st": "sesotho", "es": "spanish",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
#: the detector's labels read as another code (Norwegian's two written forms)
_ALIASES = {"nb": "no", "nn": "no"}
#: characters of a document the detector reads (its cost grows with them)
DETECT_CHARS = 300
#: a detection below this probability takes the corpus's main language instead
MIN_CONFIDENCE = 0.9
#: a document with fewer letters than this is not judged (its main language is taken)
MIN_LETTERS = 20


def language_codes() -> frozenset[str]:
    """Every code ``lang`` may be given as: the detector's languages, and Chinese."""
    return frozenset(_identifier().nb_classes) | frozenset(SNOWBALL) | {"zh"}


def check_lang(code: str) -> str:
    """``code`` as given to ``--lang`` / ``lang=`` (en, zh, fr, ...), or a one-line error."""
    code = _ALIASES.get(code.strip().lower(), code.strip().lower())
    if code not in language_codes():
        raise AnygrainError(
            f"unknown language {code!r}: give an ISO 639-1 code such as en, zh, fr, de, es"
        )
    return code


_IDENTIFIER: Any = None


def _identifier() -> Any:
    """py3langid's identifier (its model ships in the wheel), loaded on first use."""
    global _IDENTIFIER
    if _IDENTIFIER is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _IDENTIFIER


def detect_text_lang(text: str) -> str | None:
    """The language code of one document's text, or None when it cannot be told with
    confidence (too short, or the detector unsure).  CJK text is Chinese, as the corpus
    language has always been judged (the detector splits it into Chinese dialects)."""
    sample = text[:DETECT_CHARS]
    if is_cjk(sample):
        return Lang.ZH.value
    if sum(c.isalpha() for c in sample) < MIN_LETTERS:
        return None
    code, p = _identifier().classify(sample)
    if p < MIN_CONFIDENCE:
        return None
    return str(_ALIASES.get(code, code))


@dataclass(frozen=True)
class LanguagePlan:
    """The language of every passage of a corpus, as its BM25 analysers read it.

    ``main``: the language most passages are in (a passage whose document could not be
    told takes it); ``codes``: the languages present, ``main`` first; ``rows``: each
    passage's index into ``codes`` (None when there is one language); ``passages``: how
    many passages each language has; ``given``: the language was given, not detected."""

    main: str
    codes: tuple[str, ...]
    rows: np.ndarray | None
    passages: dict[str, int]
    given: bool = False

    def row_langs(self, start: int, stop: int) -> list[str] | None:
        """The languages of passages ``start:stop``, or None when there is one language."""
        if self.rows is None:
            return None
        return [self.codes[i] for i in self.rows[start:stop]]

    def sliced(self, start: int, stop: int) -> LanguagePlan:
        """The plan of rows ``start:stop`` (a shard's), with the same languages."""
        rows = None if self.rows is None else self.rows[start:stop]
        return LanguagePlan(self.main, self.codes, rows, self.passages, self.given)


def plan_languages(
    store: CorpusStore, lang: str | None = None, *, batch_size: int = 8192
) -> LanguagePlan:
    """Each passage's language: ``lang`` for all when given, else each document's own,
    detected on its first passages (documents it cannot tell take the main language)."""
    import numpy as np

    n = len(store)
    if lang is not None:
        return LanguagePlan(lang, (lang,), None, {lang: n}, given=True)
    found = np.full(n, -1, dtype=np.int16)
    codes: list[str] = []
    index: dict[str, int] = {}
    last_doc: str | None = None
    last_code = -1
    for start, table in store.iter_batches(batch_size):
        docs = table.column("doc_id").to_pylist()
        texts = table.column("text").to_pylist()
        j = 0
        while j < len(docs):
            k = j + 1  # a document's passages are stored together
            while k < len(docs) and docs[k] == docs[j]:
                k += 1
            if docs[j] != last_doc:
                sample = ""
                for t in texts[j:k]:
                    sample += t + " "
                    if len(sample) >= DETECT_CHARS:
                        break
                code = detect_text_lang(sample)
                last_code = -1 if code is None else index.setdefault(code, len(index))
                if code is not None and last_code == len(codes):
                    codes.append(code)
                last_doc = docs[j]
            found[start + j : start + k] = last_code
            j = k
    counts = np.bincount(found[found >= 0], minlength=len(codes)) if codes else np.zeros(0)
    if not codes:  # nothing could be told: the corpus's script decides, as it always has
        main = detect_lang(store).value
        return LanguagePlan(main, (main,), None, {main: n})
    main_i = int(np.argmax(counts))
    found[found < 0] = main_i
    counts = np.bincount(found, minlength=len(codes))
    order = [main_i] + [i for i in np.argsort(-counts, kind="stable") if i != main_i and counts[i]]
    remap = np.zeros(len(codes), dtype=np.int16)
    remap[order] = np.arange(len(order), dtype=np.int16)
    ordered = tuple(codes[i] for i in order)
    passages = {codes[i]: int(counts[i]) for i in order}
    if len(ordered) == 1:
        return LanguagePlan(ordered[0], ordered, None, passages)
    return LanguagePlan(ordered[0], ordered, remap[found], passages)
