"""Answer matching (DPR has_answer, DensePhrases phrase match) and SQuAD / CMRC 2018 scores.

Expected values are worked out by hand from the official definitions.
"""

from __future__ import annotations

import unicodedata

import pytest

from anygrain.eval.answers import has_answer, phrase_match, regex_match, tokenize
from anygrain.eval.squad import exact_match, f1, mixed_segmentation, normalize_answer

CURATED = r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t|6,194-meter|20,?237\s*f(oo|ee)?t|6\,194 m"


# --- DPR string matching -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answers", "expected"),
    [
        ("The Cat sat on the mat.", ["cat"], True),  # uncased
        ("THE CAT", ["the cat"], True),
        ("A category of things", ["cat"], False),  # whole tokens only
        ("concatenate", ["cat"], False),
        ("the cats", ["cat"], False),
        ("He moved to New York City, in 1990.", ["new york city"], True),  # multi-token
        ("He moved to New York City, in 1990.", ["york new"], False),
        ("New York-based", ["new york"], True),  # '-' is its own token
        ("Paris, France", ["Paris France"], False),  # ',' must line up too
        ("Paris, France", ["paris, france"], True),
        ("the U.S. army", ["U.S."], True),
        ("the U.S. army", ["US"], False),
        ("It cost $1,000 in 1999", ["1,000"], True),
        ("It cost $1,000 in 1999", ["1000"], False),
        ("Beyoncé sang", ["beyonce"], False),  # DPR keeps accents (as combining marks)
        ("Beyonce\u0301 sang", ["Beyoncé"], True),  # composed vs decomposed: NFD
        ("Beyoncé sang", ["Beyonce\u0301"], True),
        ("ZÜRICH is big", ["zürich"], True),
        ("ΣΩΚΡΆΤΗΣ", ["σωκράτης"], True),  # non-Latin case folding
        ("Answer: 42!", ["42"], True),
        ("no answer here", [], False),
        ("anything at all", [""], False),  # empty answers never match
        ("anything at all", ["  ", "!!"], False),
        ("a cat", ["  ", "cat"], True),
    ],
)
def test_has_answer_strings(text: str, answers: list[str], expected: bool) -> None:
    assert has_answer(text, answers) is expected


def test_tokenizer_is_dpr_simple_tokenizer() -> None:
    expected = ["hello", ",", "world", "!", "it", "'", "s", "3", ".", "5"]
    assert tokenize("Hello, World! It's 3.5") == expected
    assert tokenize("café") == [unicodedata.normalize("NFD", "café")]
    assert tokenize("a\tb\n c\u00a0d") == ["a", "b", "c", "d"]


# --- DPR regex matching (CuratedTREC) --------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mount McKinley is 20,320 feet tall.", True),
        ("Mount McKinley is 20320 feet tall.", True),
        ("a 20,320-foot peak", True),
        ("20,400 FEET above sea level", True),  # IGNORECASE
        ("it rises to 6,194 m", True),
        ("Mount McKinley is 20,330 feet tall.", False),
        ("Mount McKinley is tall.", False),
    ],
)
def test_curated_regex_answers(text: str, expected: bool) -> None:
    assert has_answer(text, [CURATED], regex=True) is expected


def test_regex_search_is_unanchored_and_multiline() -> None:
    assert regex_match("first line\nAfter the Fall", r"^after the fall$")
    assert has_answer("see After the Fall.", ["After the Fall|Finishing the Play"], regex=True)


def test_invalid_regex_never_matches_and_does_not_stop_others() -> None:
    assert has_answer("(unclosed", ["(unclosed"], regex=True) is False
    assert regex_match("abc", "a[b") is False
    assert has_answer("a valid answer", ["(bad", "valid"], regex=True) is True


def test_regex_is_unicode_and_nfd() -> None:
    assert has_answer("Beyonce\u0301 Knowles", ["beyoncé"], regex=True)
    assert has_answer("Zürich", [r"z\w+ch"], regex=True)


# --- CJK ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer", "expected"),
    [
        ("北京是中国的首都。", "首都", True),
        ("北京是中国的首都。", "中国的首都", True),
        ("北京是中国的首都。", "首府", False),
        ("2008年北京奥运会", "北京奥运", True),
        ("2008年北京奥运会", "2008", True),  # digits next to Han characters
        ("2008年北京奥运会", "200", False),  # Latin/digit runs stay whole
        ("他买了iPhone手机", "iphone", True),
        ("他买了iPhone手机", "phone", False),
        ("東京ディズニーランドへ行く", "ディズニー", True),  # kana, with dakuten (NFD marks)
        ("東京ディズニーランドへ行く", "デイズニー", False),
    ],
)
def test_chinese_and_japanese_answers_match_by_character(
    text: str, answer: str, expected: bool
) -> None:
    assert has_answer(text, [answer]) is expected


def test_dpr_exact_rule_is_available_for_cjk() -> None:
    # DPR's tokenizer makes the whole clause one token, so the substring answer is missed.
    assert has_answer("北京是中国的首都", ["首都"], cjk_chars=False) is False
    assert has_answer("北京 是 中国 的 首都", ["首都"], cjk_chars=False) is True


# --- phrase match (DensePhrases) ----------------------------------------------------


