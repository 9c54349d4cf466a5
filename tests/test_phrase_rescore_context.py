"""Re-scoring a window of each passage (``rescore_context``, issue 37's server lever).

With a context of ``C`` characters a search re-encodes only the slice of each re-scored
passage within ``C`` of its best first-stage phrase (no word cut): the tokens re-scored are
that slice's, with the vectors the model gives the slice (title before it), in the whole
passage's characters.  A context covering the passage must give exactly the whole-passage
search; a PQ build records the default context; a refilter keeps or overrides it; the CLI
takes it and refuses a bad one in one line.  Encoding with weights cast to bfloat16 once
(what re-scoring runs) must agree with autocast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_phrase_helpers import (
    RESCORE_QUESTIONS,
    compressed_copy,
    fixture_index,
    float32_index,
)

from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase import rescore as rescore_module
from anygrain.phrase.refilter import refilter
from anygrain.phrase.rescore import context_window, encode_rows
from anygrain.phrase.rescore_settings import RESCORE_CONTEXT_RANGE

pytestmark = pytest.mark.usefixtures("torch_one_thread")

QUESTIONS = RESCORE_QUESTIONS


def test_context_window_never_cuts_a_word() -> None:
    text = "alpha beta gamma delta"
    gamma = (11, 16)
    assert context_window(text, gamma, 0) == gamma
    assert context_window(text, gamma, 3) == (6, 22)  # "beta" and "delta" whole
    assert context_window(text, gamma, 6) == (5, 22)  # the space after "alpha"
    assert context_window(text, gamma, 7) == (0, 22)  # "alpha" reached at its last letter
    assert context_window(text, gamma, 1000) == (0, len(text))
    assert context_window(text, (0, 5), 1) == (0, 6)  # a space is no word to widen to
    zh = "北京是中国的首都。"
    assert context_window(zh, (3, 5), 1) == (2, 6)  # each character a word
    for lo, hi in (context_window(text, (a, a + 1), c) for a in range(22) for c in range(8)):
        assert lo == 0 or " " in text[lo - 1 : lo + 1]
        assert hi == len(text) or " " in text[hi - 1 : hi + 1]


def test_context_range_is_checked() -> None:
    assert RESCORE_CONTEXT_RANGE.check(0) == 0
    for bad in (-1, 2.5, 10**7):
        with pytest.raises(AnygrainError, match="rescore context"):
            RESCORE_CONTEXT_RANGE.check(bad)


@pytest.fixture(scope="module")
def built(
    model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PhraseIndex]:
    """An uncompressed index (float32-encoded dump) and a PQ copy at its threshold recording
    the default re-scoring."""
    root = tmp_path_factory.mktemp("rescore-context")
    none = float32_index(squad, model_dir, root / "none")
    return {"none": none, "pq": compressed_copy(none, root / "pq", "pq")}


def _hits(index: PhraseIndex, **options: Any) -> list[list[tuple[Any, ...]]]:
    return [
        [(h.passage_row, h.span, round(h.score, 5), h.text) for h in hs]
        for hs in index.search(QUESTIONS, 5, **options)
    ]


def _windows_seen(
    index: PhraseIndex, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[list[dict[int, tuple[int, int]] | None], list[Any]]:
    """The windows each search asked to re-encode (one search per question) and the hits."""
    seen: list[dict[int, tuple[int, int]] | None] = []
    real = rescore_module.encode_rows

    def spy(idx: Any, rows: Any, **kw: Any) -> Any:
        around, context = kw.get("around"), kw.get("context")
        if around and context:
            texts = dict(zip(around, idx.store.texts(list(around)), strict=True))
            seen.append({r: context_window(texts[r], a, context) for r, a in around.items()})
        else:
            seen.append(None)
        return real(idx, rows, **kw)

    monkeypatch.setattr(rescore_module, "encode_rows", spy)
    hits = [index.search([q], 5, **options)[0] for q in QUESTIONS]
    monkeypatch.setattr(rescore_module, "encode_rows", real)
    return seen, hits


def test_a_pq_build_re_scores_whole_passages_unless_asked(
    built: dict[str, PhraseIndex], tmp_path: Path
) -> None:
    pq = built["pq"]
    assert pq.rescore and pq.manifest["settings"].get("rescore_context") is None
    assert pq.rescoring.window is None and built["none"].rescoring.window is None
    compressed_copy(built["none"], tmp_path / "c60", "pq", rescore_context=60)
    again = Index.load(tmp_path / "c60")
    assert isinstance(again, PhraseIndex) and again.rescoring.window == 60


@pytest.mark.parametrize("unit", [Unit.PHRASE, Unit.PASSAGE])
def test_a_context_covering_the_passage_is_the_whole_passage(
    built: dict[str, PhraseIndex], unit: Unit
) -> None:
    pq = built["pq"]
    whole = _hits(pq, unit=unit, rescore=2, rescore_context=0)
    assert any(whole)
    assert _hits(pq, unit=unit, rescore=2, rescore_context=100_000) == whole
    # and a small context is another search (else the windows would not be cut at all)
    assert _hits(pq, unit=unit, rescore=2, rescore_context=5) != whole


@pytest.mark.parametrize("tokens", ["stored", "all"])
def test_re_scored_spans_lie_in_their_windows(
    built: dict[str, PhraseIndex], monkeypatch: pytest.MonkeyPatch, tokens: str
) -> None:
    pq = built["pq"]
    seen, hits = _windows_seen(pq, monkeypatch, rescore=1, rescore_context=8, rescore_tokens=tokens)
    assert len(seen) == len(QUESTIONS) and all(w for w in seen)
    texts = pq.store.texts(list(range(len(pq.corpus))))
    cut = 0
    for windows, hs in zip(seen, hits, strict=True):
        assert windows is not None and len(windows) == 1
        ((row, (lo, hi)),) = windows.items()
        cut += hi - lo < len(texts[row])
        first = hs[0]  # the re-scored passage's hits come first
        assert first.passage_row == row
        a, b = first.span
        assert lo <= a < b <= hi
        assert first.text == texts[row]  # spans in the whole passage's characters
        phrase = first.answer_text
        assert phrase and phrase == phrase.strip() and phrase in texts[row][lo:hi]
    assert cut  # some windows were cut


def test_windowed_vectors_are_the_slices_encoding(built: dict[str, PhraseIndex]) -> None:
    pq = built["pq"]
    text = pq.store.texts([0])[0]
    span = (len(text) // 3, len(text) // 3 + 1)
    lo, hi = context_window(text, span, 10)
    assert lo > 0 or hi < len(text)
    ex = encode_rows(pq, np.asarray([0]), tokens="all", around={0: span}, context=10, bf16=False)
    model = pq.model
    enc = model.encode_passages([text[lo:hi]], pq.store.titles([0]), bf16=False)[0]
    t = ex.table
    assert np.array_equal(t.cs, enc.cs + lo) and np.array_equal(t.ce, enc.ce + lo)
    np.testing.assert_allclose(
        t.start.astype(np.float32), enc.start.astype(np.float16).astype(np.float32), atol=0
    )
    # word numbers are the whole passage's
    words = text.split()
    first_word = len(text[:lo].split())
    assert int(t.wfirst[0]) == first_word and text[t.cs[0] : t.ce[0]] in words[first_word]


def test_refilter_keeps_or_overrides_the_context(
    built: dict[str, PhraseIndex], tmp_path: Path
) -> None:
    pq = built["pq"]
    none = built["none"]
    tau = float(none.manifest["settings"]["threshold"])
    wide = compressed_copy(none, tmp_path / "wide", "pq", rescore_context=40)
    whole = compressed_copy(none, tmp_path / "whole", "pq", rescore_context=0)
    assert whole.manifest["settings"]["rescore_context"] == 0 and whole.rescoring.window is None
    assert wide.rescoring.window == 40
    # the recorded context is the search default
    assert _hits(whole) == _hits(pq)
    assert _hits(wide) == _hits(pq, rescore_context=40) != _hits(pq)
    with pytest.raises(AnygrainError, match="rescore context"):
        refilter(none, tmp_path / "bad", tau, compress="pq", rescore_context=-3)


def test_cli_takes_rescore_context(built: dict[str, PhraseIndex]) -> None:
    from typer.testing import CliRunner

    from anygrain.cli.main import app

    path = str(built["pq"].path)
    r = CliRunner().invoke(
        app, ["search", path, "Who created Python?", "--rescore-context", "0", "--json"]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["search", path, "Who created Python?", "--rescore-context", "-1"])
    assert r.exit_code == 2 and "rescore context" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_weights_cast_once_agree_with_autocast(built: dict[str, PhraseIndex]) -> None:
    model = built["none"].model
    texts = built["none"].store.texts([0, 1, 2])
    auto = model.encode_passages(texts, bf16=True)
    once = model.encode_passages(texts, bf16=True, cast_once=True)
    fp32 = model.encode_passages(texts)
    for a, o, f in zip(auto, once, fp32, strict=True):
        assert np.array_equal(a.cs, o.cs)

        def cos(x: np.ndarray, y: np.ndarray) -> float:
            return float((x * y).sum() / np.linalg.norm(x) / np.linalg.norm(y))

        assert cos(o.start, f.start) > 0.999 and cos(o.end, f.end) > 0.999
        assert cos(a.start, o.start) > 0.999
    # the copy is made again once the weights change
    first = model.bf16_passages()
    assert model.bf16_passages() is first
    with torch.no_grad():
        model.start_head.weight.add_(0.0)
    assert model.bf16_passages() is not first


def test_a_recorded_context_survives_add_delete_compact_and_verify(
    model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    from anygrain.api import add_documents, compact_index, delete_documents, verify_index
    from anygrain.corpus.records import SourceDocument

    idx = fixture_index(squad, model_dir, tmp_path / "work", compress="pq", rescore_context=40)
    work = idx.path
    assert idx.rescoring.window == 40 and idx.manifest["settings"]["build"]["rescore_context"] == 40
    assert verify_index(work).problems == []
    new = [SourceDocument("new0", "Rust", "Rust was first released in 2015 by Mozilla.")]
    added = add_documents(work, new, progress=False)
    assert isinstance(added, PhraseIndex) and added.rescoring.window == 40
    hits = added.search(["When was Rust first released?"], 3)[0]
    assert hits and all(h.span is not None for h in hits)
    delete_documents(work, ["new0"])
    assert all(h.doc_id != "new0" for hs in Index.load(work).search(QUESTIONS, 5) for h in hs)
    compacted = compact_index(work, progress=False)
    assert isinstance(compacted, PhraseIndex) and compacted.rescoring.window == 40
    assert verify_index(work).problems == []
    assert _hits(compacted) == _hits(compacted, rescore_context=40)
