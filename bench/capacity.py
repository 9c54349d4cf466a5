"""Capacity plan: bytes per passage of each index kind, measured on built indexes, and what
a corpus of ``--passages`` (English Wikipedia: 21M DPR passages) would need.

Every figure comes from a file an earlier command wrote, never from a constant here:

* ``--index NAME=DIR`` (repeatable): a built anygrain index.  Its ``index.json`` gives the
  passage count, the size of every file and the encode time (``timings``/``*_seconds``).
  Model files are a fixed cost, counted apart; the corpus store is counted once
  (``corpus``) when it sits inside the index;
* ``--sweep FILE``: the JSON of ``bench/phrase_filter_sweep.py`` (phrase index bytes per
  passage at each filter threshold and compression);
* ``--scale FILE``: the JSON of ``bench/scale.py`` (encoding passages/s locally and per Ray
  worker count).

Projection: disk = bytes per passage x passages (+ the model), and with the corpus store
(which re-scoring reads at search time); search memory = the MIPS index files (FAISS or
BM25 arrays, a phrase index's BM25 part included, memory-mapped or loaded) x passages;
encoding worker-hours = passages / (passages/s of one worker) / 3600, a refiltered phrase
index's rate that of the dump it was refiltered from; FAISS hours linear in passages (a
small index over-counts the fixed training, a large one adds into more cells).  Prints one
JSON object.

    python bench/capacity.py --index dpr=runs/grain/bench/dpr --index bm25=runs/grain/bench/bm25 \
        --index phrase=runs/sq-phrase --sweep docs/phrase_filter_sweep.json --scale scale.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

WIKIPEDIA_PASSAGES = 21_015_324  # DPR's 100-word English Wikipedia passages (psgs_w100)
# the files a search needs in memory, by kind (the rest is read per hit, or not at all)
SEARCH_FILES = {
    "dense": (".index",),
    "phrase": (".faiss", "start_ids.npy", "end_ids.npy", "tokens.npy", "passage_ptr.npy"),
    "bm25": (".npy",),
}
# and the arrays of a phrase index's BM25 part (its lexical scores are fused into each
# search's), which the rows before issue 37 left out (0.5-0.7 KB per passage)
PHRASE_SPARSE = ("sparse/", ".npy")


def _seconds(x: Any, key: str) -> float:
    """The sum of every ``key`` (e.g. ``encode_seconds``) anywhere in ``x``."""
    if isinstance(x, dict):
        return sum(float(v) if k == key else _seconds(v, key) for k, v in x.items())
    if isinstance(x, list):
        return sum(_seconds(v, key) for v in x)
    return 0.0


def index_figures(name: str, path: Path, passages: int) -> dict[str, Any]:
    """Bytes per passage (all files but the model), search-memory bytes per passage, the
    model's bytes and, where the index records it, its encoding rate."""
    m = json.loads((path / "index.json").read_text())
    kind = m["kind"]
    n = int(m["corpus"]["n_passages"])
    files: dict[str, dict[str, Any]] = m.get("files", {})
    model_dir = (m.get("model") or {}).get("path")
    model = sum(f["size"] for p, f in files.items() if model_dir and p.startswith(model_dir))
    data = sum(
        f["size"]
        for p, f in files.items()
        if not (model_dir and p.startswith(model_dir)) and not p.startswith("corpus/")
    )
    corpus = sum(f["size"] for p, f in files.items() if p.startswith("corpus/"))
    # a store outside the index (a refiltered phrase index reads its source's): the sizes
    # its manifest recorded of it
    corpus = corpus or sum(f["size"] for f in (m.get("corpus_files") or {}).values())
    search = sum(
        f["size"]
        for p, f in files.items()
        if not (model_dir and p.startswith(model_dir))
        and not p.startswith("corpus/")
        and (
            p.endswith(SEARCH_FILES.get(kind, ()))
            or (
                kind == "phrase" and p.startswith(PHRASE_SPARSE[0]) and p.endswith(PHRASE_SPARSE[1])
            )
        )
    )
    settings = m.get("settings") or {}
    # a refiltered index's vectors were encoded by the dump of the index it came from
    source = (settings.get("refiltered_from") or {}).get("path")
    dumped = json.loads((Path(source) / "index.json").read_text()) if source else m
    encode_s = _seconds(dumped, "encode_seconds") + _seconds(dumped, "dump_seconds")
    faiss_s = _seconds(m.get("timings") or {}, "faiss_seconds")
    out: dict[str, Any] = {
        "kind": kind,
        "path": str(path),
        "n_passages": n,
        "index_bytes_per_passage": round(data / n, 1),
        "search_memory_bytes_per_passage": round(search / n, 1),
        "corpus_bytes_per_passage": round(corpus / n, 1) if corpus else None,
        "model_bytes": model,
    }
    if kind == "phrase":
        out["settings"] = {
            k: settings.get(k) for k in ("compress", "factory", "threshold", "bf16", "rescore")
        }
        out["vectors_per_passage"] = (m.get("counts") or {}).get("vectors_per_passage")
    if encode_s:
        out["encode_passages_per_s"] = round(n / encode_s, 2)
        if source:
            out["encoded_by"] = source
    if faiss_s:
        out["faiss_seconds_per_1k_passages"] = round(1000 * faiss_s / n, 2)
    out["projection"] = project(out, passages)
    return out


