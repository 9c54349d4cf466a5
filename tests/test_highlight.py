"""anygrain.hits.highlight: the answer in its passage, shared by the CLI and the server."""

from __future__ import annotations

from anygrain.hits.highlight import Highlight, highlight, phrase_context
from anygrain.hits.hit import Hit, Unit

TEXT = "Python was created by Guido van Rossum and first released in 1991."


def hit(span: tuple[int, int] | None, unit: Unit = Unit.PHRASE, text: str = TEXT) -> Hit:
    return Hit(unit, 1.0, 0, "p0", "d0", "Python", text, span)


def test_whole_passage_split_around_the_answer() -> None:
    s = TEXT.index("Guido van Rossum")
    h = highlight(hit((s, s + len("Guido van Rossum"))))
    assert h == Highlight(
        "Python was created by ", "Guido van Rossum", " and first released in 1991."
    )
    assert h.before + h.answer + h.after == TEXT


def test_window_cut_with_ellipses() -> None:
    s = TEXT.index("Guido")
    h = highlight(hit((s, s + 5)), width=6)
    assert h == Highlight("…ed by ", "Guido", " van R…")
    # no ellipsis where the window reaches the passage's ends
    h = highlight(hit((0, 6)), width=100)
    assert h == Highlight("", "Python", TEXT[6:])


def test_hits_without_span_have_no_answer() -> None:
    assert highlight(hit(None, Unit.PASSAGE)) == Highlight(TEXT, "", "")
    assert highlight(hit(None, Unit.DOCUMENT), width=5) == Highlight(TEXT[:10] + "…", "", "")


def test_a_hit_gives_its_phrase_context() -> None:
    # the CLI calls Hit.context (it imports no library function): the same as phrase_context
    s = TEXT.index("1991")
    assert phrase_context(hit((s, s + 4)), width=8) == ("…ased in ", "1991", ".")
    assert hit((s, s + 4)).context(width=8) == phrase_context(hit((s, s + 4)), width=8)
    assert hit(None, Unit.PASSAGE).context() == phrase_context(hit(None, Unit.PASSAGE))
    assert phrase_context(hit(None, Unit.PASSAGE), width=5) == ("", TEXT[:10], "")
