"""The phrase model's passage side on ONNX Runtime (anygrain.phrase.onnx, anygrain.phrase.dump):
the same windows, vectors, filter logits and kept tokens as torch; the graph cache keyed by
the passage-side weights (a changed weight is exported again); an index built on ONNX
Runtime searching as one built on torch; and a dump that imports neither torch nor
transformers."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from test_phrase_helpers import PARAGRAPHS, make_tiny_model, squad_parts, write_squad

from anygrain.corpus.store import CorpusStore
from anygrain.encode import onnx_runtime
from anygrain.encode.onnx_runtime import GraphCache
from anygrain.errors import AnygrainError
from anygrain.hits.hit import Unit
from anygrain.index.base import Index
from anygrain.phrase import PhraseEncoder, PhraseIndex
from anygrain.phrase.dump import dump_phrases, encode_shard, passage_encoder
from anygrain.phrase.onnx import OnnxPassageEncoder, export_passages, passage_key

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("torch_one_thread")

TOL = 1e-4
TEXTS = [ctx for _, ctx, _ in PARAGRAPHS] + [
    "",  # no window at all but the specials
    "Ünïcödé façade naïve café 北京大学 and   spaces\tand tabs.",
    "A long passage of many words, cut into several overlapping windows. " * 6,
]
TITLES = [t for t, _, _ in PARAGRAPHS] + ["Empty", "A title " * 30, "Long"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GraphCache]:
    """A cache of its own: the graphs these tests export never reach the user's."""
    root = tmp_path_factory.mktemp("xdg-cache") / "anygrain" / "onnx"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnx_runtime, "default_cache_root", lambda: root)
        yield GraphCache(root)


def _perturb(*modules: torch.nn.Module, scale: float = 0.1) -> None:
    with torch.no_grad():
        for m in modules:
            for p in m.parameters():
                p.add_(torch.randn_like(p) * scale)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    # heads and filter away from their initial values, so the graph's are tested too
    _perturb(m.start_head, m.end_head, m.filter, scale=0.5)
    return m.save(tmp_path_factory.mktemp("phrase-model") / "m")


@pytest.fixture(scope="module")
def model(model_dir: Path) -> PhraseEncoder:
    return PhraseEncoder.load(model_dir)


@pytest.fixture(scope="module")
def onnx(model: PhraseEncoder, cache: GraphCache) -> OnnxPassageEncoder:
    return OnnxPassageEncoder(export_passages(model, cache))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> CorpusStore:
    squad = write_squad(tmp_path_factory.mktemp("squad") / "squad.json")
    return CorpusStore.build(
        f"squad:{squad}", tmp_path_factory.mktemp("corpus") / "c", progress=False
    )


