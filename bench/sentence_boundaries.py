"""Sentence boundaries: precision, recall and F1 per category, and speed, of the sentence
splitter before and after the library-based one, and of the candidate libraries.

The boundary test is ``tests/fixtures/sentence_boundaries.json`` (written for this test:
abbreviations, initials, numbers, quotes and brackets, lists, code and URLs, Chinese,
French/German and ordinary text).  A boundary is the start offset of every sentence after
the first; a predicted boundary counts when it is exactly a gold one.  Speed is measured on
the contexts of SQuAD v1.1 dev (skipped when ``--squad`` is absent): contexts and sentences
a second, one core, each splitter's own sentence count.  The per-document language
detector BM25 now runs (py3langid) is timed on the same contexts: its model's load, and
documents a second on each one's first ``DETECT_CHARS`` characters.

Splitters: ``old`` (the regex splitter anygrain used before, kept here as the baseline),
``new`` (``anygrain.corpus.sentences.split_sentences``), ``new_syntok_all`` (the same rules
with syntok asked about every text, not only where its answer is in doubt: the results must
be the same, and ``--same`` counts the texts where they are not), and the raw candidate
libraries ``pysbd``, ``syntok`` and ``blingfire`` where installed.  One JSON object is
printed.

    python bench/sentence_boundaries.py [--squad PATH] [--limit N] [--same JSON ...]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anygrain.corpus.sentences import (
    spans_between,
    split_sentences,
    split_sentences_syntok_all,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "sentence_boundaries.json"
SQUAD = ROOT.parent / "shared" / "data" / "squad-v1.1" / "dev-v1.1.json"

Spans = list[tuple[int, int]]

# --- the splitter anygrain used before (the baseline) ------------------------------------
_EN_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ZH_BOUNDARY = re.compile(r"(?<=[。！？；!?])[”’」』）)]*")
_ABBREV = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|U\.S|No|Vol|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.$"
)


def old_split(text: str) -> Spans:
    cuts: set[int] = set()
    for m in _EN_BOUNDARY.finditer(text):
        if _ABBREV.search(text[max(0, m.start() - 6) : m.start()]):
            continue
        cuts.add(m.end())
    for m in _ZH_BOUNDARY.finditer(text):
        if m.end() < len(text):
            cuts.add(m.end())
    return spans_between(text, sorted(cuts))


# --- the raw candidate libraries --------------------------------------------------------


def _pysbd() -> Callable[[str], Spans] | None:
    try:
        import pysbd
    except ImportError:
        return None
    seg = pysbd.Segmenter(language="en", clean=False, char_span=True)

    def split(text: str) -> Spans:
        return spans_between(text, [s.start for s in seg.segment(text)][1:])

    return split


def _syntok() -> Callable[[str], Spans] | None:
    try:
        import syntok.segmenter as segmenter
    except ImportError:
        return None

    def split(text: str) -> Spans:
        starts = [sent[0].offset for para in segmenter.analyze(text) for sent in para if sent]
        return spans_between(text, starts[1:])

    return split


def _blingfire() -> Callable[[str], Spans] | None:
    try:
        import blingfire
    except ImportError:
        return None

    def split(text: str) -> Spans:
        # offsets are of UTF-8 bytes: map them back to characters
        _, offs = blingfire.text_to_sentences_and_offsets(text)
        raw = text.encode("utf-8")
        starts = [len(raw[:s].decode("utf-8", "ignore")) for s, _ in offs]
        return spans_between(text, starts[1:])

    return split


def splitters() -> dict[str, Callable[[str], Spans]]:
    out: dict[str, Callable[[str], Spans]] = {
        "old": old_split,
        "new": split_sentences,
        "new_syntok_all": split_sentences_syntok_all,
    }
    for name, make in (("pysbd", _pysbd), ("syntok", _syntok), ("blingfire", _blingfire)):
        fn = make()
        if fn is not None:
            out[name] = fn
    return out


# --- scoring ----------------------------------------------------------------------------


def cases(path: Path = FIXTURE) -> list[tuple[str, str, set[int]]]:
    """``(category, text, gold boundaries)`` of each labelled case."""
    out = []
    for c in json.loads(path.read_text(encoding="utf-8"))["cases"]:
        sep = c.get("sep", " ")
        text, gold, pos = "", set(), 0
        for i, s in enumerate(c["sents"]):
            if i:
                text += sep
                pos += len(sep)
                gold.add(pos)
            text += s
            pos += len(s)
        out.append((c["cat"], text, gold))
    return out


def prf(tp: int, n_pred: int, n_gold: int) -> dict[str, float]:
    p = tp / n_pred if n_pred else 1.0
    r = tp / n_gold if n_gold else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"p": round(p, 4), "r": round(r, 4), "f1": round(f, 4)}


def boundary_scores(split: Callable[[str], Spans], labelled: list[tuple[str, str, set[int]]]):
    """Per category and overall: boundary precision, recall, F1 (micro) and the cases
    whose boundaries are not all right."""
    counts: dict[str, list[int]] = {}
    wrong: list[dict[str, Any]] = []
    for cat, text, gold in labelled:
        spans = split(text)
        pred = {s for s, _ in spans[1:]}
        for key in (cat, "all"):
            c = counts.setdefault(key, [0, 0, 0])
            c[0] += len(pred & gold)
            c[1] += len(pred)
            c[2] += len(gold)
        if pred != gold:
            wrong.append({"cat": cat, "sentences": [text[s:e] for s, e in spans]})
    scores = {k: prf(*v) for k, v in counts.items()}
    return scores, wrong


def squad_contexts(path: Path, limit: int | None) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    out = [p["context"] for art in data for p in art["paragraphs"]]
    return out[:limit] if limit else out


def speed(split: Callable[[str], Spans], texts: list[str]) -> dict[str, float]:
    split(texts[0])  # load what it loads lazily
    t0 = time.perf_counter()
    n = sum(len(split(t)) for t in texts)
    dt = time.perf_counter() - t0
    return {
        "contexts_per_s": round(len(texts) / dt, 1),
        "sentences_per_s": round(n / dt, 1),
        "sentences": n,
        "seconds": round(dt, 3),
    }


def language_speed(texts: list[str]) -> dict[str, Any]:
    from collections import Counter

    from anygrain.corpus import lang

    t0 = time.perf_counter()
    lang._identifier()
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = Counter(str(lang.detect_text_lang(t)) for t in texts)
    dt = time.perf_counter() - t0
    return {
        "model_load_s": round(load, 2),
        "docs_per_s": round(len(texts) / dt, 1),
        "chars_read": lang.DETECT_CHARS,
        "detected": dict(found.most_common()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, default=SQUAD, help="SQuAD v1.1 dev JSON (speed)")
    ap.add_argument("--limit", type=int, default=None, help="contexts timed (default: all)")
    ap.add_argument("--errors", action="store_true", help="list each splitter's wrong cases")
    ap.add_argument(
        "--same",
        type=Path,
        nargs="*",
        default=[],
        help="SQuAD-format JSON files whose contexts (and the fixture's) must split the same "
        "with and without the fast path: counts the texts that do not",
    )
    args = ap.parse_args()
    labelled = cases()
    texts = squad_contexts(args.squad, args.limit) if args.squad.is_file() else []
    out: dict[str, Any] = {"cases": len(labelled), "boundary": {}, "speed": {}}
    if args.errors:
        out["wrong"] = {}
    for name, split in splitters().items():
        scores, wrong = boundary_scores(split, labelled)
        out["boundary"][name] = scores
        if args.errors:
            out["wrong"][name] = wrong
        if texts:
            out["speed"][name] = speed(split, texts)
    for path in args.same:
        every = squad_contexts(path, None)
        differ = sum(split_sentences(t) != split_sentences_syntok_all(t) for t in every)
        out.setdefault("same", {})[path.name] = {"texts": len(every), "differ": differ}
    if args.same:
        fixture = [t for _, t, _ in labelled]
        differ = sum(split_sentences(t) != split_sentences_syntok_all(t) for t in fixture)
        out["same"]["fixture"] = {"texts": len(fixture), "differ": differ}
    if texts:
        out["speed_corpus"] = f"{args.squad.name}: {len(texts)} contexts"
        out["language"] = language_speed(texts)
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
