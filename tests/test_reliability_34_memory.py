"""Issue 34, class 7: the memory budget holds for Chinese.

``anygrain index DRCD_test.json --kind phrase`` peaked at 2.64 GB against the default
1.5 GB budget: loading the default Chinese phrase model (``phrase-me5-zh``: me5-small's
250k-token embedding table in each of two encoders) peaked at 2.57 GB and left 1.73 GB
resident, and the budget assumed a MiniLM-sized model.  Now a packed model's encoders
share the tensors no encoder changed, a fingerprint hashes weights without copying them,
and the budget counts what the model leaves resident, refusing up front (in one line,
naming the budget needed) when too little is left.  ``bench/build_memory.py --corpus zh``
measures the whole build on 1,088 Chinese passages.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import torch
from reliability34_helpers import one_line_error, tree
from test_phrase_helpers import make_tiny_model
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.encode.onnx_runtime import Runtime
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.models.base import fingerprint_modules
from anygrain.phrase import PhraseEncoder
from anygrain.phrase.budget import (
    BASELINE_BYTES,
    MIN_WORKING_BYTES,
    RUNTIME_BYTES,
    BuildBudget,
    resident_bytes,
)
from anygrain.phrase.packed import full_fingerprint, pack_phrase_model, untie

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A packed phrase model whose layers moved from the backbone, embeddings frozen."""
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(tiny, max_passage_length=40, doc_stride=10)
    m.freeze_embeddings()
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn_like(p))
    return pack_phrase_model(m, tmp_path_factory.mktemp("packed") / "p")


def _ptrs(enc: torch.nn.Module) -> dict[str, int]:
    return {k: t.data_ptr() for k, t in enc.state_dict().items()}


def test_a_packed_model_shares_what_no_encoder_changed(packed: Path) -> None:
    """Before: every encoder a whole copy of the backbone (me5: 384 MB of embeddings each)."""
    m = PhraseEncoder.load(packed)
    phrase, question = (_ptrs(e) for e in m.encoders())
    shared = {k for k in phrase if phrase[k] == question[k]}
    assert "embeddings.word_embeddings.weight" in shared
    assert all(k.startswith("embeddings.") for k in shared)  # the layers moved: own copies
    unique = {t.data_ptr() for t in m.parameters()}
    assert len(unique) < sum(1 for e in m.encoders() for _ in e.parameters()) + 10
    # counted once in what the build budgets for
    one = sum(t.numel() * t.element_size() for t in m.parameters())
    assert (
        resident_bytes(m)
        == RUNTIME_BYTES
        + one
        + sum(b.numel() * b.element_size() for b in {b.data_ptr(): b for b in m.buffers()}.values())
        + len(m.tokenizer) * 1_200
    )


def test_untie_gives_each_encoder_its_own_tensors_and_keeps_the_weights(packed: Path) -> None:
    m = PhraseEncoder.load(packed)
    before = full_fingerprint(m)
    untie(m)
    phrase, question = (_ptrs(e) for e in m.encoders())
    assert not {k for k in phrase if phrase[k] == question[k]}
    assert full_fingerprint(m) == before
    # training the question side now leaves the phrase side as it was
    fp = m.phrase_fingerprint()
    with torch.no_grad():
        for p in m.questions.parameters():
            p.add_(1.0)
    assert m.phrase_fingerprint() == fp


def test_query_side_and_phrase_trainers_untie() -> None:
    """Both trainers that change a loaded model's weights untie it first."""
    import inspect

    from anygrain.train.phrase import query_side, trainer

    assert "untie(model)" in inspect.getsource(query_side.QuerySideTrainer.__init__)
    assert "untie(model)" in inspect.getsource(trainer.PhraseTrainer.__init__)


def test_a_fingerprint_does_not_copy_the_weights() -> None:
    """Before: each tensor went through ``tobytes()``: a second copy of the largest one."""
    big = torch.nn.Linear(1024, 1024)  # 4 MB of float32
    tracemalloc.start()
    fingerprint_modules([big])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000, peak


def test_the_budget_counts_the_model() -> None:
    small = BuildBudget()
    assert small.baseline == BASELINE_BYTES

    class Fake(torch.nn.Module):
        def __init__(self, params: int, vocab: int) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(params, dtype=torch.float32))
            self.tokenizer = [0] * vocab

    # a MiniLM-sized model keeps the measured baseline: English builds are unchanged
    assert BuildBudget().for_model(Fake(34_000_000, 30_522)).baseline == BASELINE_BYTES
    # an me5-sized one (558 MB of weights, a 250k vocabulary) leaves less to work with
    me5 = BuildBudget().for_model(Fake(139_500_000, 250_002))
    assert me5.baseline > 1_200_000_000 and me5.working >= MIN_WORKING_BYTES
    assert me5.shard_size(384) < BuildBudget().shard_size(384)
    assert me5.train_vectors(384) <= BuildBudget().train_vectors(384)
    # a budget it cannot fit is refused, naming what it needs
    with pytest.raises(AnygrainError, match=r"--memory-budget 1\.\d\dG") as e:
        BuildBudget(1_000_000_000).for_model(Fake(139_500_000, 250_002), "phrase-me5-zh")
    assert "phrase-me5-zh" in str(e.value) and "1.00 GB" in str(e.value)


def test_a_build_over_budget_is_refused_up_front_in_one_line(
    squad: Path, model_dir: Path, tmp_path: Path
) -> None:
    before = tree(tmp_path)
    r = CliRunner().invoke(
        app,
        [
            "index",
            f"squad:{squad}",
            "--kind",
            "phrase",
            "--model",
            str(model_dir),
            "--out",
            str(tmp_path / "p"),
            "--memory-budget",
            "0.3G",
            "-q",
        ],
    )
    line = one_line_error(r)
    assert "--memory-budget" in line and "0.30 GB" in line
    assert tree(tmp_path) == before  # nothing left at --out
    # the same build within a budget it fits
    idx = Index.build(
        f"squad:{squad}", kind="phrase", out=tmp_path / "p", model=str(model_dir), progress=False
    )
    assert idx.manifest["counts"]["start_vectors"] > 0
    # reopened with the model the build holds, not beside a second copy of its weights in
    # an ONNX Runtime session (phrase-me5-zh: the build's peak, 0.2 GB over the budget)
    assert idx.runtime is Runtime.TORCH
