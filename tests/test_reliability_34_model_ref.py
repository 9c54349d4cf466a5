"""Issue 34, class 6: the same model at another scale.

A dense index built with a model by alias (which normalises its vectors) and opened with
``--model`` the same weights from elsewhere passed the fingerprint check and encoded
questions without the alias's normalisation: scores on another scale (minilm: top score
4.315 instead of 0.649).  What changes scores besides the weights (pooling, normalisation,
prefixes) is part of the model reference an index records and is checked with it: a plain
weights directory (which states no settings) takes the recorded ones; a model that states
other ones is refused in one line naming the file and field, and nothing is written.

"By alias" is a test alias (``tiny-ref``, as in tests/test_dense_model_ref.py) pointing at
a saved tiny model's Hugging Face directory, as ``minilm`` points at its package's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer
from reliability34_helpers import one_line_error, tree
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.errors import IndexMismatchError
from anygrain.index.base import Index
from anygrain.models import resolve
from anygrain.models.biencoder import BiEncoder
from anygrain.models.encoder import Pooling
from anygrain.models.resolve import Alias, ModelDefaults

NAME = "tiny-ref"
TOPICS = [
    ("Paris", "Paris is the capital of France and sits on the Seine."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Python", "Python is a programming language created by Guido van Rossum."),
    ("Moon", "The Moon orbits the Earth roughly every 27 days."),
    ("Mars", "Mars is the fourth planet from the Sun, red with iron oxide."),
]
QUERIES = ["capital of France", "programming language", "red planet"]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny bi-encoder's weights saved several ways: as the alias's plain Hugging Face
    directory and as anygrain models stating the alias's settings or others."""
    root = tmp_path_factory.mktemp("models")
    base = tiny_biencoder(0, tokenizer=tiny_tokenizer(), normalize=False).save(root / "plain")
    out = {"hf": base / "question"}

    def variant(name: str, **changes: Any) -> None:
        m = BiEncoder.load(base)
        for side in (m.config.question, m.config.passage):
            side.normalize = True  # the alias's settings ...
            for k, v in changes.items():  # ... but for these
                setattr(side, k, v)
        out[name] = m.save(root / name)

    variant("same")
    variant("unnormalised", normalize=False)
    variant("cls", pooling=Pooling.CLS)
    variant("prefixed", prefix="query: ")
    variant("longer", max_length=32)  # lengths only: not a change of scale
    return out


@pytest.fixture
def index(
    monkeypatch: pytest.MonkeyPatch, models: dict[str, Path], tmp_path: Path
) -> dict[str, Path]:
    """A dense and a hybrid index built with the model by alias (which normalises)."""

    def locate(cache_dir: Path | None) -> Path:
        return models["hf"]

    monkeypatch.setitem(
        resolve.ALIASES,
        NAME,
        Alias(NAME, "a tiny test model", locate, ModelDefaults(normalize=True)),
    )
    docs = [SourceDocument(t.lower(), t, x) for t, x in TOPICS]
    return {
        kind: Index.build(
            docs, kind=kind, out=tmp_path / kind, model=NAME, lang="en", progress=False
        ).path
        for kind in ("dense", "hybrid")
    }


def _scores(idx: Index) -> list[list[tuple[str, float]]]:
    return [[(h.passage_id, round(h.score, 5)) for h in hs] for hs in idx.search(QUERIES, k=3)]


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
@pytest.mark.parametrize("given", ["hf", "same", "longer"])
def test_the_same_weights_score_as_the_index_recorded(
    index: dict[str, Path], models: dict[str, Path], kind: str, given: str
) -> None:
    """The plain weights directory (the minilm case: before the fix its questions were not
    normalised) and anygrain models stating the alias's settings give the index's scores."""
    own = _scores(Index.load(index[kind]))
    assert _scores(Index.load(index[kind], model=models[given])) == own
    assert _scores(Index.load(index[kind], model=str(models[given]))) == own


