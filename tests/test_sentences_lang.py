"""Sentences cut by a library (syntok) and BM25 analysers chosen per document's language.

The boundary cases are tests/fixtures/sentence_boundaries.json (written for this test);
bench/sentence_boundaries.py reports the same figures with speed.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from anygrain.corpus.lang import check_lang, detect_text_lang, plan_languages
from anygrain.corpus.records import SourceDocument
from anygrain.corpus.sentences import split_sentences
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.sparse.analyzers import ChineseAnalyzer, EnglishAnalyzer

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from sentence_boundaries import boundary_scores, cases, old_split  # noqa: E402

LABELLED = cases()
CATEGORIES = sorted({c for c, _, _ in LABELLED})
#: the new splitter's boundary F1 per category on the fixture: none may fall
FLOOR = {
    "abbreviations": 0.94,
    "chinese": 1.0,
    "code_urls": 1.0,
    "french_german": 0.86,
    "initials": 1.0,
    "lists": 1.0,
    "numbers": 1.0,
    "ordinary": 1.0,
    "quotes_brackets": 0.96,
}


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


# --- sentences ----------------------------------------------------------------------------


def test_initials_are_not_sentences() -> None:
    assert _sentences("J. R. R. Tolkien wrote it.") == ["J. R. R. Tolkien wrote it."]
    assert _sentences("The poem is by T. S. Eliot. It appeared in 1922.") == [
        "The poem is by T. S. Eliot.",
        "It appeared in 1922.",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # abbreviations
        (
            "Samples were heated to approx. 80 degrees. None changed colour.",
            ["Samples were heated to approx. 80 degrees.", "None changed colour."],
        ),
        # quotes
        ('"Stop!" the guard shouted. The man ran.', ['"Stop!" the guard shouted.', "The man ran."]),
        # lists
        ("Kit:\n- a cable\n- a charger", ["Kit:", "- a cable", "- a charger"]),
        ("Steps:\n1. Unpack it.\n2. Run it.", ["Steps:", "1. Unpack it.", "2. Run it."]),
        # German and French
        (
            "Viele Tiere, z. B. Füchse, leben hier. Sie jagen.",
            ["Viele Tiere, z. B. Füchse, leben hier.", "Sie jagen."],
        ),
        ("M. Dupont est arrivé. Il a parlé.", ["M. Dupont est arrivé.", "Il a parlé."]),
        # Latin initials inside Chinese text
        (
            "建筑师Henry A. Walsh设计了教堂。它建于1890年。",
            ["建筑师Henry A. Walsh设计了教堂。", "它建于1890年。"],
        ),
    ],
)
def test_hard_cases_the_regex_got_wrong(text: str, expected: list[str]) -> None:
    assert _sentences(text) == expected


@pytest.mark.parametrize("category", CATEGORIES)
def test_boundary_f1_per_category(category: str) -> None:
    """The library splitter's boundary F1 on each category is at least the old regex's and
    at least what it was measured at (initials, lists, quotes, abbreviations and French or
    German text are where the regex failed; numbers, code, Chinese and ordinary text are
    where it must not lose)."""
    picked = [c for c in LABELLED if c[0] == category]
    new = boundary_scores(split_sentences, picked)[0][category]["f1"]
    old = boundary_scores(old_split, picked)[0][category]["f1"]
    assert new >= old
    assert new >= FLOOR[category]


def test_boundary_f1_overall_beats_the_regex() -> None:
    new = boundary_scores(split_sentences, LABELLED)[0]["all"]["f1"]
    old = boundary_scores(old_split, LABELLED)[0]["all"]["f1"]
    assert new >= 0.97 > old


@pytest.mark.parametrize("_cat,text", [(c, t) for c, t, _ in LABELLED][::7])
def test_spans_are_offsets_into_the_text(_cat: str, text: str) -> None:
    text = f"  {text}\n\n"
    spans = split_sentences(text)
    assert spans and all(0 <= s < e <= len(text) for s, e in spans)
    assert all(text[s:e] == text[s:e].strip() for s, e in spans)
    assert [s for s, _ in spans] == sorted(s for s, _ in spans)
    # nothing but whitespace between or around the spans
    covered = "".join(text[s:e] for s, e in spans)
    assert "".join(covered.split()) == "".join(text.split())


def test_chinese_sentences_unchanged() -> None:
    text = "长江是中国最长的河流。它发源于青藏高原！全长约六千三百公里？是的；很长。"
    assert split_sentences(text) == old_split(text)


def test_store_keeps_library_sentences(tmp_path: Path) -> None:
    from anygrain.corpus.store import CorpusStore

    doc = SourceDocument("d", "T", "J. R. R. Tolkien wrote it. He was born in 1892.")
    store = CorpusStore.build([doc], tmp_path / "c", progress=False)
    p = store.passage(0)
    assert [p.text[s:e] for s, e in p.sentences] == [
        "J. R. R. Tolkien wrote it.",
        "He was born in 1892.",
    ]


# --- languages ----------------------------------------------------------------------------

FR = [
    ("Chevaux", "Les chevaux galopaient dans les prairies près de la rivière, loin des villages."),
    ("Maison", "La maison de mes grands-parents se trouvait au bord de la mer, face aux îles."),
    ("Marché", "Le marché du samedi attire les habitants de toute la région depuis des siècles."),
]
DE = [
    ("Häuser", "Die alten Häuser der Stadt wurden im neunzehnten Jahrhundert aus Stein gebaut."),
    ("Kinder", "Die Kinder spielten jeden Nachmittag im großen Garten hinter der alten Schule."),
    ("Wald", "Im dichten Wald leben Füchse, Dachse und viele Vögel, die man selten sieht."),
]
EN = [
    ("Running", "The runners were running along the river every morning before they went to work."),
    ("Library", "The library opened in 1921 and within a decade it held a hundred thousand books."),
]
VI = [
    (
        "Hà Nội",
        "Hà Nội là thủ đô của Việt Nam, thành phố nằm bên bờ sông Hồng và có lịch sử hơn một nghìn năm.",
    ),
    (
        "Phở",
        "Phở là món ăn truyền thống của người Việt, thường được ăn vào buổi sáng cùng với rau thơm.",
    ),
]


def _docs(prefix: str, rows: list[tuple[str, str]]) -> list[SourceDocument]:
    return [SourceDocument(f"{prefix}{i}", t, x) for i, (t, x) in enumerate(rows)]


def _bm25(tmp_path: Path, docs: list[SourceDocument], name: str = "idx", **kw):  # type: ignore[no-untyped-def]
    return Index.build(docs, kind="bm25", out=tmp_path / name, progress=False, **kw)


def test_french_corpus_gets_the_french_stemmer(tmp_path: Path) -> None:
    idx = _bm25(tmp_path, _docs("fr", FR))
    s = idx.manifest["settings"]
    assert s["bm25"]["lang"] == "fr" and s["lang_detected"] is True
    assert s["analyzer"] == {"kind": "snowball", "lang": "fr", "stemming": True, "stopwords": True}
    # "cheval" is the singular of "chevaux": only French stemming joins them
    assert idx.search_one("cheval")[0].doc_id == "fr0"
    assert Index.load(tmp_path / "idx").search_one("cheval")[0].doc_id == "fr0"


def test_german_corpus_gets_the_german_stemmer(tmp_path: Path) -> None:
    idx = _bm25(tmp_path, _docs("de", DE))
    assert idx.manifest["settings"]["analyzer"]["lang"] == "de"
    assert idx.search_one("Haus")[0].doc_id == "de0"  # Häuser
    assert idx.search_one("Kind")[0].doc_id == "de1"  # Kinder


def test_mixed_corpus_analyses_each_document_in_its_language(tmp_path: Path) -> None:
    docs = _docs("en", EN) + _docs("fr", FR) + _docs("de", DE) + _docs("en", EN)[:0]
    idx = _bm25(tmp_path, docs)
    s = idx.manifest["settings"]
    assert s["analyzer"]["kind"] == "multi"
    assert set(s["languages"]) == {"en", "fr", "de"}
    assert {k: v["passages"] for k, v in s["languages"].items()} == {"fr": 3, "de": 3, "en": 2}
    assert idx.search_one("cheval")[0].doc_id == "fr0"
    assert idx.search_one("Häuser Haus")[0].doc_id == "de0"
    assert idx.search_one("run")[0].doc_id == "en0"  # English stemming: running -> run
    again = Index.load(tmp_path / "idx")
    for q in ("cheval", "Haus", "run", "books"):
        assert [h.doc_id for h in again.search_one(q)] == [h.doc_id for h in idx.search_one(q)]


def test_unsupported_language_warns_and_is_not_stemmed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="anygrain"):
        idx = _bm25(tmp_path, _docs("vi", VI))
    s = idx.manifest["settings"]
    assert s["bm25"]["lang"] == "vi"
    assert s["analyzer"] == {
        "kind": "snowball",
        "lang": "vi",
        "stemming": False,
        "stopwords": False,
    }
    warned = [r.getMessage() for r in caplog.records if "no stemmer for vi" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0]
    # never the English stemmer: an English-looking word stays whole
    assert idx.analyzer.tokenize(["running"]) == [["running"]]
    assert idx.search_one("thủ đô")[0].doc_id == "vi0"


def test_given_lang_is_used_and_checked(tmp_path: Path) -> None:
    idx = _bm25(tmp_path, _docs("fr", FR), lang="fr")
    assert idx.manifest["settings"]["lang_detected"] is False
    assert idx.search_one("cheval")[0].doc_id == "fr0"
    with pytest.raises(AnygrainError, match="unknown language 'xx'"):
        _bm25(tmp_path, _docs("fr", FR), name="bad", lang="xx")
    assert check_lang("FR") == "fr"


def test_one_line_says_which_analyser_each_language_got(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Index.build(_docs("en", EN) + _docs("fr", FR), kind="bm25", out=tmp_path / "i", progress=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "BM25 analyzers" in ln]
    assert len(lines) == 1
    assert "fr (3 passages): French Snowball stemmer" in lines[0]
    assert "en (2 passages): English Snowball stemmer" in lines[0]


def test_english_and_chinese_unchanged(tmp_path: Path) -> None:
    en = _bm25(tmp_path, _docs("en", EN), name="en")
    s = en.manifest["settings"]
    assert s["analyzer"] == EnglishAnalyzer().config() and s["bm25"]["lang"] == "en"
    text = EN[0][0] + "\n" + EN[0][1]
    assert en.analyzer.tokenize([text]) == EnglishAnalyzer().tokenize([text])
    zh_docs = [
        SourceDocument("a", "城市", "北京是中国的首都。"),
        SourceDocument("b", "城市", "上海是中国最大的城市，也有Python programmers。"),
    ]
    zh = _bm25(tmp_path, zh_docs, name="zh")
    assert zh.manifest["settings"]["analyzer"] == ChineseAnalyzer().config()
    assert zh.manifest["settings"]["bm25"]["lang"] == "zh"
    assert zh.search_one("中国的首都")[0].doc_id == "a"


def test_detection_per_document() -> None:
    assert detect_text_lang(FR[0][1]) == "fr"
    assert detect_text_lang(DE[0][1]) == "de"
    assert detect_text_lang(EN[0][1]) == "en"
    assert detect_text_lang("北京是中国的首都。") == "zh"
    assert detect_text_lang("ok 12") is None  # too short to tell


def test_plan_gives_undecided_documents_the_main_language(tmp_path: Path) -> None:
    from anygrain.corpus.store import CorpusStore

    docs = _docs("fr", FR) + [SourceDocument("short", "", "Oui.")]
    store = CorpusStore.build(docs, tmp_path / "c", progress=False)
    plan = plan_languages(store)
    assert plan.main == "fr" and plan.codes == ("fr",) and plan.passages == {"fr": 4}


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json").is_file(),
    reason="../shared/data/squad-v1.1 is absent",
)
def test_squad_contexts_are_one_language() -> None:
    data = json.loads(
        (Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json").read_text()
    )["data"]
    texts = [p["context"] for art in data[:10] for p in art["paragraphs"]]
    assert {detect_text_lang(t) for t in texts} <= {"en", None}


def test_sharded_bm25_plans_languages_once_and_equals_unsharded(tmp_path: Path) -> None:
    docs = _docs("en", EN) + _docs("fr", FR) + _docs("de", DE)
    one = _bm25(tmp_path, docs, name="one")
    three = Index.build(
        docs, kind="sharded", of="bm25", shards=3, out=tmp_path / "three", progress=False
    )
    for q in ("cheval", "Haus", "run", "books library"):
        assert [(h.passage_id, round(h.score, 5)) for h in three.search_one(q)] == [
            (h.passage_id, round(h.score, 5)) for h in one.search_one(q)
        ]
    assert three.search_one("cheval")[0].doc_id == "fr0"


def test_added_documents_get_their_own_language(tmp_path: Path) -> None:
    from anygrain.api import add_documents

    _bm25(tmp_path, _docs("en", EN))
    idx = add_documents(tmp_path / "idx", _docs("fr", FR), progress=False)
    s = idx.manifest["settings"]
    assert s["lang_detected"] is True
    assert set(s["languages"]) == {"en", "fr"}
    assert idx.search_one("cheval")[0].doc_id == "fr0"