def test_phrase_match_strings() -> None:
    assert phrase_match("The Eiffel Tower", ["eiffel tower"])
    assert phrase_match("Eiffel Tower.", ["the Eiffel Tower"])
    assert not phrase_match("Eiffel", ["Eiffel Tower"])
    assert not phrase_match("the Eiffel Tower in Paris", ["Eiffel Tower"])
    assert not phrase_match("anything", [])
    assert phrase_match("首都。", ["首都"])


def test_phrase_match_regex_is_anchored_at_start() -> None:
    assert phrase_match("20,320 feet", [CURATED], regex=True)
    assert phrase_match("20,320 feet tall", [CURATED], regex=True)  # re.match, not fullmatch
    assert not phrase_match("about 20,320 feet", [CURATED], regex=True)
    assert not phrase_match("x", ["(bad"], regex=True)


# --- SQuAD v1.1 ---------------------------------------------------------------------


def test_squad_normalisation() -> None:
    assert normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("U.S.A.") == "usa"


@pytest.mark.parametrize(
    ("pred", "golds", "em", "f1_value"),
    [
        ("The Eiffel Tower!", ["eiffel tower"], 1.0, 1.0),
        # "in paris france" vs "paris": overlap 1, P = 1/3, R = 1 -> F1 = 0.5
        ("in Paris, France", ["Paris"], 0.0, 0.5),
        # max over golds: vs "in paris" P = 1, R = 1/2 -> 2/3; vs "lyon" 0
        ("Paris", ["in Paris", "Lyon"], 0.0, 2 / 3),
        # "cat cat" vs "cat": clipped overlap 1, P = 1/2, R = 1 -> 2/3
        ("the cat, the cat", ["a cat"], 0.0, 2 / 3),
        # "cat sat mat" vs "cat on mat": overlap 2, P = R = 2/3 -> 2/3
        ("cat sat mat", ["cat on mat"], 0.0, 2 / 3),
        ("state-of-the-art", ["state of the art"], 0.0, 0.0),  # '-' is removed, not split
        ("", ["anything"], 0.0, 0.0),
        ("the", ["a"], 1.0, 0.0),  # both normalise to "": v1.1 F1 is 0
        ("Denver Broncos", ["Broncos", "Denver Broncos"], 1.0, 1.0),
    ],
)
def test_squad_em_f1(pred: str, golds: list[str], em: float, f1_value: float) -> None:
    assert exact_match(pred, golds) == em
    assert f1(pred, golds) == pytest.approx(f1_value)


def test_no_golds_scores_zero() -> None:
    assert exact_match("x", []) == 0.0
    assert f1("x", []) == 0.0


# --- CMRC 2018 (Chinese) -------------------------------------------------------------


def test_cmrc_mixed_segmentation() -> None:
    assert mixed_segmentation("我爱iPhone 6手机") == ["我", "爱", "iphone", "6", "手", "机"]
    assert mixed_segmentation("《红楼梦》", remove_punct=True) == ["红", "楼", "梦"]
    assert mixed_segmentation("约3,000元") == ["约", "3,000", "元"]


@pytest.mark.parametrize(
    ("pred", "golds", "em", "f1_value"),
    [
        ("北京天安门", ["天安门广场"], 0.0, 0.6),  # LCS 3 of 5 and 5 -> 0.6
        ("天安门", ["天安门广场"], 0.0, 0.75),  # P = 1, R = 3/5 -> 0.75
        ("门安天", ["天安门"], 0.0, 1 / 3),  # longest common *substring* is 1, not a bag
        ("北京。", ["北京"], 1.0, 1.0),  # CJK punctuation removed
        ("《红楼梦》", ["红楼梦"], 1.0, 1.0),
        ("苹果iPhone 6", ["iPhone 6手机"], 0.0, 0.5),  # 苹,果,iphone,6 vs iphone,6,手,机
        ("1949年", ["1949年", "一九四九年"], 1.0, 1.0),
        ("上海", ["北京", "南京"], 0.0, 0.0),
    ],
)
def test_cmrc_em_f1(pred: str, golds: list[str], em: float, f1_value: float) -> None:
    assert exact_match(pred, golds) == em
    assert f1(pred, golds) == pytest.approx(f1_value)


def test_cmrc_punctuation_list_is_the_official_one() -> None:
    # The official script's list has CJK punctuation and "-:_*^/\~`+=" but not "." or ",".
    assert exact_match("北京-", ["北京"]) == 1.0
    assert exact_match("北京.", ["北京"]) == 0.0


def test_language_is_picked_from_the_golds_and_can_be_forced() -> None:
    # Latin-only gold: SQuAD rules, where "6手机" is one whitespace token -> P = R = 1/2.
    assert f1("iPhone 6手机", ["iPhone 6"]) == pytest.approx(0.5)
    # CMRC rules: iphone,6,手,机 vs iphone,6 -> P = 1/2, R = 1 -> 2/3.
    assert f1("iPhone 6手机", ["iPhone 6"], lang="zh") == pytest.approx(2 / 3)
    assert exact_match("The answer", ["answer"], lang="zh") == 0.0
    assert exact_match("The answer", ["answer"]) == 1.0
    with pytest.raises(ValueError, match="lang"):
        f1("a", ["a"], lang="fr")
