"""A dense index refers to a model given by name instead of copying it.

"By name" is exercised with a test alias (``tiny-ref``) added to the alias table of
``anygrain.models.resolve``, pointing at a saved tiny model's Hugging Face directory, as
``minilm`` points at its package's; re-pointing the alias stands for another model
appearing behind the same name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dense_helpers import single_threaded, tiny_biencoder, tiny_tokenizer
from typer.testing import CliRunner

from anygrain.api import add_documents, compact_index, delete_documents, verify_index
from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.dense.index import DenseIndex, DenseSettings, model_reference
from anygrain.errors import IndexMismatchError, ModelNotFoundError, UsageError
from anygrain.hits.hit import Hit
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files, read_manifest
from anygrain.models import resolve
from anygrain.models.biencoder import BiEncoder
from anygrain.models.resolve import Alias, ModelDefaults

NAME = "tiny-ref"
TOPICS = [
    ("Paris", "Paris is the capital of France and sits on the Seine."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Python", "Python is a programming language created by Guido van Rossum."),
    ("Rust", "Rust is a systems programming language focused on memory safety."),
    ("Moon", "The Moon orbits the Earth roughly every 27 days."),
    ("Mars", "Mars is the fourth planet from the Sun, red with iron oxide."),
]
MORE = [
    ("Jazz", "Jazz originated in New Orleans in the early twentieth century."),
    ("Tea", "Tea is brewed from the leaves of Camellia sinensis."),
]
QUERIES = ["capital of France", "programming language", "red planet", "tea leaves"]


def _docs(topics: list[tuple[str, str]]) -> list[SourceDocument]:
    return [SourceDocument(t.lower(), t, x) for t, x in topics]


def _key(hits: list[list[Hit]]) -> list[list[tuple[str, float]]]:
    return [[(h.passage_id, round(h.score, 5)) for h in hs] for hs in hits]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded():  # type: ignore[no-untyped-def]
    with single_threaded():
        yield


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Two different tiny bi-encoders saved as anygrain model directories."""
    tok = tiny_tokenizer()
    root = tmp_path_factory.mktemp("models")
    return {seed: tiny_biencoder(seed, tokenizer=tok).save(root / f"m{seed}") for seed in (0, 1)}


def _alias(target: Path, raises: bool = False) -> Alias:
    def locate(cache_dir: Path | None) -> Path:
        if raises:
            raise ModelNotFoundError(f"the model package for {NAME} is not installed")
        return target / "question"  # the Hugging Face directory, as an alias locates

    return Alias(NAME, "a tiny test model", locate, ModelDefaults(normalize=True))


@pytest.fixture
def named(monkeypatch: pytest.MonkeyPatch, saved: dict[int, Path]) -> Any:
    """Point ``tiny-ref`` at saved model ``seed`` (0 unless told)."""

    def point(seed: int = 0, *, raises: bool = False) -> None:
        monkeypatch.setitem(resolve.ALIASES, NAME, _alias(saved[seed], raises))

    point(0)
    return point


def _build(out: Path, docs: list[SourceDocument] | None = None, **opts: Any) -> Index:
    opts = {"progress": False, "lang": "en", "shard_size": 4, **opts}
    return Index.build(docs or _docs(TOPICS), kind=opts.pop("kind", "dense"), out=out, **opts)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_a_named_model_is_referenced_not_copied(named: Any, tmp_path: Path) -> None:
    ref = _build(tmp_path / "ref", model=NAME)
    copy = _build(tmp_path / "copy", model=NAME, copy_model=True)
    assert not (ref.path / "dense" / "model").exists()
    assert (copy.path / "dense" / "model" / "anygrain_model.json").is_file()
    m = read_manifest(ref.path)
    s = m["settings"]["dense"]["model"]
    assert s["ref"] == NAME and "path" not in s and s["name"] == NAME
    assert m["model"]["ref"] == NAME and "path" not in m["model"]
    assert m["model"]["fingerprint"] == read_manifest(copy.path)["model"]["fingerprint"]
    assert not any(rel.startswith("dense/model/") for rel in m["files"])
    assert m["settings"]["build"]["copy_model"] is None
    # the copy is most of a tiny index; without it the index is a fraction of the size
    assert _size(ref.path) < _size(copy.path) - _size(copy.path / "dense" / "model") + 1
    assert _size(ref.path) < _size(copy.path) / 2
    # opened again, the name loads the same weights: the same hits as the copied index
    again = Index.load(ref.path)
    assert isinstance(again, DenseIndex)
    assert _key(again.search(QUERIES, k=4)) == _key(Index.load(copy.path).search(QUERIES, k=4))
    assert again.summary()["model"]["name"] == NAME
    assert check_index_files(ref.path, extra=True) == []
    assert verify_index(ref.path).problems == []


