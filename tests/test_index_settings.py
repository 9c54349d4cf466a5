"""Index kinds' typed build settings and per-kind defaults: unknown options refused per
kind (API and CLI), values validated, settings saved in index.json and rebuilt on open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.errors import AnygrainError, UsageError
from anygrain.hits.hit import Unit
from anygrain.index.base import PASSAGE_METRICS, Index
from anygrain.index.manifest import MANIFEST
from anygrain.index.registry import IndexKind, index_class
from anygrain.index.scope import Scope

DOCS = [
    SourceDocument("d0", "Cats", "The cat sat on the mat."),
    SourceDocument("d1", "Dogs", "A dog chased the cat across the garden."),
]


@pytest.mark.parametrize(
    ("kind", "option", "takes"),
    [
        ("bm25", "threshold", "k1"),
        ("bm25", "model", "stemming"),
        ("dense", "threshold", "shard_size"),
        ("dense", "k1", "factory"),
        ("phrase", "k1", "threshold"),
        ("phrase", "modle", "model"),  # a misspelt option
        ("hybrid", "threshold", "fusion"),
    ],
)
def test_an_option_the_kind_does_not_take_is_refused(
    tmp_path: Path, kind: str, option: str, takes: str
) -> None:
    out = tmp_path / "idx"
    with pytest.raises(UsageError) as e:
        Index.build(DOCS, kind=kind, out=out, progress=False, **{option: 1})
    msg = str(e.value)
    assert f"index kind '{kind}' does not take the option '{option}'" in msg
    assert takes in msg and "overwrite" in msg  # what it takes, its own and the shared
    assert not out.exists()  # refused before anything is written


def test_every_unknown_option_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="options 'nprobe', 'colour'"):
        Index.build(DOCS, kind="bm25", out=tmp_path / "i", nprobe=4, colour="red")


@pytest.mark.parametrize(
    ("kind", "options", "match"),
    [
        ("bm25", {"method": "nope"}, "unknown BM25 method"),
        ("bm25", {"b": 2.0}, "BM25 b must be a finite number from 0 to 1"),
        ("bm25", {"lang": "xx"}, "unknown language 'xx'"),  # fr, de, ...: analysers
        ("dense", {"dtype": "int8"}, "unknown vector dtype"),
        ("dense", {"batch_size": 0}, "at least 1"),
        ("phrase", {"compress": "zip"}, "unknown compress 'zip'"),
        ("phrase", {"pq_m": 0}, "pq_m must be at least 1"),
        ("hybrid", {"depth": 0}, "fusion depth must be at least 1"),
        ("hybrid", {"fusion": "best"}, "unknown fusionmethod"),
    ],
)
def test_settings_are_validated_before_building(
    tmp_path: Path, kind: str, options: dict, match: str
) -> None:
    out = tmp_path / "idx"
    with pytest.raises(AnygrainError, match=match):
        Index.build(DOCS, kind=kind, out=out, progress=False, **options)
    assert not out.exists()


def test_names_become_enums() -> None:
    from anygrain.composite.fusion import FusionConfig, FusionMethod
    from anygrain.composite.hybrid import HybridSettings
    from anygrain.phrase.build import PhraseSettings
    from anygrain.phrase.compress import Compress

    assert PhraseSettings(compress="sq8").compress is Compress.SQ8  # type: ignore[arg-type]
    rrf = FusionConfig("rrf")  # type: ignore[arg-type]
    assert HybridSettings(fusion=rrf).fusion.method is FusionMethod.RRF
    flat = HybridSettings.from_options("hybrid", {"fusion": "rrf"})
    assert flat.fusion.method is FusionMethod.RRF


@pytest.mark.parametrize("kind", list(IndexKind))
def test_settings_round_trip_through_json(kind: IndexKind) -> None:
    cls = index_class(kind).settings_type
    default = cls()
    assert cls.from_dict(json.loads(json.dumps(default.to_dict()))) == default
    # a key a newer anygrain wrote is left out, not a reason to refuse the index
    assert cls.from_dict({**default.to_dict(), "from_the_future": 1}) == default


def test_settings_are_saved_in_index_json_and_rebuilt_on_open(tmp_path: Path) -> None:
    from anygrain.sparse.bm25 import Bm25Settings

    out = tmp_path / "idx"
    built = Index.build(DOCS, kind="bm25", out=out, progress=False, lang="en", k1=1.2, b=0.5)
    want = Bm25Settings(lang="en", k1=1.2, b=0.5)
    assert built.build_settings == want
    m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert m["settings"]["build"] == {
        "lang": "en",
        "k1": 1.2,
        "b": 0.5,
        "include_title": True,
        "stemming": True,
        "method": "lucene",
    }
    assert m["settings"]["bm25"]["k1"] == 1.2  # the fields older code reads stay
    assert Index.load(out).build_settings == want
    # an index from before build settings were recorded still opens, without them
    del m["settings"]["build"]
    (out / MANIFEST).write_text(json.dumps(m), encoding="utf-8")
    assert Index.load(out).build_settings is None


def test_cli_refuses_an_option_the_kind_does_not_take(squad_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["--kind", "bm25", "--faiss", "Flat"], "index kind 'bm25' does not take the option 'factory'"),
        (["--kind", "bm25", "--model", "minilm"], "index kind 'bm25' does not take the option 'model'"),
        (["--kind", "dense", "--threshold", "0.5"], "index kind 'dense' does not take the option 'threshold'"),
        (["--kind", "bm25", "--compress", "sq8"], "index kind 'bm25' does not take the option 'compress';"),
    ]  # fmt: skip
    for args, message in cases:
        out = tmp_path / "x"
        r = runner.invoke(app, ["index", str(squad_file), "--out", str(out), "-q", *args])
        assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
        assert not out.exists()


def test_each_kind_declares_its_defaults() -> None:
    passage = (Unit.PASSAGE,)
    for kind in (IndexKind.BM25, IndexKind.DENSE, IndexKind.HYBRID):
        cls = index_class(kind)
        assert cls.units == passage and cls.default_unit is Unit.PASSAGE
        assert not cls.cuts_units()
        assert cls.default_metrics(None, Unit.PASSAGE) == list(PASSAGE_METRICS)
        assert cls.scopes == (Scope.CORPUS, Scope.GOLD_PASSAGE)
    phrase = index_class(IndexKind.PHRASE)
    assert phrase.units[0] is phrase.default_unit is Unit.PHRASE and phrase.cuts_units()
    assert set(phrase.units) == set(Unit) - {Unit.ANSWER}  # a reader answers from any kind
    assert phrase.default_metrics(None, Unit.PHRASE) == ["em", "f1", "top@1", "top@10"]
    # one default set for passage-grain results, whatever the kind
    for unit in (Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT):
        assert phrase.default_metrics(5, unit) == list(PASSAGE_METRICS)
    assert [k for k in IndexKind if index_class(k).takes_query_model] == [
        IndexKind.DENSE,
        IndexKind.PHRASE,
    ]


def test_a_passage_index_refuses_other_units(tmp_path: Path) -> None:
    idx = Index.build(DOCS, kind="bm25", out=tmp_path / "i", progress=False)
    assert idx.check_unit(None) is Unit.PASSAGE and idx.unit_options(Unit.PASSAGE) == {}
    with pytest.raises(AnygrainError) as e:
        idx.check_unit("sentence")
    assert str(e.value) == (
        f"{idx.path}: a bm25 index returns passages; "
        "unit phrase, sentence or document needs a phrase index"
    )