def test_the_windows_are_the_tokenizers(model: PhraseEncoder, onnx: OnnxPassageEncoder) -> None:
    """The ``tokenizers`` library cuts the windows the Hugging Face tokenizer cuts."""
    for titles in (TITLES, None):
        want, got = model.windows(TEXTS, titles), onnx.windows(TEXTS, titles)
        assert len(want) == len(got) > len(TEXTS)  # the long passage overflows
        for a, b in zip(want, got, strict=True):
            assert a.passage == b.passage
            for name in ("input_ids", "token_type_ids", "cs", "ce", "start_ok", "end_ok"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
            assert np.array_equal(a.wfirst, b.wfirst) and np.array_equal(a.wlast, b.wlast)


def test_onnx_gives_the_torch_vectors(model: PhraseEncoder, onnx: OnnxPassageEncoder) -> None:
    want = model.encode_passages(TEXTS, TITLES, batch_size=3)
    got = onnx.encode_passages(TEXTS, TITLES, batch_size=3)
    for a, b in zip(want, got, strict=True):
        assert np.array_equal(a.cs, b.cs) and np.array_equal(a.start_ok, b.start_ok)
        for name in ("start", "end", "filter_logits"):
            assert np.abs(getattr(a, name) - getattr(b, name)).max(initial=0) < TOL, name
    with pytest.raises(ValueError, match="bf16"):
        onnx.encode_passages(TEXTS, TITLES, bf16=True)
    # pickled as its directory (a Ray actor opens its own session)
    again = pickle.loads(pickle.dumps(onnx))
    assert again.graph.session is not onnx.graph.session
    assert np.array_equal(
        again.encode_passages(TEXTS[:2])[1].start, onnx.encode_passages(TEXTS[:2])[1].start
    )


def _tau_away_from_logits(model: PhraseEncoder, store: CorpusStore) -> float:
    """A filter threshold near the median logit, in the widest gap between logits there:
    more than the runtimes' difference away from every logit, so that no token's decision
    hangs on rounding (the test asserts the gap)."""
    enc = model.encode_passages(store.texts(), store.titles())
    logits = np.sort(np.concatenate([p.filter_logits.ravel() for p in enc]))
    mid = len(logits) // 2
    near = logits[mid - 20 : mid + 20]
    i = int(np.argmax(np.diff(near)))
    assert near[i + 1] - near[i] > 4 * TOL
    return float((near[i] + near[i + 1]) / 2)


def test_the_dumps_agree(
    model: PhraseEncoder, store: CorpusStore, cache: GraphCache, tmp_path: Path
) -> None:
    tau = _tau_away_from_logits(model, store)
    out = {}
    for runtime in ("torch", "onnx"):
        dump_phrases(
            store,
            model,
            tmp_path / f"work-{runtime}",
            tmp_path / runtime,
            threshold=tau,
            shard_size=2,
            batch_size=3,
            progress=False,
            runtime=runtime,
        )
        out[runtime] = {
            n: np.load(tmp_path / runtime / f"{n}.npy")
            for n in ("start", "end", "tokens", "filter", "passage_ptr")
        }
    t, o = out["torch"], out["onnx"]
    # the same tokens kept (flags, offsets, words), so the same rows of vectors
    assert np.array_equal(t["tokens"], o["tokens"]) and np.array_equal(
        t["passage_ptr"], o["passage_ptr"]
    )
    flags = t["tokens"][:, 3]
    assert (
        0
        < np.count_nonzero(flags)
        < len(model.encode_passages(store.texts(), store.titles())[0]) * len(store)
    )
    for n in ("start", "end", "filter"):  # float16 as stored: within a float16 step
        diff = np.abs(t[n].astype(np.float32) - o[n].astype(np.float32))
        scale = np.maximum(np.abs(t[n].astype(np.float32)), 1.0)
        assert (diff <= np.maximum(TOL, scale * 2**-10)).all(), n


def test_a_changed_weight_is_exported_again(
    model_dir: Path, cache: GraphCache, onnx: OnnxPassageEncoder
) -> None:
    m = PhraseEncoder.load(model_dir)
    first = passage_key(m)
    assert export_passages(m, cache) == onnx.directory  # cached: the same graph
    # the question side is another graph: changing it keeps the passage graph
    _perturb(m.q_start_head)
    assert passage_key(m) == first
    # a setting that cuts windows differently is another graph
    m.config.doc_stride = 12
    assert passage_key(m) != first
    m.config.doc_stride = 10
    _perturb(m.filter, scale=0.01)
    changed = export_passages(m, cache)
    assert changed != onnx.directory and changed.name == passage_key(m) != first
    assert (onnx.directory / "graph.onnx").is_file()  # the old graph stays for its model
    want = m.encode_passages(TEXTS, TITLES)
    got = OnnxPassageEncoder(changed).encode_passages(TEXTS, TITLES)
    old = onnx.encode_passages(TEXTS, TITLES)
    assert (
        max(
            np.abs(a.filter_logits - b.filter_logits).max(initial=0)
            for a, b in zip(want, got, strict=True)
        )
        < TOL
    )
    assert (
        max(
            np.abs(a.filter_logits - b.filter_logits).max(initial=0)
            for a, b in zip(want, old, strict=True)
        )
        > TOL
    )


def test_which_runtime_encodes(model: PhraseEncoder, cache: GraphCache) -> None:
    # auto is torch: faster for passages on a CPU (bench/passage_runtime.py)
    for runtime in ("torch", "auto", None):
        assert passage_encoder(model, runtime, cache=cache) is model
    assert isinstance(passage_encoder(model, "onnx", cache=cache), OnnxPassageEncoder)
    # float32 on this CPU only: bf16 (recorded in the index), a GPU and Ray actors are torch's
    for kw, what in (
        ({"bf16": True}, "bf16"),
        ({"executor": "ray"}, "ray"),
        ({"device": "cuda"}, "cuda"),
    ):
        with pytest.raises(AnygrainError, match=what):
            passage_encoder(model, "onnx", cache=cache, **kw)  # type: ignore[arg-type]
    assert passage_encoder(model, "onnx", executor="local", cache=cache) is not model
    with pytest.raises(AnygrainError):
        passage_encoder(model, "tensorrt", cache=cache)


def _build(squad: Path, model_dir: Path, out: Path, runtime: str) -> PhraseIndex:
    Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        progress=False,
        compress="none",
        keep=1.0,
        runtime=runtime,
        bf16=False,  # torch's auto is bf16 on a CPU with it natively; the graph is float32
        int8=False,  # auto is int8 where the CPU has int8 dot products and bf16 is off
    )
    idx = Index.load(out, runtime="torch")
    assert isinstance(idx, PhraseIndex)
    return idx