def test_a_model_given_as_a_directory_or_an_instance_is_copied(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    by_path = _build(tmp_path / "p", model=str(saved[0]))
    assert (by_path.path / "dense" / "model" / "anygrain_model.json").is_file()
    assert read_manifest(by_path.path)["model"]["path"] == "dense/model"
    inst = _build(tmp_path / "i", model=BiEncoder.load(saved[0]))
    assert (inst.path / "dense" / "model" / "anygrain_model.json").is_file()
    assert _key(by_path.search(QUERIES, k=3)) == _key(inst.search(QUERIES, k=3))


def test_copy_model_false(named: Any, saved: dict[int, Path], tmp_path: Path) -> None:
    # a directory is then referenced by its absolute path
    idx = _build(tmp_path / "p", model=str(saved[0]), copy_model=False)
    assert isinstance(idx, DenseIndex) and not (idx.path / "dense" / "model").exists()
    assert idx.settings["model"]["ref"] == str(saved[0].resolve())
    assert _key(Index.load(idx.path).search(QUERIES, k=3)) == _key(idx.search(QUERIES, k=3))
    # an in-memory model has no name nor path to record: refused before anything is read
    with pytest.raises(UsageError, match="in-memory model has neither"):
        _build(tmp_path / "i", model=BiEncoder.load(saved[0]), copy_model=False)
    assert not (tmp_path / "i").exists()
    with pytest.raises(UsageError, match="in-memory model"):
        model_reference(BiEncoder.load(saved[0]), False)


def test_which_models_count_as_names(saved: dict[int, Path]) -> None:
    assert model_reference("minilm") == "minilm"
    assert model_reference("intfloat/multilingual-e5-small") == "intfloat/multilingual-e5-small"
    assert model_reference("phrase-minilm") == "phrase-minilm"  # a shipped model's name
    assert model_reference("minilm", True) == ""
    assert model_reference(saved[0]) == "" and model_reference(str(saved[0] / "question")) == ""


def test_another_model_behind_the_name_is_refused(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    idx = _build(tmp_path / "ref", model=NAME)
    want = idx.search(QUERIES, k=3)
    named(1)  # the name now resolves to other weights
    with pytest.raises(IndexMismatchError) as e:
        Index.load(idx.path)
    msg = str(e.value)
    assert str(idx.path) in msg and repr(NAME) in msg and "--model DIR" in msg
    # the model it was built with, passed explicitly, still opens it
    assert _key(Index.load(idx.path, model=saved[0]).search(QUERIES, k=3)) == _key(want)
    with pytest.raises(IndexMismatchError):
        Index.load(idx.path, model=saved[1])


def test_an_unresolvable_name_says_how_to_open_the_index(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    idx = _build(tmp_path / "ref", model=NAME)
    named(raises=True)  # offline, say, or the package uninstalled
    with pytest.raises(ModelNotFoundError) as e:
        Index.load(idx.path)
    msg = str(e.value)
    assert str(idx.path) in msg and repr(NAME) in msg and "--model DIR" in msg
    assert "--copy-model" in msg
    r = CliRunner().invoke(app, ["search", str(idx.path), "capital of France"])
    assert r.exit_code != 0 and "--model DIR" in r.output and NAME in r.output
    assert Index.load(idx.path, model=str(saved[0])).search_one("capital", 1)


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_add_delete_compact_a_referenced_index(named: Any, tmp_path: Path, kind: str) -> None:
    idx = _build(tmp_path / "ref", kind=kind, model=NAME)
    fresh = _build(tmp_path / "fresh", _docs(TOPICS + MORE), kind=kind, model=NAME)
    add_documents(idx.path, _docs(MORE), progress=False)
    grown = Index.load(idx.path)
    assert len(grown.corpus) == len(TOPICS) + len(MORE)
    assert _key(grown.search(QUERIES, k=5)) == _key(fresh.search(QUERIES, k=5))
    assert check_index_files(idx.path, extra=True) == []
    assert not list(idx.path.rglob("anygrain_model.json"))  # still no copy
    delete_documents(idx.path, ["tea"])
    compact_index(idx.path, progress=False)
    compacted = Index.load(idx.path)
    assert len(compacted.corpus) == len(TOPICS) + len(MORE) - 1
    assert check_index_files(idx.path, extra=True) == []


def test_a_sharded_index_refers_to_the_name_in_every_shard(named: Any, tmp_path: Path) -> None:
    sh = Index.build(
        _docs(TOPICS + MORE), kind="sharded", of="dense", shards=2, out=tmp_path / "sh",
        model=NAME, progress=False, lang="en",
    )  # fmt: skip
    one = _build(tmp_path / "one", _docs(TOPICS + MORE), model=NAME)
    assert not list(sh.path.rglob("anygrain_model.json"))
    assert read_manifest(sh.path)["model"]["ref"] == NAME
    assert _key(Index.load(sh.path).search(QUERIES, k=4)) == _key(one.search(QUERIES, k=4))
    assert check_index_files(sh.path, extra=True) == []


def test_an_index_with_a_copied_model_still_opens(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    """An index written before references (its model copied, ``path`` in the manifest) opens
    from its copy, whatever the name resolves to now."""
    idx = _build(tmp_path / "old", model=NAME, copy_model=True)
    d = json.loads((idx.path / "dense" / "dense.json").read_text())
    assert d["model"]["path"] == "model" and "ref" not in d["model"]
    want = _key(idx.search(QUERIES, k=3))
    named(1)
    assert _key(Index.load(idx.path).search(QUERIES, k=3)) == want


def test_the_cli_option(named: Any, tmp_path: Path) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": t, "title": t, "text": x}) + "\n" for t, x in TOPICS))
    run = CliRunner().invoke
    for flag, copied in (([], False), (["--copy-model"], True), (["--no-copy-model"], False)):
        out = tmp_path / f"i{len(flag)}{flag[0] if flag else ''}"
        r = run(
            app,
            ["index", str(src), "--kind", "dense", "--model", NAME, "--out", str(out), "-q", *flag],
        )
        assert r.exit_code == 0, r.output
        assert (out / "dense" / "model").exists() is copied
        assert read_manifest(out)["settings"]["build"]["copy_model"] == (
            None if not flag else copied
        )
    r = run(
        app, ["index", str(src), "--kind", "bm25", "--copy-model", "--out", str(tmp_path / "b")]
    )
    assert r.exit_code != 0 and "copy_model" in r.output
    assert DenseSettings(copy_model=True).to_dict()["copy_model"] is True
