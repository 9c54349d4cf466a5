"""Dense encoding and search speed on SQuAD v1.1 dev paragraphs; prints one JSON object on stdout.

1. Passage encoding: anygrain's length-bucketed ``encode_passages`` against a plain
   transformers forward over the same texts in their input order (same model
   weights, batch size, max_length 256, padding to the longest in each batch,
   mean pooling + normalisation as the minilm alias does).  Target: ratio >= 1.0.
2. FAISS search: ``DenseIndex.search_vectors`` against the raw ``faiss.Index.search``
   on the same question vectors, all at once and one query per call.  Target: >= 0.9.
3. Peak RSS of a search over the memory-mapped index, each in a fresh subprocess so
   the number is the search's own (VmHWM; ru_maxrss is also given, but it carries the
   parent's peak across exec): the full ``Index.load`` + text search (model included),
   and FAISS alone with ready-made question vectors; ``before_search`` is the same
   process after imports and opening, so the difference is the search's own.

Usage: python bench/encode_speed.py [--n 1000] [--batch-size 64] [--queries 1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

DATA = Path(__file__).resolve().parents[2] / "shared/data/squad-v1.1/dev-v1.1.json"


def _mem() -> dict[str, float]:
    """Peak RSS of this process and its anonymous / file-backed split now, in MB.

    The peak is VmHWM: ``getrusage``'s ru_maxrss survives exec, so in a child it would
    report the parent's peak at fork time rather than the search's own.
    """
    out = {"ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            name = "peak_rss_mb" if key == "VmHWM" else f"{key.lower()}_mb"
            out[name] = round(int(val.split()[0]) / 1024, 1)
    return out


def child(mode: str, index_dir: str, queries_file: str) -> None:
    """Run in a subprocess: open the index memory-mapped, search, report memory."""
    if mode == "full":
        from anygrain.index.base import Index

        questions = json.loads(Path(queries_file).read_text())
        idx = Index.load(index_dir)
        before = _mem()
        t = time.perf_counter()
        hits = idx.search(questions, 10)
        dt = time.perf_counter() - t
        print(
            json.dumps(
                {"n_queries": len(hits), "seconds": round(dt, 3), **_mem(), "before_search": before}
            )
        )
    else:
        from anygrain.vectors.faiss_index import FaissIndex

        qv = np.load(queries_file)
        fx = FaissIndex.load(Path(index_dir) / "dense" / "faiss.index")
        before = _mem()
        t = time.perf_counter()
        fx.search(qv, 10)
        dt = time.perf_counter() - t
        print(
            json.dumps(
                {"n_queries": len(qv), "seconds": round(dt, 4), **_mem(), "before_search": before}
            )
        )


def _squad_store(path: Path, n: int, out: Path) -> Any:
    """A corpus of the first ``n`` SQuAD dev paragraphs, and the questions about them."""
    from anygrain.corpus.formats import parse_source
    from anygrain.corpus.store import CorpusStore

    src = parse_source(f"squad:{path}")
    docs, total = [], 0
    for d in src.documents():
        assert d.passages is not None
        d.passages = d.passages[: n - total]
        docs.append(d)
        total += len(d.passages)
        if total >= n:
            break
    store = CorpusStore.build(docs, out, progress=False)
    ids = set(store.column("id"))
    questions = [q.text for q in src.questions() if any(g in ids for g in q.gold)]
    return store, questions


def _plain_encode(model: Any, tok: Any, texts: list[str], titles: list[str], bs: int) -> np.ndarray:
    """What a user would write with transformers alone: fixed order, pad to longest in batch."""
    out = []
    with torch.inference_mode():
        for i in range(0, len(texts), bs):
            enc = tok(
                titles[i : i + bs],
                texts[i : i + bs],
                truncation="only_second",
                max_length=256,
                padding=True,
                return_tensors="pt",
            )
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(e, dim=-1).numpy())
    return np.concatenate(out)


def _race(fa: Any, fb: Any, repeats: int) -> tuple[float, float]:
    """Best time of each of two functions, run alternately so load drift hits both alike."""
    ta = tb = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fa()
        ta = min(ta, time.perf_counter() - t)
        t = time.perf_counter()
        fb()
        tb = min(tb, time.perf_counter() - t)
    return ta, tb


def _run_child(mode: str, index_dir: Path, qfile: Path) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(index_dir), str(qfile)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="passages (first N SQuAD dev paragraphs)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--queries", type=int, default=1000, help="questions for the search timings")
    ap.add_argument(
        "--repeats", type=int, default=1, help="encoding runs per side, alternating (best kept)"
    )
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument(
        "--child", nargs=3, metavar=("MODE", "INDEX", "QUERIES"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return

    from anygrain.dense.index import DenseIndex, DenseSettings, write_dense_index
    from anygrain.dense.shards import save_vectors
    from anygrain.index.settings import BuildOptions
    from anygrain.models.biencoder import BiEncoder

    report: dict[str, Any] = {
        "bench": "encode_speed",
        "n_passages": args.n,
        "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "bf16": False,
    }
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        store, questions = _squad_store(args.data, args.n, tmp / "corpus")
        texts, titles = store.texts(), store.titles()
        model = BiEncoder.from_pretrained("minilm")
        enc = model.passage
        report["model"] = "minilm"
        report["n_passages"] = len(texts)
        lengths = [len(x) for x in enc.tokenize(texts, titles, padding=False)["input_ids"]]
        report["tokens_per_passage"] = {
            "mean": round(float(np.mean(lengths)), 1),
            "max": max(lengths),
        }

        # 1. encoding: warm both paths, then time them alternately over the same texts.
        bs = args.batch_size
        model.encode_passages(texts[:8], titles[:8], batch_size=bs)
        _plain_encode(enc.model, enc.tokenizer, texts[:8], titles[:8], bs)
        vec_a: list[np.ndarray] = []
        vec_p: list[np.ndarray] = []
        t_plain = t_any = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            vec_p.append(_plain_encode(enc.model, enc.tokenizer, texts, titles, bs))
            t_plain = min(t_plain, time.perf_counter() - t)
            t = time.perf_counter()
            vec_a.append(model.encode_passages(texts, titles, batch_size=bs))
            t_any = min(t_any, time.perf_counter() - t)
        report["encode"] = {
            "anygrain_passages_per_s": round(len(texts) / t_any, 2),
            "plain_transformers_passages_per_s": round(len(texts) / t_plain, 2),
            "ratio": round(t_plain / t_any, 3),
            "max_abs_diff": float(np.abs(vec_a[-1] - vec_p[-1]).max()),
        }

        # 2. search: a Flat index over the same passages, questions about them.
        # The vectors just timed are written as shards, so building the index encodes nothing.
        out = tmp / "index"
        save_vectors(vec_a[-1], store, model, tmp / "vectors")
        options = BuildOptions(progress=False)
        write_dense_index(out, store, model, DenseSettings(), options, vectors_dir=tmp / "vectors")
        idx = DenseIndex.open(out, json.loads((out / "index.json").read_text()))
        qs = (questions * (1 + args.queries // max(1, len(questions))))[: args.queries]
        qv = idx.encode_queries(qs)
        raw = idx.faiss.index
        k = 10
        # Many alternating rounds, best of each: a search takes microseconds to milliseconds,
        # so one scheduler hiccup on a shared machine would otherwise decide the ratio.
        t_wrap, t_raw = _race(lambda: idx.search_vectors(qv, k), lambda: raw.search(qv, k), 50)
        one = qv[:200]
        t_wrap1, t_raw1 = _race(
            lambda: [idx.search_vectors(one[i : i + 1], k) for i in range(len(one))],
            lambda: [raw.search(one[i : i + 1], k) for i in range(len(one))],
            50,
        )
        report["search"] = {
            "factory": idx.faiss.factory,
            "k": k,
            "n_queries": len(qv),
            "batched": {
                "anygrain_qps": round(len(qv) / t_wrap),
                "raw_faiss_qps": round(len(qv) / t_raw),
                "ratio": round(t_raw / t_wrap, 3),
            },
            "one_per_call": {
                "anygrain_qps": round(len(one) / t_wrap1),
                "raw_faiss_qps": round(len(one) / t_raw1),
                "ratio": round(t_raw1 / t_wrap1, 3),
            },
        }

        # 3. memory of a search over the memory-mapped index, in fresh processes.
        qtext = tmp / "questions.json"
        qtext.write_text(json.dumps(qs[:200]))
        qvec = tmp / "qvecs.npy"
        np.save(qvec, qv)
        report["memory"] = {
            "faiss_index_mb": round((out / "dense" / "faiss.index").stat().st_size / 2**20, 2),
            "full_search": _run_child("full", out, qtext),
            "faiss_only_search": _run_child("faiss", out, qvec),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
