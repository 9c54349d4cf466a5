"""Graphs shipped without weights (anygrain.encode.shipped_graphs): stripping and rebuilding
a graph with NumPy, the NumPy rebuild of packed weights equal to torch's bit for bit, each
shipped graph belonging to the shipped weights, and equal to a fresh torch export."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anygrain.encode.cache_checks import write_checksums
from anygrain.encode.onnx_runtime import (
    GRAPH_FILE,
    META_FILE,
    TOKEN_TABLE_FILE,
    GraphCache,
    OnnxGraph,
)
from anygrain.encode.shipped_graphs import (
    MANIFEST,
    STRIPPED_GRAPH,
    check_sources,
    materialise,
    read_manifest,
    strip_graph,
)
from anygrain.models.packed_state import (
    PACKED_FILE,
    PACKED_PHRASE_CONFIG,
    PACKED_READER_CONFIG,
    PackedState,
    dequantize,
)
from anygrain.models.shipped import GRAPHS_DIR, SHIPPED, graph_sources, shipped_graph_record

pytest.importorskip("onnxruntime")
ENGLISH = ("phrase-minilm", "reader-minilm")


class DictSource:
    """A TensorSource over a dict of arrays."""

    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self.tensors = tensors

    def names(self) -> list[str]:
        return sorted(self.tensors)

    def tensor(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        return self.tensors[name][start:stop]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensors[name].shape)


def _tiny_graph(d: Path, w: np.ndarray, b: np.ndarray, table: np.ndarray) -> None:
    """``token_embeds (batch, seq, 4) -> out = reshape(x @ w.T + b)``, as the exporter writes
    a ``Linear``: the weight transposed, a shape constant that is no weight, a token table
    beside the graph."""
    x = helper.make_tensor_value_info("token_embeds", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", None])
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(w.T), "onnx::MatMul_7"),
        numpy_helper.from_array(b, "dense.bias"),
        numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("MatMul", ["token_embeds", "onnx::MatMul_7"], ["h"]),
        helper.make_node("Add", ["h", "dense.bias"], ["hb"]),
        helper.make_node("Reshape", ["hb", "shape"], ["out"]),
    ]
    g = helper.make_graph(nodes, "tiny", [x], [y], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(d / GRAPH_FILE))
    np.save(d / TOKEN_TABLE_FILE, table)
    (d / "tokenizer.json").write_text('{"model": {"vocab": [["a", -1.5]]}, "padding": null}')
    (d / META_FILE).write_text(
        json.dumps(
            {"export_version": 2, "kind": "tiny", "key": "tiny-k1", "token_table": TOKEN_TABLE_FILE}
        )
    )
    write_checksums(d)  # as GraphCache.write does: OnnxGraph opens only a checked entry


def _run(directory: Path, ids: np.ndarray) -> np.ndarray:
    g = OnnxGraph(directory, tokenize=False)
    g.meta["token_table"] = TOKEN_TABLE_FILE
    embeds = np.asarray(g.token_table[ids], dtype=np.float32)
    return np.asarray(g.session.run(None, {"token_embeds": embeds})[0])


def test_strip_and_materialise_a_graph(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)  # a Linear(4, 6) weight
    b = rng.standard_normal(6).astype(np.float32)
    table = rng.standard_normal((50, 4)).astype(np.float32)
    b16 = rng.standard_normal(16).astype(np.float32)  # a tensor no initializer is made of
    graph = tmp_path / "graph"
    graph.mkdir()
    _tiny_graph(graph, w, b, table)
    backbone = tmp_path / "backbone"
    backbone.mkdir()
    # the backbone's tokenizer: the same but for its float digits and padding settings
    (backbone / "tokenizer.json").write_text('{"model": {"vocab": [["a", -1.50000000001]]}}')
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"v1")
    source = DictSource(
        {
            "enc/dense.weight": w,
            "enc/dense.bias": b,
            "enc/emb": table,
            "x": b16,
        }
    )
    # the bias has 6 values (< 16): a constant kept in the graph, not a weight
    shipped = tmp_path / "shipped"
    m = strip_graph(
        graph, source, shipped, sources={"weights": weights}, backbone_dir=backbone,
        record={"fingerprint": "abc"},
    )  # fmt: skip
    assert [(i["name"], i["source"], i["transpose"]) for i in m["initializers"]] == [
        ("onnx::MatMul_7", "enc/dense.weight", True)
    ]
    assert m["token_table"] == {"file": TOKEN_TABLE_FILE, "source": "enc/emb"}
    assert m["from_backbone"] == ["tokenizer.json"] and m["key"] == "tiny-k1"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(
        [META_FILE, STRIPPED_GRAPH, MANIFEST]
    )
    kept = {i.name for i in onnx.load(str(shipped / STRIPPED_GRAPH)).graph.initializer}
    assert kept == {"dense.bias", "shape"}
    assert read_manifest(shipped)["record"] == {"fingerprint": "abc"}
    assert check_sources(shipped, {"weights": weights}) is None

    cache = GraphCache(tmp_path / "cache")
    entry = materialise(shipped, source, cache, backbone_dir=backbone)
    assert entry == cache.entry("tiny-k1") and cache.has("tiny-k1")
    ids = np.array([[1, 2, 3], [4, 5, 0]])
    np.testing.assert_array_equal(_run(entry, ids), _run(graph, ids))
    assert (entry / "tokenizer.json").read_bytes() == (backbone / "tokenizer.json").read_bytes()

    weights.write_bytes(b"v2")  # the weights changed: the graph is refused
    why = check_sources(shipped, {"weights": weights})
    assert why is not None and "changed since the graph was made (weights)" in why
    assert "records the files" in str(check_sources(shipped, {"other": weights}))


def test_numpy_dequantize_is_torch_bit_for_bit() -> None:
    torch = pytest.importorskip("torch")
    from anygrain.models.delta import PackSettings, quantize
    from anygrain.models.delta import dequantize as torch_dequantize

    for bits in (4, 8):
        s = PackSettings(bits=bits, group=64)
        delta = torch.randn(96, 128, generator=torch.Generator().manual_seed(bits)) * 0.01
        codes, scale = quantize(delta, s)
        want = torch_dequantize(codes, scale, delta.shape, s).numpy()
        got = dequantize(codes.numpy(), scale.numpy(), tuple(delta.shape), bits)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_file_names_agree_with_the_torch_modules() -> None:
    pytest.importorskip("torch")
    from anygrain.phrase import packed as phrase_packed
    from anygrain.reader import packed as reader_packed

    assert PACKED_PHRASE_CONFIG == phrase_packed.PACKED_CONFIG
    assert PACKED_READER_CONFIG == reader_packed.PACKED_READER_CONFIG
    assert PACKED_FILE == phrase_packed.PACKED_FILE == reader_packed.PACKED_FILE


@pytest.mark.parametrize("name", ENGLISH)
def test_packed_state_is_the_torch_model_bit_for_bit(name: str) -> None:
    pytest.importorskip("torch")
    from anygrain.models.base import load_model

    model = load_model(SHIPPED[name].path)
    state = PackedState.open(SHIPPED[name].path)
    if name.startswith("reader"):
        encoders = {"encoder": model.encoder}
        heads = {
            f"{h}.{k}": t
            for h in ("qa", "selector")
            for k, t in getattr(model, h).state_dict().items()
        }
    else:
        encoders = dict(zip(state.encoders, model.encoders(), strict=True))
        heads = model.head_modules().state_dict()
    n = 0
    for enc, module in encoders.items():
        for k, t in module.state_dict().items():
            if f"{enc}/{k}" in set(state.names()) and t.is_floating_point():
                np.testing.assert_array_equal(state.tensor(f"{enc}/{k}"), t.float().numpy(), k)
                n += 1
    for k, t in heads.items():
        np.testing.assert_array_equal(state.tensor(f"heads/{k}"), t.float().numpy(), k)
    assert n > 90


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_graphs_belong_to_the_shipped_weights(name: str) -> None:
    """Every shipped model ships its graphs, made from the files installed now (run
    ``python -m anygrain.tools.ship_graphs`` after changing a model); each is small."""
    from anygrain.tools.ship_graphs import exporters

    d = SHIPPED[name].path
    graphs = d / GRAPHS_DIR
    assert sorted(p.name for p in graphs.iterdir()) == sorted(exporters(d))
    state = PackedState.open(d)
    for kind in exporters(d):
        shipped = graphs / kind
        why = check_sources(shipped, graph_sources(d, state.backbone_dir))
        assert why is None, f"{shipped}: {why}; run python -m anygrain.tools.ship_graphs {name}"
        m = read_manifest(shipped)
        meta = json.loads((shipped / META_FILE).read_text())
        assert m["key"] == meta["key"] and m["kind"] == kind == meta["kind"]
        assert m["kept_values"] < 100  # the weights are all stripped
        assert sum(f.stat().st_size for f in shipped.iterdir()) < 1_000_000


def _feeds(meta: dict, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, min(vocab, 20000), size=(2, 12))
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # padded
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in meta["inputs"]:
        feeds["token_type_ids"] = np.zeros_like(ids)
    return feeds


@pytest.mark.parametrize("name", ENGLISH)
def test_shipped_graphs_equal_a_torch_export(name: str, tmp_path: Path) -> None:
    """The graph rebuilt with NumPy from the shipped form computes what a fresh torch export
    of the shipped model computes (to 1e-4), under the same key (the weights' fingerprint)."""
    pytest.importorskip("torch")
    from anygrain.tools.ship_graphs import exporters

    d = SHIPPED[name].path
    state = PackedState.open(d)
    for kind, export in exporters(d).items():
        fresh, _ = export(d, GraphCache(tmp_path / "torch"))
        made = materialise(d / GRAPHS_DIR / kind, state, GraphCache(tmp_path / "numpy"),
                           backbone_dir=state.backbone_dir)  # fmt: skip
        assert made.name == fresh.name  # the same key: the same weights
        a, b = OnnxGraph(fresh, tokenize=False), OnnxGraph(made, tokenize=False)
        feeds = _feeds(a.meta, len(a.token_table))
        for x, y in zip(a.run(feeds), b.run(feeds), strict=True):
            assert x.shape == y.shape
            np.testing.assert_allclose(y, x, atol=1e-4, rtol=0)


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(SHIPPED[name].path, out)
    return out


def test_a_shipped_graph_is_made_once_and_found_by_its_files(tmp_path: Path) -> None:
    from anygrain.encode.onnx_runtime import files_signature
    from anygrain.reader.onnx import KIND, OnnxReader, load_reader, model_files

    d = _copy("reader-minilm", tmp_path)
    cache = GraphCache(tmp_path / "cache")
    sig = files_signature(model_files(d))
    record = shipped_graph_record(d, KIND, cache, sig)
    assert record is not None
    key = read_manifest(d / GRAPHS_DIR / KIND)["key"]
    assert record["key"] == key and cache.files_record(sig) == record
    made = (cache.entry(key) / GRAPH_FILE).stat().st_mtime_ns
    reader = load_reader(d, "onnx", cache=cache)  # found by the files table, not made again
    assert isinstance(reader, OnnxReader) and reader.graph.directory == cache.entry(key)
    assert (cache.entry(key) / GRAPH_FILE).stat().st_mtime_ns == made


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove"])
def test_a_damaged_shipped_graph_is_refused_in_one_line(damage: str, tmp_path: Path) -> None:
    from anygrain.encode.onnx_runtime import files_signature
    from anygrain.errors import AnygrainError
    from anygrain.reader.onnx import KIND, model_files

    d = _copy("reader-minilm", tmp_path)
    graph = d / GRAPHS_DIR / KIND / STRIPPED_GRAPH
    data = bytearray(graph.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 1
        graph.write_bytes(bytes(data))
    elif damage == "truncate":
        graph.write_bytes(bytes(data[: len(data) // 2]))
    else:
        graph.unlink()
    cache = GraphCache(tmp_path / "cache")
    with pytest.raises(AnygrainError) as e:
        shipped_graph_record(d, KIND, cache, files_signature(model_files(d)))
    message = str(e.value)
    assert STRIPPED_GRAPH in message and "reinstall anygrain" in message
    assert "\n" not in message and not cache.has(read_manifest(graph.parent)["key"])


def test_a_changed_model_does_not_use_its_shipped_graph(tmp_path: Path) -> None:
    from anygrain.encode.onnx_runtime import files_signature
    from anygrain.reader.onnx import KIND, model_files

    d = _copy("reader-minilm", tmp_path)
    data = bytearray((d / PACKED_FILE).read_bytes())
    data[-1] ^= 1  # one bit of one weight
    (d / PACKED_FILE).write_bytes(bytes(data))
    cache = GraphCache(tmp_path / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record = shipped_graph_record(d, KIND, cache, files_signature(model_files(d)))
    assert record is None and not cache.root.exists()
    assert any(
        "packed.safetensors changed since the graph was made" in str(w.message) for w in caught
    )


QUESTIONS = ["Which NFL team represented the AFC at Super Bowl 50?", "Who?"]
PASSAGES = [
    "The Denver Broncos defeated the Carolina Panthers 24-10 to earn their third title. " * 20,
    "Super Bowl 50 was an American football game.",
]


def test_shipped_phrase_graphs_equal_the_torch_model(tmp_path: Path) -> None:
    """Questions and passages encoded on the graphs rebuilt with NumPy equal the torch
    model's (to 1e-4), the graphs found as a torch-free search and build find them."""
    pytest.importorskip("torch")
    from anygrain.phrase.graph_model import GraphPhraseModel
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.onnx import cached_questions

    d = SHIPPED["phrase-minilm"].path
    cache = GraphCache(tmp_path / "cache")
    model = PhraseEncoder.load(d)
    hit = cached_questions(d, cache)
    assert hit is not None and hit[1] == model.config.phrase_fingerprint
    for x, y in zip(
        model.encode_questions(QUESTIONS), hit[0].encode_questions(QUESTIONS), strict=True
    ):
        np.testing.assert_allclose(y, x, atol=1e-4, rtol=0)
    free = GraphPhraseModel(d, cache=cache)
    assert free.phrase_fingerprint() == model.config.phrase_fingerprint
    for a, b in zip(
        model.encode_passages(PASSAGES, ["Bowl", "Bowl"]),
        free.encode_passages(PASSAGES, ["Bowl", "Bowl"]),
        strict=True,
    ):
        np.testing.assert_array_equal(a.cs, b.cs)
        for f in ("start", "end", "filter_logits"):
            np.testing.assert_allclose(getattr(b, f), getattr(a, f), atol=1e-4, rtol=0, err_msg=f)


def test_shipped_reader_graph_equals_the_torch_reader(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from anygrain.reader.features import collate_arrays
    from anygrain.reader.model import Reader
    from anygrain.reader.onnx import OnnxReader, load_reader
    from anygrain.reader.read import windows_of

    d = SHIPPED["reader-minilm"].path
    onnx_reader = load_reader(d, "onnx", cache=GraphCache(tmp_path / "cache"))
    assert isinstance(onnx_reader, OnnxReader)
    torch_reader = Reader.load(d)
    w = windows_of(onnx_reader, QUESTIONS, PASSAGES, ["Bowl", None])
    w_torch = windows_of(torch_reader, QUESTIONS, PASSAGES, ["Bowl", None])
    assert len(w) == len(w_torch) > 2  # the first passage is read in several windows
    for a, b in zip(w, w_torch, strict=True):  # the tokenizers library cuts them the same
        assert a.input_ids == b.input_ids and a.token_type_ids == b.token_type_ids
        np.testing.assert_array_equal(a.offsets, b.offsets)
    batch = collate_arrays(w, torch_reader.tokenizer.pad_token_id)
    with torch_reader.reading():
        want = torch_reader.window_logits(batch)
    got = onnx_reader.window_logits(batch)
    mask = batch.attention_mask.astype(bool)
    np.testing.assert_allclose(got.start[mask], want.start[mask], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got.end[mask], want.end[mask], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got.selection, want.selection, atol=1e-4, rtol=0)
