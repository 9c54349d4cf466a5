"""Regenerate the stripped ONNX graphs the shipped models carry (a developer command; torch).

    python -m anygrain.tools.ship_graphs [NAME ...]

For each shipped model (all by default) this loads it with torch, exports each graph its
runtime uses (the phrase model's question side, the reader) as a search would, and writes
the graph without its weights under ``models/data/NAME/graphs/KIND/``
(:func:`anygrain.encode.shipped_graphs.strip_graph`), each weight named by the packed
tensor it is rebuilt from, with the sha256 of every file those tensors come from.  Run it
after a shipped model or its backbone changes: a graph that no longer belongs to its
model's files is refused at load (and the model is exported with torch instead), and
``tests/test_shipped_graphs.py`` fails.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from anygrain.encode.onnx_runtime import GraphCache
from anygrain.encode.shipped_graphs import strip_graph
from anygrain.models.packed_state import PackedState
from anygrain.models.shipped import GRAPHS_DIR, SHIPPED, graph_sources

# what is exported for a graph kind: (model directory, cache) -> (graph directory, record)
Exporter = Callable[[Path, GraphCache], tuple[Path, dict[str, Any]]]


def _phrase_record(model: Any) -> dict[str, Any]:
    """What a phrase graph's files record holds (as a torch load records it): the phrase
    fingerprint and config the model loaded with."""
    return {
        "phrase_fingerprint": model.config.phrase_fingerprint or model.phrase_fingerprint(),
        "config": model.config.to_dict(),
    }


def _phrase_question(model_dir: Path, cache: GraphCache) -> tuple[Path, dict[str, Any]]:
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.onnx import export_questions

    model = PhraseEncoder.load(model_dir)
    return export_questions(model, cache), _phrase_record(model)


def _reader(model_dir: Path, cache: GraphCache) -> tuple[Path, dict[str, Any]]:
    from anygrain.reader.model import Reader
    from anygrain.reader.onnx import export_reader

    return export_reader(Reader.load(model_dir), cache), {}


def exporters(model_dir: Path) -> dict[str, Exporter]:
    """The graph kinds a model's runtime uses, with their exporters."""
    from anygrain.models.packed_state import PACKED_READER_CONFIG

    if (model_dir / PACKED_READER_CONFIG).is_file():
        from anygrain.reader.onnx import KIND as READER

        return {READER: _reader}
    from anygrain.phrase import onnx as phrase_onnx

    found: dict[str, Exporter] = {phrase_onnx.KIND: _phrase_question}
    passages = getattr(phrase_onnx, "export_passages", None)
    passage_kind = getattr(phrase_onnx, "PASSAGE_KIND", None)
    if passages is not None and passage_kind is not None:

        def _passages(d: Path, cache: GraphCache) -> tuple[Path, dict[str, Any]]:
            from anygrain.phrase.model import PhraseEncoder

            model = PhraseEncoder.load(d)
            return passages(model, cache), _phrase_record(model)

        found[str(passage_kind)] = _passages
    return found


def ship_model(model_dir: Path, *, work: Path) -> dict[str, Any]:
    """Write the stripped graphs of the packed model at ``model_dir``; returns, per kind,
    what was stripped."""
    state = PackedState.open(model_dir)
    sources = graph_sources(model_dir, state.backbone_dir)
    cache = GraphCache(work / model_dir.name)
    done: dict[str, Any] = {}
    for kind, export in exporters(model_dir).items():
        graph, record = export(model_dir, cache)
        out = model_dir / GRAPHS_DIR / kind
        m = strip_graph(
            graph,
            state,
            out,
            sources=sources,
            backbone_dir=state.backbone_dir,
            record=record,
        )
        size = sum(f.stat().st_size for f in out.iterdir())
        done[kind] = {
            "key": m["key"],
            "stripped": len(m["initializers"]),
            "kept_values": m["kept_values"],
            "token_table": (m["token_table"] or {}).get("source"),
            "from_backbone": m["from_backbone"],
            "bytes": size,
        }
    return done


def main(argv: Sequence[str]) -> int:
    names = list(argv) or list(SHIPPED)
    unknown = [n for n in names if n not in SHIPPED]
    if unknown:
        print(f"not a shipped model: {', '.join(unknown)}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="anygrain-ship-") as tmp:
        for name in names:
            out[name] = ship_model(SHIPPED[name].path, work=Path(tmp))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