def test_an_index_built_on_onnx_searches_as_one_built_on_torch(
    model_dir: Path, cache: GraphCache, tmp_path: Path
) -> None:
    squad = write_squad(tmp_path / "squad.json")
    t = _build(squad, model_dir, tmp_path / "torch", "torch")
    o = _build(squad, model_dir, tmp_path / "onnx", "onnx")
    # the runtime is no setting of the index (the build's timings say how it encoded)
    manifest = json.loads((tmp_path / "onnx" / "index.json").read_text())
    assert manifest["timings"]["encoding"]["runtime"] == "onnx"
    manifest.pop("timings")
    assert "runtime" not in json.dumps(manifest)
    questions = [q for _, _, qas in PARAGRAPHS for q, _ in qas]
    for unit in (Unit.PHRASE, Unit.PASSAGE):
        ht, ho = t.search(questions, 5, unit=unit), o.search(questions, 5, unit=unit)
        for a, b in zip(ht, ho, strict=True):
            assert [(h.passage_row, h.span) for h in a] == [(h.passage_row, h.span) for h in b]
            assert np.allclose([h.score for h in a], [h.score for h in b], atol=TOL, rtol=0)


BLOCK = """
import importlib.abc, sys

class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError("No module named " + repr(name) + " (blocked by the test)")
        return None

sys.meta_path.insert(0, _Missing())
import json
import numpy as np
from anygrain.corpus.store import CorpusStore
from anygrain.phrase.dump import encode_shard
from anygrain.phrase.onnx import OnnxPassageEncoder

store = CorpusStore(sys.argv[2])
arrays = encode_shard(store, OnnxPassageEncoder(sys.argv[1]), range(len(store)), None,
                      batch_size=3, bf16=False)
np.save(sys.argv[3], arrays["start"])
print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)))
"""


def test_a_dump_on_onnx_imports_no_torch(
    model: PhraseEncoder, onnx: OnnxPassageEncoder, store: CorpusStore, tmp_path: Path
) -> None:
    out = tmp_path / "start.npy"
    r = subprocess.run(
        [sys.executable, "-c", BLOCK, str(onnx.directory), str(store.path), str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []
    want = encode_shard(store, model, range(len(store)), None, batch_size=3, bf16=False)
    assert np.abs(np.load(out) - want["start"]).max() < TOL


def test_index_and_add_take_the_runtime_on_the_command_line(
    model_dir: Path, cache: GraphCache, tmp_path: Path
) -> None:
    """``anygrain index --runtime onnx`` and ``add --runtime onnx`` write what torch writes;
    ``--from`` (nothing encoded) refuses the option by name."""
    from typer.testing import CliRunner

    from anygrain.cli.main import app

    run = CliRunner().invoke
    first, more = squad_parts(tmp_path, 2)
    for runtime in ("torch", "onnx"):
        out = tmp_path / runtime
        args = ["index", f"squad:{first}", "--kind", "phrase", "--out", str(out)]
        args += ["--model", str(model_dir), "--compress", "none", "--keep", "1", "-q"]
        args += ["--no-bf16", "--no-int8"]  # the float32 graph; auto may be bf16 or int8
        r = run(app, [*args, "--runtime", runtime])
        assert r.exit_code == 0, r.output
        r = run(app, ["add", str(out), f"squad:{more}", "--runtime", runtime, "-q"])
        assert r.exit_code == 0, r.output
    t, o = (np.load(tmp_path / r / "phrase" / "tokens.npy") for r in ("torch", "onnx"))
    assert len(t) > 0 and np.array_equal(t, o)
    t, o = (
        np.load(tmp_path / r / "phrase" / "filter.npy").astype(np.float32)
        for r in ("torch", "onnx")
    )
    assert np.abs(t - o).max() <= np.abs(t).max() * 2**-10
    r = run(
        app,
        [
            "index",
            "--kind",
            "hybrid",
            "--from",
            "a",
            "--from",
            "b",
            "--out",
            "c",
            "--runtime",
            "onnx",
        ],
    )
    assert r.exit_code != 0 and "--runtime" in r.output
