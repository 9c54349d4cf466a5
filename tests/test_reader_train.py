"""Reader training: data, negatives, loss going down, checkpoints and exact resume.

A tiny random BERT (hidden 32, 2 layers) with the MiniLM tokenizer and a SQuAD
file the tests write keep this to seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from reader_helpers import tiny_bert, towns_squad, train_config

from anygrain.errors import AnygrainError
from anygrain.eval.answers import has_answer
from anygrain.reader import Reader
from anygrain.train.reader.data import gold_char_spans, load_reader_data
from anygrain.train.reader.trainer import ReaderTrainer, train_reader
from anygrain.train.run_dir import LOG_FILE
from anygrain.train.runlog import TrainLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    encoder, tok = tiny_bert()
    d = tmp_path_factory.mktemp("tiny-bert")
    encoder.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


@pytest.fixture
def squad(tmp_path: Path) -> Path:
    return towns_squad(tmp_path / "towns.json")


_config = train_config


def test_gold_char_spans_finds_every_occurrence_on_word_boundaries() -> None:
    text = "Salt and salt-pans: the salty salt trade."
    spans = gold_char_spans(text, ["salt"], [9])
    assert spans[0] == (9, 13)  # the annotated one first
    assert sorted(spans) == [(0, 4), (9, 13), (30, 34)]  # never inside "salty"
    # A wrong annotated offset is ignored, but the text is still found.
    assert gold_char_spans("the year 1203.", ["1203"], [0]) == [(9, 13)]
    assert gold_char_spans("no answer here", ["1203"], [0]) == []


def test_data_and_same_file_negatives(squad: Path, tiny_model: Path, tmp_path: Path) -> None:
    data = load_reader_data([f"squad:{squad}"])
    assert len(data.examples) == 12 and len(data.texts) == 6 and len(data.articles) == 2
    ex = next(e for e in data.examples if e.qid == "Xalor-export")
    assert len(ex.spans) == 3  # "copper" twice, "main export is copper" once
    cfg = _config(squad, tmp_path / "r", tiny_model)
    reader = Reader.from_pretrained(str(tiny_model), **cfg.reader_settings())
    trainer = ReaderTrainer(
        cfg, reader, data, tmp_path, TrainLog(tmp_path / "log", echo=False), False
    )
    import numpy as np

    negs = trainer.sample_negatives(ex, np.random.default_rng(0))
    assert len(negs) == 3 and ex.positive not in negs
    # Same article first: the other two paragraphs of "Towns 0".
    assert set(negs[:2]) == set(data.articles[ex.article]) - {ex.positive}
    for n in negs:
        assert not has_answer(data.texts[n], ex.answers)
    sb = trainer.step_batch(0, 0)
    assert sb.layout.shape == (3, 4) and bool((sb.layout >= 0).all())
    assert bool(sb.gold_mask.any(dim=1).all())
    # Every gold token span decodes back to a gold answer's text.
    for b in range(3):
        row = int(sb.layout[b, 0])
        q = data.examples[int(trainer.batch_rows(0, 0)[b])]
        text = data.texts[q.positive]
        for s, e, m in zip(sb.gold_starts[b], sb.gold_ends[b], sb.gold_mask[b], strict=True):
            if m:
                ids = sb.batch.input_ids[row, int(s) : int(e) + 1]
                assert ids.numel() >= 1
                assert any(a.lower() in text.lower() for a in q.answers)


def test_training_lowers_the_loss_and_saves_a_loadable_reader(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    cfg = _config(squad, tmp_path / "reader", tiny_model, epochs=8, lr=5e-3)
    data = load_reader_data(cfg.train)
    torch.manual_seed(cfg.seed)
    before = Reader.from_pretrained(str(tiny_model), **cfg.reader_settings())
    trainer = ReaderTrainer(
        cfg, before, data, tmp_path, TrainLog(tmp_path / "log", echo=False), False
    )
    batches = [trainer.step_batch(0, s) for s in range(trainer.steps_per_epoch)]
    before.eval()
    with torch.no_grad():
        loss0 = sum(float(trainer.loss(b)[0]) for b in batches)
    out = train_reader(cfg, progress=False)
    after = Reader.load(out)
    trainer.reader = after
    with torch.no_grad():
        loss1 = sum(float(trainer.loss(b)[0]) for b in batches)
    assert loss1 < 0.6 * loss0, (loss0, loss1)
    log = [json.loads(ln) for ln in (out / LOG_FILE).read_text().splitlines()]
    assert log[0]["event"] == "start" and log[-1]["event"] == "done"
    assert not (out / "checkpoints").exists()
    assert after.config.max_length == 64 and after.config.max_answer_length == 30
    # A finished run is not repeated.
    before_log = (out / LOG_FILE).read_text()
    assert train_reader(cfg, progress=False) == out
    assert (out / LOG_FILE).read_text() == before_log


def test_resume_after_interrupt_gives_identical_weights(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    straight = train_reader(_config(squad, tmp_path / "a", tiny_model, epochs=2), progress=False)

    cfg = _config(squad, tmp_path / "b", tiny_model, epochs=2)

    def stop(step: int) -> None:
        if step == 5:  # mid-epoch, after a checkpoint at step 4
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_reader(cfg, progress=False, on_step=stop)
    assert any((tmp_path / "b" / "checkpoints").iterdir())
    # Changing a setting that shapes the weights refuses to resume the checkpoint.
    with pytest.raises(AnygrainError, match="different settings"):
        train_reader(_config(squad, tmp_path / "b", tiny_model, epochs=2, lr=1e-3), progress=False)
    resumed = train_reader(cfg, progress=False)
    a = Reader.load(straight).state_dict()
    b = Reader.load(resumed).state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    records = [json.loads(ln) for ln in (resumed / LOG_FILE).read_text().splitlines()]
    assert any("resumed from" in r.get("message", "") for r in records)
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))


def test_retrieved_negatives_skip_the_positive_and_answers(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from anygrain.corpus.store import CorpusStore
    from anygrain.sparse.bm25 import BM25Index

    store = CorpusStore.build(f"squad:{squad}", tmp_path / "corpus", progress=False)
    index = BM25Index.build_from(store, tmp_path / "bm25", progress=False)
    cfg = _config(squad, tmp_path / "r", tiny_model, epochs=1, retriever_depth=5)
    out = train_reader(cfg, retriever_index=index, progress=False)
    start = json.loads((out / LOG_FILE).read_text().splitlines()[0])
    assert start["negatives_from"] == "retriever" and start["retrieved_negatives"] > 0
    from anygrain.train.reader.retrieval import attach_retrieved

    data = load_reader_data(cfg.train)
    attach_retrieved(data, index, 5, progress=False)
    for ex in data.examples:
        assert ex.positive not in ex.retrieved
        assert all(not has_answer(data.texts[i], ex.answers) for i in ex.retrieved)


def test_bad_settings_are_rejected(squad: Path, tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(AnygrainError, match="batch_size"):
        train_reader(_config(squad, tmp_path / "x", tiny_model, batch_size=0), progress=False)
    with pytest.raises(AnygrainError, match="max_length"):
        train_reader(_config(squad, tmp_path / "y", tiny_model, max_length=30), progress=False)


def test_interrupt_leaves_a_usable_reader_and_a_checkpoint(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from anygrain.train.checkpoint import CHECKPOINT_DIR, latest_checkpoint, load_checkpoint
    from anygrain.train.reader.trainer import CHECKPOINT_FORMAT

    cfg = _config(squad, tmp_path / "r", tiny_model, epochs=2)

    def stop(step: int) -> None:
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_reader(cfg, progress=False, on_step=stop)
    out = tmp_path / "r"
    assert (out / CHECKPOINT_DIR).is_dir()
    saved = Reader.load(out).state_dict()  # usable without resuming
    state = load_checkpoint(latest_checkpoint(out), fmt=CHECKPOINT_FORMAT)  # type: ignore[arg-type]
    for k, v in state["weights"].items():
        assert torch.equal(saved[k], v), k


def test_a_step_budget_stops_cleanly_and_a_rerun_finishes_the_schedule(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    straight = train_reader(_config(squad, tmp_path / "a", tiny_model, epochs=2), progress=False)
    out = tmp_path / "b"
    train_reader(_config(squad, out, tiny_model, epochs=2, max_steps=3), progress=False)
    records = [json.loads(ln) for ln in (out / LOG_FILE).read_text().splitlines()]
    assert records[-1]["event"] == "stopped" and records[-1]["step"] == 3
    Reader.load(out)  # a usable reader after the stop
    # max_steps is bookkeeping: the rerun resumes and ends where an uninterrupted run does
    train_reader(_config(squad, out, tiny_model, epochs=2), progress=False)
    a, b = Reader.load(straight).state_dict(), Reader.load(out).state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_time_budget_fits_the_schedule(squad: Path, tiny_model: Path, tmp_path: Path) -> None:
    from anygrain.train.reader.data import load_reader_data as load

    cfg = _config(squad, tmp_path / "t", tiny_model, epochs=30, max_minutes=5.0)
    data = load(cfg.train)
    torch.manual_seed(0)
    trainer = ReaderTrainer(
        cfg,
        Reader.from_pretrained(str(tiny_model)),
        data,
        tmp_path,
        TrainLog(tmp_path / "log", echo=False),
        False,
    )
    assert trainer.total_steps == trainer.planned_steps
    # 1 s a step with 20 s left fits 19 more steps; the LR then reaches 0 at the new end
    assert trainer.fit_to_budget(1.0, 20.0)
    assert trainer.total_steps == 19
    lrs = []
    for _ in range(19):
        lrs.append(trainer.scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.scheduler.step()
    assert lrs[0] > 0 and trainer.scheduler.get_last_lr()[0] == 0.0


def test_pack_a_reader_and_continue_training_from_the_packed_form(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from anygrain.reader.packed import PackedReaderInfo, is_packed_reader, pack_reader

    full = train_reader(
        _config(squad, tmp_path / "full", tiny_model, epochs=1, freeze_embeddings=True),
        progress=False,
    )
    reader = Reader.load(full)
    packed = pack_reader(reader, tmp_path / "packed", source=full)
    assert is_packed_reader(packed)
    info = PackedReaderInfo.read(packed)
    # only the transformer layers and heads are stored, as 4-bit differences
    full_bytes = sum(p.numel() * 4 for p in reader.parameters())
    assert info.size_bytes < full_bytes / 4
    back = Reader.load(packed)
    for (k, a), b in zip(reader.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=0.05), k  # within the 4-bit step of each difference
    # a damaged packed file is refused, not loaded
    data = bytearray((packed / "packed.safetensors").read_bytes())
    data[-5] ^= 0xFF
    (tmp_path / "bad").mkdir()
    for f in packed.iterdir():
        (tmp_path / "bad" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "bad" / "packed.safetensors").write_bytes(bytes(data))
    with pytest.raises(AnygrainError):
        Reader.load(tmp_path / "bad")
    # training continues from the packed reader (days later, without its checkpoints)
    cont = train_reader(
        _config(squad, tmp_path / "cont", packed, epochs=1, freeze_embeddings=True),
        progress=False,
    )
    assert Reader.load(cont).config.base_model == str(tiny_model)


def test_selection_bce_adds_an_absolute_passage_loss(
    squad: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from anygrain.reader.losses import selection_bce

    logits = torch.tensor([[3.0, -3.0, -3.0], [-3.0, 3.0, 0.0]])
    present = torch.tensor([[True, True, False], [True, True, True]])
    loss = selection_bce(logits, present)
    # A confident positive and negative give a small loss; a reversed one a large loss.
    assert float(loss[0]) < 0.06 < 2.0 < float(loss[1])
    # Shifting every logit of a question leaves the softmax loss alone, not this one.
    assert not torch.allclose(selection_bce(logits + 5, present), loss)

    torch.manual_seed(0)
    cfg = _config(squad, tmp_path, tiny_model)
    reader = Reader.from_pretrained(str(tiny_model), **cfg.reader_settings())
    data = load_reader_data(cfg.train)
    log = TrainLog(tmp_path / "log", echo=False)
    plain = ReaderTrainer(cfg, reader, data, tmp_path, log, False)
    both = ReaderTrainer(
        _config(squad, tmp_path, tiny_model, selection_bce=2.0), reader, data, tmp_path, log, False
    )
    sb = plain.step_batch(0, 0)
    reader.eval()
    with torch.no_grad():
        l0, s0 = plain.loss(sb)
        l1, s1 = both.loss(sb)
    assert s0["selection_bce"] == 0.0 and s1["selection_bce"] > 0
    assert float(l1) == pytest.approx(float(l0) + 2.0 * s1["selection_bce"], rel=1e-5)
    with pytest.raises(AnygrainError, match="selection_bce"):
        train_reader(_config(squad, tmp_path / "z", tiny_model, selection_bce=-1), progress=False)


def test_a_shipped_reader_name_is_a_starting_point() -> None:
    from anygrain.models.shipped import SHIPPED

    if not SHIPPED["reader-minilm"].path.is_dir():
        pytest.skip("reader-minilm is not in this install")
    reader = Reader.from_pretrained("reader-minilm")
    assert reader.config.max_length == 256