REFUSED = [
    ("unnormalised", "normalize=False", "normalize=True", "model.question.normalize"),
    ("cls", "pooling='cls'", "pooling='mean'", "model.question.pooling"),
    ("prefixed", "prefix='query: '", "prefix=''", "model.question.prefix"),
]


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
@pytest.mark.parametrize(("given", "has", "wants", "field"), REFUSED)
def test_a_model_stating_another_scale_is_refused(
    index: dict[str, Path],
    models: dict[str, Path],
    kind: str,
    given: str,
    has: str,
    wants: str,
    field: str,
) -> None:
    before = tree(index[kind].parent)
    with pytest.raises(IndexMismatchError) as e:
        Index.load(index[kind], model=models[given])
    msg = str(e.value)
    assert str(index[kind]) in msg and has in msg and wants in msg and field in msg
    assert "dense.json" in msg and "another scale" in msg
    assert with_instance_refused(index[kind], models[given])
    line = one_line_error(
        CliRunner().invoke(
            app, ["search", str(index[kind]), "capital", "--model", str(models[given])]
        )
    )
    assert field in line and "dense.json" in line
    assert tree(index[kind].parent) == before  # nothing written


def with_instance_refused(path: Path, model_dir: Path) -> bool:
    """A loaded model states its settings as its directory does."""
    with pytest.raises(IndexMismatchError, match="another scale"):
        Index.load(path, model=BiEncoder.load(model_dir))
    return True


def test_the_cli_search_with_the_plain_directory_gives_the_index_scores(
    index: dict[str, Path], models: dict[str, Path]
) -> None:
    runner = CliRunner()
    own = runner.invoke(app, ["search", str(index["dense"]), "capital of France", "--json"])
    other = runner.invoke(
        app,
        [
            "search",
            str(index["dense"]),
            "capital of France",
            "--json",
            "--model",
            str(models["hf"]),
        ],
    )
    assert own.exit_code == 0 and other.exit_code == 0, (own.output, other.output)
    assert own.output == other.output


# --- phrase indexes: the scoring settings recorded beside the fingerprint ------------------
PHRASE_REFUSED = [
    ("query_prefix", "query: ", "model.scoring.query_prefix"),
    ("question_pooling", Pooling.CLS, "model.scoring.question_pooling"),
    ("passage_prefix", "passage: ", "model.scoring.passage_prefix"),
    ("include_title", False, "model.scoring.include_title"),
    ("max_passage_length", 64, "model.scoring.max_passage_length"),
]


@pytest.fixture(scope="module")
def phrase_built(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("phrase") / "p"
    with single_threaded():
        Index.build(f"squad:{squad}", kind="phrase", out=out, model=str(model_dir), progress=False)
    return out


def _variant(model_dir: Path, root: Path, field: str, value: Any) -> Path:
    from anygrain.phrase.model import PhraseEncoder

    m = PhraseEncoder.load(model_dir)
    setattr(m.config, field, value)
    return m.save(root / f"variant-{field}")


def test_a_phrase_index_records_its_scoring_settings(phrase_built: Path, model_dir: Path) -> None:
    scoring = json.loads((phrase_built / "index.json").read_text())["model"]["scoring"]
    assert set(scoring) >= {"query_prefix", "question_pooling", "passage_prefix"}
    own = Index.load(phrase_built).search(["capital"], k=3)
    again = Index.load(phrase_built, model=str(model_dir)).search(["capital"], k=3)
    assert [(h.text, h.score) for h in own[0]] == [(h.text, h.score) for h in again[0]]


@pytest.mark.parametrize(("field", "value", "where"), PHRASE_REFUSED)
def test_a_phrase_model_with_other_scoring_settings_is_refused(
    phrase_built: Path, model_dir: Path, tmp_path: Path, field: str, value: Any, where: str
) -> None:
    variant = _variant(model_dir, tmp_path, field, value)
    before = tree(phrase_built)
    with pytest.raises(IndexMismatchError) as e:
        Index.load(phrase_built, model=str(variant))
    msg = str(e.value)
    assert str(phrase_built) in msg and where in msg and "index.json" in msg
    line = one_line_error(
        CliRunner().invoke(app, ["search", str(phrase_built), "capital", "--model", str(variant)])
    )
    assert where in line
    assert tree(phrase_built) == before


def test_an_index_from_before_scoring_was_recorded_is_checked_on_its_settings(
    phrase_built: Path, model_dir: Path, tmp_path: Path
) -> None:
    """Without ``model.scoring`` the window settings recorded in ``settings`` still count."""
    old = tmp_path / "old"
    shutil.copytree(phrase_built, old)
    manifest = json.loads((old / "index.json").read_text())
    del manifest["model"]["scoring"]
    (old / "index.json").write_text(json.dumps(manifest))
    assert Index.load(old, model=str(model_dir)).search_one("capital", 1)
    variant = _variant(model_dir, tmp_path, "max_passage_length", 64)
    with pytest.raises(IndexMismatchError, match="settings.max_passage_length"):
        Index.load(old, model=str(variant))
