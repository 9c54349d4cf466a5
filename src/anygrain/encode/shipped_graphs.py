"""Exported graphs without their weights: what a shipped model carries so no torch rebuilds it.

An exported graph directory (:mod:`anygrain.encode.onnx_runtime`: ``graph.onnx``, a token
table, a tokenizer, ``meta.json``) holds the model's weights a second time.  A shipped,
packed model already holds them (4-bit differences from a backbone installed beside it),
so its graph ships *stripped*: :func:`strip_graph` removes every weight initializer from
the graph and records which tensor of the model's state it is (``ENCODER/NAME``, and
whether the exporter transposed it, as it does for a ``Linear`` weight fed to ``MatMul``);
initializers that are not weights (shapes, masks' constants) stay in the graph.  The token
table is recorded the same way, and files equal to the backbone's (its ``tokenizer.json``)
are named instead of copied, so a stripped graph is a small fraction of its model.

:func:`materialise` reverses it with NumPy alone -- the tensors come from a
:class:`TensorSource` (for packed models, :class:`anygrain.models.packed_state.PackedState`)
-- into an ordinary graph directory in the :class:`~anygrain.encode.onnx_runtime.GraphCache`,
under the key the exporter gave it (the weights' fingerprint), so it is found, and run by
:class:`~anygrain.encode.onnx_runtime.OnnxGraph`, exactly as an exported one.  The graph is
rebuilt as an ONNX model in memory rather than passed to ONNX Runtime as separate
initializers (``SessionOptions.add_initializer`` replaces initializers a model still
declares; it cannot add removed ones), and cached, so only the first use pays for it.

The manifest (:data:`MANIFEST`) records the sha256 of every file the weights are made of
(the model's own files and the backbone's); :func:`check_sources` refuses a graph whose
model or backbone changed since it was stripped, so a stale graph is never used.

This module knows no model: a caller names the tensors and the files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from anygrain.encode.cache_checks import is_entry_file
from anygrain.encode.onnx_runtime import (
    EXPORT_VERSION,
    GRAPH_FILE,
    META_FILE,
    GraphCache,
    check_table_rows,
)
from anygrain.errors import AnygrainError
from anygrain.utils.atomic import atomic_dir

MANIFEST = "shipped.json"
FORMAT = "anygrain.shipped-graph"
FORMAT_VERSION = 1
STRIPPED_GRAPH = "graph.stripped.onnx"
# an initializer smaller than this is a constant of the graph (a shape, a scalar), kept
MIN_WEIGHT_SIZE = 16
# files of a graph directory never shipped: rebuilt from the weights
REBUILT = (GRAPH_FILE,)


class TensorSource(Protocol):
    """Where a stripped graph's weights come from: float32 tensors by name."""

    def names(self) -> Iterable[str]: ...

    def tensor(self, name: str) -> np.ndarray: ...

    def rows(self, name: str, start: int, stop: int) -> np.ndarray: ...

    def shape(self, name: str) -> tuple[int, ...]: ...


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _value_key(a: np.ndarray) -> tuple[tuple[int, ...], str]:
    a = np.ascontiguousarray(a, dtype=np.float32)
    return tuple(a.shape), hashlib.sha256(a.view(np.uint8).reshape(-1).data).hexdigest()


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` hold the same content; a tokenizer's JSON is compared without
    its padding and truncation settings, which the graph's meta sets anyway."""
    if not b.is_file():
        return False
    if a.read_bytes() == b.read_bytes():
        return True
    if a.suffix != ".json":
        return False
    try:
        x, y = json.loads(a.read_text(encoding="utf-8")), json.loads(b.read_text(encoding="utf-8"))
    except ValueError:
        return False
    if not (isinstance(x, dict) and isinstance(y, dict)):
        return False
    for d in (x, y):
        d.pop("padding", None)
        d.pop("truncation", None)
    # a saved tokenizer writes the scores it read as float32 with float64 digits: compare
    # as float32 (the file it was read from is the backbone's, the one then used)
    return bool(_as_float32(x) == _as_float32(y))


def _as_float32(v: Any) -> Any:
    if isinstance(v, float):
        return float(np.float32(v))
    if isinstance(v, list):
        return [_as_float32(i) for i in v]
    if isinstance(v, dict):
        return {k: _as_float32(i) for k, i in v.items()}
    return v


def strip_graph(
    graph_dir: Path,
    source: TensorSource,
    out: Path,
    *,
    sources: Mapping[str, Path],
    backbone_dir: Path | None = None,
    record: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the shippable form of the exported graph at ``graph_dir`` into ``out``
    (replaced atomically): the graph without the initializers found in ``source`` (by
    value, as stored or transposed), the other files of the directory except those equal to
    ``backbone_dir``'s, and the manifest.  ``sources``: the files the weights are made of,
    by a name that says what each is (their sha256 is recorded and checked at load);
    ``record``: what the caller wants back at load (e.g. the model's fingerprint and
    config).  Returns the manifest."""
    import onnx
    from onnx import numpy_helper

    meta = json.loads((graph_dir / META_FILE).read_text())
    model = onnx.load(str(graph_dir / GRAPH_FILE))
    inits = list(model.graph.initializer)
    wanted = {tuple(int(d) for d in i.dims) for i in inits}
    table_file = meta.get("token_table")
    table = np.load(graph_dir / str(table_file), mmap_mode="r") if table_file else None
    if table is not None:
        wanted.add(tuple(table.shape))
    # the state's tensors whose shape, as stored or transposed, an initializer has
    index: dict[tuple[tuple[int, ...], str], tuple[str, bool]] = {}
    for name in source.names():
        shape = source.shape(name)
        flipped = shape[::-1] if len(shape) == 2 else None
        if shape not in wanted and flipped not in wanted:
            continue
        t = source.tensor(name)
        if t.size < MIN_WEIGHT_SIZE:
            continue
        if shape in wanted:
            index.setdefault(_value_key(t), (name, False))
        if flipped is not None and flipped in wanted:
            index.setdefault(_value_key(t.T), (name, True))
    kept, stripped = [], []
    for init in inits:
        arr = numpy_helper.to_array(init)
        hit = (
            index.get(_value_key(arr))
            if arr.dtype == np.float32 and arr.size >= MIN_WEIGHT_SIZE
            else None
        )
        if hit is None:
            kept.append(init)
        else:
            stripped.append({"name": init.name, "source": hit[0], "transpose": hit[1]})
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    token_table = None
    if table is not None:
        hit = index.get(_value_key(table))
        if hit is None or hit[1]:
            raise AnygrainError(f"{graph_dir / str(table_file)}: not a tensor of the model")
        token_table = {"file": str(table_file), "source": hit[0]}
    left = sum(int(np.prod(i.dims)) for i in kept)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "export_version": EXPORT_VERSION,
        "key": str(meta["key"]),
        "kind": str(meta.get("kind", "")),
        "initializers": stripped,
        "kept_values": left,
        "token_table": token_table,
        "from_backbone": [],
        "sources": {k: sha256_file(p) for k, p in sources.items()},
        "record": dict(record or {}),
    }
    with atomic_dir(out) as staging:
        onnx.save(model, str(staging / STRIPPED_GRAPH))
        for f in sorted(graph_dir.iterdir()):
            if f.name in (*REBUILT, META_FILE, str(table_file)) or not f.is_file():
                continue
            if not is_entry_file(f.name):  # the cache's checksums: the cache writes its own
                continue
            if backbone_dir is not None and _same_file(f, backbone_dir / f.name):
                manifest["from_backbone"].append(f.name)
            else:
                shutil.copyfile(f, staging / f.name)
        shutil.copyfile(graph_dir / META_FILE, staging / META_FILE)
        manifest["files"] = shipped_files(staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        staging.chmod(0o755)  # package data: readable by all, as the model files beside it
    return manifest


def read_manifest(shipped: Path) -> dict[str, Any]:
    f = shipped / MANIFEST
    try:
        m = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise AnygrainError(f"{f}: unreadable shipped graph manifest ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise AnygrainError(f"{f}: not a shipped graph manifest (field format)")
    if m.get("format_version") != FORMAT_VERSION:
        raise AnygrainError(f"{f}: format_version {m.get('format_version')} is not supported")
    return m


def shipped_files(shipped: Path) -> dict[str, str]:
    """The sha256 of each file shipped beside the manifest (the stripped graph, its meta,
    tokenizer files), which :func:`materialise` checks before it builds on them."""
    return {
        f.name: sha256_file(f)
        for f in sorted(shipped.iterdir())
        if f.is_file() and f.name != MANIFEST
    }


def check_shipped_files(shipped: Path, m: Mapping[str, Any]) -> None:
    """One line naming a shipped file that is missing or differs from the one recorded
    (package data damaged after install); manifests from before the record pass."""
    for name, digest in (m.get("files") or {}).items():
        f = shipped / str(name)
        if not f.is_file():
            raise AnygrainError(f"{f}: missing from the installed package; reinstall anygrain")
        if sha256_file(f) != digest:
            raise AnygrainError(
                f"{f}: damaged (its sha256 differs from the one shipped); reinstall anygrain"
            )


def check_sources(shipped: Path, sources: Mapping[str, Path]) -> str | None:
    """Why the graph at ``shipped`` does not belong to the files ``sources`` (by the names
    given to :func:`strip_graph`), or None when every file is the one it was stripped
    against and the graph is of this anygrain's export version."""
    m = read_manifest(shipped)
    if m.get("export_version") != EXPORT_VERSION:
        return f"exported by another anygrain version (export version {m.get('export_version')})"
    recorded: dict[str, str] = m.get("sources", {})
    if set(recorded) != set(sources):
        return f"records the files {sorted(recorded)}, not {sorted(sources)}"
    for name, path in sources.items():
        if not Path(path).is_file():
            return f"{path} is missing"
        if sha256_file(Path(path)) != recorded[name]:
            return f"{path} changed since the graph was made ({name})"
    return None


def materialise(
    shipped: Path,
    source: TensorSource,
    cache: GraphCache,
    *,
    backbone_dir: Path | None = None,
    chunk_rows: int = 8192,
) -> Path:
    """The graph directory in ``cache`` of the stripped graph at ``shipped``, its weights
    taken from ``source`` (the caller checked them with :func:`check_sources`); made unless
    already cached, intact, under the manifest's key (a damaged entry is made again:
    :meth:`~anygrain.encode.onnx_runtime.GraphCache.write`)."""
    m = read_manifest(shipped)

    def fill(d: Path) -> None:
        check_shipped_files(shipped, m)  # only when the entry is made: once per install
        import onnx
        from numpy.lib.format import open_memmap
        from onnx import numpy_helper

        model = onnx.load(str(shipped / STRIPPED_GRAPH))
        for init in m["initializers"]:
            t = source.tensor(str(init["source"]))
            t = np.ascontiguousarray(t.T if init["transpose"] else t, dtype=np.float32)
            model.graph.initializer.append(numpy_helper.from_array(t, str(init["name"])))
        onnx.save(model, str(d / GRAPH_FILE))
        del model
        table = m.get("token_table")
        if table:
            name = str(table["source"])
            rows, width = source.shape(name)
            out = open_memmap(d / str(table["file"]), mode="w+", dtype=np.float32,
                              shape=(rows, width))  # fmt: skip
            for i in range(0, rows, chunk_rows):
                part = source.rows(name, i, min(rows, i + chunk_rows))
                check_table_rows(np.asarray(part), i, d / str(table["file"]))
                out[i : i + len(part)] = part
            out.flush()
            del out
        for f in shipped.iterdir():
            if f.name not in (MANIFEST, STRIPPED_GRAPH) and f.is_file():
                shutil.copyfile(f, d / f.name)
        for name in m.get("from_backbone", []):
            if backbone_dir is None or not (backbone_dir / name).is_file():
                raise AnygrainError(f"{shipped / MANIFEST}: the backbone's {name} is missing")
            shutil.copyfile(backbone_dir / name, d / name)

    return cache.write(str(m["key"]), fill)


def shipped_kinds(graphs_dir: Path) -> Sequence[str]:
    """The kinds of graph shipped under ``graphs_dir`` (one directory each)."""
    if not graphs_dir.is_dir():
        return []
    return sorted(p.name for p in graphs_dir.iterdir() if (p / MANIFEST).is_file())
