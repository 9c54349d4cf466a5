from __future__ import annotations

import pytest

from anygrain.corpus.records import SourceDocument
from anygrain.corpus.sentences import split_sentences
from anygrain.corpus.splitters import (
    SplitSpec,
    split_chars,
    split_document,
    split_paragraphs,
    split_words,
)
from anygrain.errors import AnygrainError


def test_parse() -> None:
    assert str(SplitSpec.parse("w100")) == "w100"
    assert str(SplitSpec.parse("chars:350")) == "chars:350"
    assert str(SplitSpec.parse(None)) == "auto"
    with pytest.raises(AnygrainError, match="unknown split"):
        SplitSpec.parse("w0")


def test_paragraphs_keep_offsets() -> None:
    text = "  First para.\nstill first.\n\n\nSecond para. \n \nThird"
    spans = split_paragraphs(text)
    assert [text[s.start : s.end] for s in spans] == [
        "First para.\nstill first.",
        "Second para.",
        "Third",
    ]
    single = "a\nb\n\nc"
    assert [single[s.start : s.end] for s in split_paragraphs(single)] == ["a\nb", "c"]
    lines = "a\nb\nc"
    assert [lines[s.start : s.end] for s in split_paragraphs(lines)] == ["a", "b", "c"]


def test_w100_blocks_are_disjoint_and_complete() -> None:
    words = [f"w{i}" for i in range(250)]
    text = "  " + "  ".join(words)
    spans = split_words(text, 100)
    assert len(spans) == 3
    got = [text[s.start : s.end].split() for s in spans]
    assert got[0] == words[:100] and got[1] == words[100:200] and got[2] == words[200:]


def test_chars_are_cjk_aware() -> None:
    zh = "北京是中国的首都。上海是最大的城市。" * 3
    spans = split_chars(zh, 10)
    assert all(s.end - s.start <= 10 for s in spans)
    assert "".join(zh[s.start : s.end] for s in spans) == zh
    mixed = "深度学习 transformer模型 retrieval"
    for s in split_chars(mixed, 6):
        piece = mixed[s.start : s.end]
        # Latin words are never cut in the middle.
        assert not (
            s.end < len(mixed)
            and mixed[s.end - 1].isascii()
            and mixed[s.end - 1].isalpha()
            and mixed[s.end].isascii()
            and mixed[s.end].isalpha()
        ), piece


def test_document_split_ids_and_titles() -> None:
    doc = SourceDocument("doc", "Title", "one two three four five")
    spans = list(split_document(doc, SplitSpec.parse("w2")))
    assert [s.id for s in spans] == ["doc_0", "doc_1", "doc_2"]


def test_sentences() -> None:
    t = "Dr. Smith went home. He slept! Did he? Yes."
    assert [t[a:b] for a, b in split_sentences(t)] == [
        "Dr. Smith went home.",
        "He slept!",
        "Did he?",
        "Yes.",
    ]
    z = "北京是首都。上海很大！对吗？"
    assert [z[a:b] for a, b in split_sentences(z)] == ["北京是首都。", "上海很大！", "对吗？"]