def project(fig: dict[str, Any], passages: int) -> dict[str, Any]:
    gb = 1e9
    p: dict[str, Any] = {
        "passages": passages,
        "index_disk_gb": round(fig["index_bytes_per_passage"] * passages / gb, 1),
        "search_memory_gb": round(fig["search_memory_bytes_per_passage"] * passages / gb, 1),
    }
    corpus = fig.get("corpus_bytes_per_passage")
    if corpus:
        # every kind shows hits from the corpus store; re-scoring (issue 37) also reads the
        # re-scored passages' text from it at search time, so it is on disk beside the index
        p["corpus_store_disk_gb"] = round(corpus * passages / gb, 1)
        p["disk_with_corpus_gb"] = round(p["index_disk_gb"] + p["corpus_store_disk_gb"], 1)
    rate = fig.get("encode_passages_per_s")
    if rate:
        p["encode_worker_hours"] = round(passages / rate / 3600, 1)
    faiss = fig.get("faiss_seconds_per_1k_passages")
    if faiss:
        # linear in passages: training is a fixed cost (over-counted from a small index),
        # adding grows faster where the IVF cells grow with sqrt(vectors)
        p["faiss_hours_linear"] = round(faiss * passages / 1000 / 3600, 1)
    return p


def sweep_figures(path: Path, passages: int) -> list[dict[str, Any]]:
    d = json.loads(path.read_text())
    rows = []
    base = next(
        (p for p in d["points"] if p["setting"] == "keep=1" and p["compress"] == "none"), None
    )
    for p in d["points"]:
        b = float(p["bytes_per_passage"])
        row = {
            "setting": p["setting"],
            "compress": p["compress"],
            "factory": p["factory"],
            "vectors_per_passage": p["vectors_per_passage"],
            "index_bytes_per_passage": b,
            "smaller_than_float16": round(base["bytes_per_passage"] / b, 1) if base else None,
            "index_disk_gb": round(b * passages / 1e9, 1),
        }
        if "passage" in p:
            row["passage_top@5"] = p["passage"].get("top@5")
        if "phrase" in p:
            row["phrase_em"] = p["phrase"].get("em")
        rows.append(row)
    return rows


def scale_figures(path: Path, passages: int) -> dict[str, Any]:
    enc = json.loads(path.read_text())["encoding"]
    out: dict[str, Any] = {}
    for name, run in enc.items():
        if isinstance(run, dict) and "passages_per_s" in run:
            rate = float(run["passages_per_s"])
            out[name] = {
                "passages_per_s": rate,
                "hours_for_corpus": round(passages / rate / 3600, 1),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", action="append", default=[], help="NAME=DIR of a built index")
    ap.add_argument("--sweep", type=Path, help="bench/phrase_filter_sweep.py JSON")
    ap.add_argument("--scale", type=Path, help="bench/scale.py JSON")
    ap.add_argument("--passages", type=int, default=WIKIPEDIA_PASSAGES)
    args = ap.parse_args()
    report: dict[str, Any] = {"passages": args.passages, "indexes": {}}
    for spec in args.index:
        name, _, d = spec.partition("=")
        if not d:
            ap.error(f"--index {spec}: give NAME=DIR")
        report["indexes"][name] = index_figures(name, Path(d), args.passages)
    if args.sweep:
        report["phrase_filter_and_compression"] = sweep_figures(args.sweep, args.passages)
    if args.scale:
        report["encoding"] = scale_figures(args.scale, args.passages)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
