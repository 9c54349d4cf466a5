"""The index kinds' option groups of the command line (anygrain.cli.kind_options) name the
build settings they set, so ``anygrain index`` hands them on unchanged; and each option is
declared once, whichever commands take it."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import typer

from anygrain.cli import common
from anygrain.cli.kind_options import (
    SEARCH_HELP,
    Bm25Options,
    EncodingOptions,
    FusionOptions,
    PhraseOptions,
    RayOptions,
)
from anygrain.composite.hybrid import HybridSettings
from anygrain.dense.index import DenseSettings
from anygrain.index.settings import SHARED_OPTIONS, IndexSettings
from anygrain.phrase.build import PhraseSettings
from anygrain.sparse.bm25 import Bm25Settings


def _names(group: type) -> set[str]:
    return {f.name for f in dataclasses.fields(group)}


@pytest.mark.parametrize(
    ("group", "settings"),
    [
        (FusionOptions, [HybridSettings]),
        (Bm25Options, [Bm25Settings, HybridSettings]),
        (PhraseOptions, [PhraseSettings]),
    ],
)
def test_each_group_names_its_kinds_settings(
    group: type, settings: list[type[IndexSettings]]
) -> None:
    for cls in settings:
        assert _names(group) <= set(cls.option_names()), cls


def test_encoding_options_are_settings_of_the_encoding_kinds_or_shared() -> None:
    shared = set(SHARED_OPTIONS)
    for name in _names(EncodingOptions):
        takers = [
            c for c in (DenseSettings, HybridSettings, PhraseSettings) if name in c.option_names()
        ]
        assert takers or name in shared, name
    assert "lang" in Bm25Settings.option_names()


def test_ray_options_are_what_the_ray_executor_takes() -> None:
    import inspect

    from anygrain.api import ray_executor

    assert _names(RayOptions) <= set(inspect.signature(ray_executor).parameters)


def test_no_option_is_declared_twice() -> None:
    groups = (EncodingOptions, FusionOptions, Bm25Options, PhraseOptions, RayOptions)
    flags = Counter(common.option_name(g, n) for g in groups for n in _names(g))
    assert [f for f, n in flags.items() if n > 1] == []
    assert set(SEARCH_HELP) <= _names(FusionOptions) | _names(PhraseOptions)


def test_option_names_and_given_options() -> None:
    assert common.option_name(PhraseOptions, "keep_dump") == "--keep-dump/--no-keep-dump"
    assert common.option_name(PhraseOptions, "pq_m") == "--pq-m"
    assert common.option_name(Bm25Options, "k1") == "--bm25-k1"
    given = common.given_options(EncodingOptions, {"split": "auto", "lang": "zh", "model": None})
    assert given == {"lang": "zh"}


def test_help_and_default_overrides_and_lead() -> None:
    """A command gives an option its own help and default; the generated options follow
    its first ``lead`` parameters; stacked groups keep the order they are written in."""
    from typer.testing import CliRunner

    got: dict[str, object] = {}
    app = typer.Typer()

    @app.command()
    @common.config_options(RayOptions, ("workers",), lead=1, helps={"workers": "How many"})
    @common.config_options(Bm25Options, ("k1",), lead=1, defaults={"k1": 1.2})
    def cmd(first: int = 0, last: int = 0, **settings: object) -> None:
        got.update(settings, first=first, last=last)

    r = CliRunner().invoke(app, ["--first", "1", "--workers", "3"])
    assert r.exit_code == 0, r.output
    assert got == {"first": 1, "last": 0, "workers": 3, "k1": 1.2}
    help_ = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    order = [help_.index(f) for f in ("--first", "--workers", "--bm25-k1", "--last")]
    assert order == sorted(order)
    assert "How many" in help_ and "1.2" in help_


def test_the_groups_of_any_kind_are_what_the_api_takes() -> None:
    from anygrain.api import READ_OPTIONS
    from anygrain.cli.kind_options import AnswerOptions, RecordFieldOptions
    from anygrain.corpus.fields import FIELD_OPTIONS

    assert _names(AnswerOptions) == set(READ_OPTIONS)
    assert _names(RecordFieldOptions) == set(FIELD_OPTIONS)
    groups = (EncodingOptions, PhraseOptions, AnswerOptions, RecordFieldOptions)
    flags = Counter(common.option_name(g, n) for g in groups for n in _names(g))
    assert [f for f, n in flags.items() if n > 1] == []
