"""Language handling shared by splitters, analyzers and metrics."""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
