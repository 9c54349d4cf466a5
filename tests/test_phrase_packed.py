"""Packed phrase models: quantised differences from the backbone, rebuilt exactly or refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_phrase_helpers import make_tiny_model

from anygrain.errors import AnygrainError, IndexMismatchError
from anygrain.models.delta import PackSettings, dequantize, quantize
from anygrain.phrase import PhraseEncoder
from anygrain.phrase.packed import (
    PACKED_CONFIG,
    PACKED_FILE,
    full_fingerprint,
    is_packed,
    pack_phrase_model,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("size", [1.0, 1e-3, 1e-6])  # small moves have float16-subnormal scales
def test_quantize_round_trip_is_within_half_a_step(bits: int, size: float) -> None:
    s = PackSettings(bits=bits, group=16)
    x = torch.randn(6, 32) * torch.linspace(0.01, 3, 32) * size
    codes, scale = quantize(x, s)
    assert codes.dtype == torch.uint8 and codes.numel() == x.numel() * bits // 8
    back = dequantize(codes, scale, x.shape, s)
    step = scale.repeat_interleave(16).reshape(x.shape)
    assert torch.all((back - x).abs() <= step * (0.5 + 1e-5))
    assert torch.allclose(
        back.abs().reshape(-1, 16).amax(1), x.abs().reshape(-1, 16).amax(1), rtol=2e-3
    )


def test_zero_groups_stay_zero() -> None:
    s = PackSettings()
    x = torch.zeros(2, 64)
    codes, scale = quantize(x, s)
    assert torch.equal(dequantize(codes, scale, x.shape, s), x)


def test_settings_are_validated() -> None:
    with pytest.raises(AnygrainError, match="4 or 8 bits"):
        PackSettings(bits=3)
    with pytest.raises(AnygrainError, match="even"):
        PackSettings(group=7)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def trained_like(tiny: Path) -> PhraseEncoder:
    """A phrase model whose layers and heads moved away from the backbone, embeddings frozen."""
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    m.freeze_embeddings()
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn_like(p))
    return m


def test_pack_and_load_rebuild_close_weights_and_keep_embeddings(
    tiny: Path, tmp_path: Path
) -> None:
    m = trained_like(tiny)
    out = pack_phrase_model(m, tmp_path / "packed", card="# card\n")
    assert is_packed(out) and (out / "MODEL_CARD.md").read_text() == "# card\n"
    loaded = PhraseEncoder.load(out)
    assert loaded.packed is not None
    for a, b in zip(m.encoders(), loaded.encoders(), strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        for k in sa:
            if k.startswith("embeddings."):
                assert torch.equal(sa[k], sb[k]), k
            else:
                # 4-bit steps of a 0.02-sized move: far below the move itself
                assert (sa[k] - sb[k]).abs().max() < 0.02, k
    texts = ["Guido van Rossum created Python in 1991.", "The Moon orbits the Earth."]
    qa = m.encode_questions(["Who created Python?"])
    qb = loaded.encode_questions(["Who created Python?"])
    cos = float((qa[0] @ qb[0].T).item() / (np.linalg.norm(qa[0]) * np.linalg.norm(qb[0])))
    assert cos > 0.99
    pa, pb = m.encode_passages(texts), loaded.encode_passages(texts)
    assert all(np.array_equal(x.cs, y.cs) for x, y in zip(pa, pb, strict=True))
    # a second load rebuilds exactly the same weights (fingerprints recorded at pack time)
    again = PhraseEncoder.load(out)
    assert full_fingerprint(again) == full_fingerprint(loaded)


def test_pack_refuses_a_directory_that_is_not_a_packed_model(tiny: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(AnygrainError, match="not a packed phrase model"):
        pack_phrase_model(trained_like(tiny), mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    out = pack_phrase_model(trained_like(tiny), tmp_path / "p")
    assert pack_phrase_model(trained_like(tiny), out) == out  # a packed model is replaced


def test_packed_file_is_a_fraction_of_the_full_model(tiny: Path, tmp_path: Path) -> None:
    m = trained_like(tiny)
    full = m.save(tmp_path / "full")
    packed = pack_phrase_model(m, tmp_path / "packed")
    full_bytes = sum(f.stat().st_size for f in full.rglob("*.safetensors"))
    assert (packed / PACKED_FILE).stat().st_size < 0.35 * full_bytes


def test_saving_an_unchanged_packed_model_writes_the_packed_form(
    tiny: Path, tmp_path: Path
) -> None:
    loaded = PhraseEncoder.load(pack_phrase_model(trained_like(tiny), tmp_path / "p"))
    copy = loaded.save(tmp_path / "copy")
    assert is_packed(copy) and not (copy / "phrase").exists()
    assert PhraseEncoder.load(copy).phrase_fingerprint() == loaded.phrase_fingerprint()
    # once the weights change (query-side fine-tuning), the full form is written instead
    with torch.no_grad():
        next(loaded.questions[0].parameters()).add_(0.1)
    changed = loaded.save(tmp_path / "changed")
    assert not is_packed(changed) and (changed / "phrase").is_dir()
    assert full_fingerprint(PhraseEncoder.load(changed)) == full_fingerprint(loaded)


def test_damaged_or_foreign_packed_models_are_refused(tiny: Path, tmp_path: Path) -> None:
    out = pack_phrase_model(trained_like(tiny), tmp_path / "p")
    blob = bytearray((out / PACKED_FILE).read_bytes())
    blob[-5] ^= 0xFF  # inside the last tensor's data
    (out / PACKED_FILE).write_bytes(bytes(blob))
    with pytest.raises(IndexMismatchError, match="fingerprints"):
        PhraseEncoder.load(out)
    # the backbone under that name is no longer the one it was packed against
    out2 = pack_phrase_model(trained_like(tiny), tmp_path / "p2")
    other = make_tiny_model(tmp_path / "other-bert", seed=1)
    info = json.loads((out2 / PACKED_CONFIG).read_text())
    info["base_model"] = str(other)
    (out2 / PACKED_CONFIG).write_text(json.dumps(info))
    with pytest.raises(IndexMismatchError, match="backbone"):
        PhraseEncoder.load(out2)
    (out2 / PACKED_CONFIG).write_text("[1, 2]")
    with pytest.raises(AnygrainError, match="not a packed phrase model config"):
        PhraseEncoder.load(out2)
