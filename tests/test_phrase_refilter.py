"""Refiltering a phrase index (a higher filter threshold from stored vectors) against a fresh build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from test_phrase_helpers import make_tiny_model
from typer.testing import CliRunner

from anygrain.api import evaluate_index, load_questions
from anygrain.cli.index import refilter_cmd
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.filtering import refiltered_flags
from anygrain.phrase.refilter import refilter, threshold_for_fraction

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    with torch.no_grad():  # a filter that separates tokens, so thresholds bite
        m.filter.weight.normal_(0.0, 0.5)
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


@pytest.fixture(scope="module")
def full(model_dir: Path, squad: Path, tmp_path_factory: pytest.TempPathFactory) -> PhraseIndex:
    out = tmp_path_factory.mktemp("idx") / "full"
    idx = PhraseIndex.build_from(
        f"squad:{squad}", out, model=model_dir, progress=False, compress="none", keep=1.0
    )
    return idx


def test_flags_keep_a_side_only_where_it_was_allowed_and_passes() -> None:
    flags = np.array([1, 2, 3, 3, 1], dtype=np.int32)
    logits = np.array([[0.5, 9], [9, 0.5], [0.5, -1], [-1, -1], [-1, 9]], dtype=np.float16)
    assert refiltered_flags(flags, logits, 0.0).tolist() == [1, 2, 1, 0, 0]


def test_refilter_equals_a_fresh_build_at_that_threshold(
    full: PhraseIndex, model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    tau = threshold_for_fraction(full, 0.5)
    fresh = PhraseIndex.build_from(
        f"squad:{squad}", tmp_path / "fresh", model=model_dir, threshold=tau, compress="none"
    )
    sub = refilter(full, tmp_path / "sub", tau, progress=False)
    assert 0 < len(sub.table) < len(full.table)
    for name in ("tokens", "start", "end", "filter", "passage_ptr", "start_ids", "end_ids"):
        a = np.load(fresh.path / "phrase" / f"{name}.npy")
        b = np.load(sub.path / "phrase" / f"{name}.npy")
        np.testing.assert_array_equal(a, b, err_msg=name)
    for key in ("tokens_kept", "start_vectors", "end_vectors", "tokens_seen", "passages"):
        assert sub.manifest["counts"][key] == fresh.manifest["counts"][key], key
    assert sub.manifest["settings"]["threshold"] == pytest.approx(tau)
    qs = load_questions(f"squad:{squad}")
    for scope in ("corpus", "gold-passage"):
        a = evaluate_index(fresh, qs, k=5, scope=scope, progress=False).metrics
        b = evaluate_index(sub, qs, k=5, scope=scope, progress=False).metrics
        assert a == b
    # It reopens from disk, with the source's corpus and model.
    again = Index.load(sub.path)
    assert isinstance(again, PhraseIndex) and len(again.corpus) == len(full.corpus)


def test_a_build_with_keep_equals_refiltering_at_that_fraction(
    full: PhraseIndex, model_dir: Path, squad: Path, tmp_path: Path
) -> None:
    """``keep=`` at build time finds tau from the dump's own logits, as refilter does."""
    tau = threshold_for_fraction(full, 0.4)
    kept = PhraseIndex.build_from(
        f"squad:{squad}", tmp_path / "kept", model=model_dir, keep=0.4, compress="none"
    )
    sub = refilter(full, tmp_path / "sub", tau, progress=False)
    for name in ("tokens", "start", "end", "filter", "passage_ptr", "start_ids", "end_ids"):
        a = np.load(kept.path / "phrase" / f"{name}.npy")
        b = np.load(sub.path / "phrase" / f"{name}.npy")
        np.testing.assert_array_equal(a, b, err_msg=name)
    s = kept.manifest["settings"]
    assert s["threshold"] == pytest.approx(tau) and s["keep"] == 0.4
    assert kept.manifest["counts"]["tokens_kept"] == sub.manifest["counts"]["tokens_kept"]
    assert not (tmp_path / "kept" / "phrase" / "kept").exists()
    with pytest.raises(AnygrainError, match="not both"):
        PhraseIndex.build_from(
            f"squad:{squad}", tmp_path / "x", model=model_dir, keep=0.4, threshold=0.0
        )
    with pytest.raises(AnygrainError, match="keep must be"):
        PhraseIndex.build_from(f"squad:{squad}", tmp_path / "y", model=model_dir, keep=1.5)


def test_keep_fraction_is_close_to_what_is_kept(full: PhraseIndex, tmp_path: Path) -> None:
    n = full.manifest["counts"]["start_vectors"] + full.manifest["counts"]["end_vectors"]
    sub = refilter(full, tmp_path / "q", threshold_for_fraction(full, 0.3), progress=False)
    got = sub.manifest["counts"]["start_vectors"] + sub.manifest["counts"]["end_vectors"]
    assert abs(got / n - 0.3) < 0.05
    with pytest.raises(AnygrainError, match="keep fraction"):
        threshold_for_fraction(full, 0.0)


def test_refilter_refuses_a_lower_threshold_and_its_own_directory(
    full: PhraseIndex, tmp_path: Path
) -> None:
    tau = threshold_for_fraction(full, 0.5)
    sub = refilter(full, tmp_path / "sub", tau, progress=False)
    with pytest.raises(AnygrainError, match="never stored"):
        refilter(sub, tmp_path / "lower", tau - 1.0, progress=False)
    with pytest.raises(AnygrainError, match="another --out"):
        refilter(full, full.path, tau, progress=False)


def test_cli_refilter(full: PhraseIndex, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("refilter")(refilter_cmd)
    app.command("other")(lambda: None)  # two commands, so typer keeps the command name
    runner = CliRunner()
    r = runner.invoke(
        app, ["refilter", str(full.path), "--out", str(tmp_path / "k"), "--keep", "0.5", "-q"]
    )
    assert r.exit_code == 0, r.output
    assert "vectors per passage" in r.output
    r = runner.invoke(app, ["refilter", str(full.path), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--threshold or --keep" in r.output
