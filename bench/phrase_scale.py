"""Issue 37's open test at scale: what a 10x larger corpus costs the default phrase index,
BM25 and the BM25 + dense hybrid, on SQuAD v1.1 dev questions.

Two corpora, one document per paragraph, written as SQuAD-format JSON (contexts only,
``qas: []``) under ``--work`` from the files in place in ../shared/data:

* ``scale``: every SQuAD v1.1 paragraph (dev and train) and the SQuAD-Shifts paragraphs
  (new_wiki, amazon_reviews, reddit): 26,629 passages, in bench/build_memory.py's order
  (dev, Shifts, train: the first N of ``--max-passages`` then still hold dev answers);
* ``dev``: the 2,067 SQuAD v1.1 dev paragraphs alone.

For each corpus and system (``phrase``: the default phrase index, or the one given;
``bm25``; ``hybrid``: BM25 + dense ``minilm`` zero-shot, z-score, what ``anygrain index
--kind hybrid --from BM25 --from DENSE`` makes; ``dense`` on request) one row: passage
top@1/5/20 (answer containment, ``anygrain eval --unit passage``), for phrase indexes open
EM/F1 of the top phrase too, once per ``--phrase-search-options`` JSON (repeatable); questions
per second by wall time and by this process's CPU seconds (``cpu_qps``: what an idle core
would give when others share it; the first 4 questions are searched once before, so loading
the models is not timed); KB per passage of every index file but the corpus store (a
combined hybrid's parts counted), and the corpus store's apart.

    python bench/phrase_scale.py --work runs/scale/bench --threads 1 --shuffle 0 \\
        --phrase-index runs/scale/phrase-pq --bm25-index runs/scale/bm25 \\
        --dense-index runs/scale/dense --hybrid-index runs/scale/hybrid \\
        --dev-phrase-index runs/i37/pq-0.25 --phrase-search-options '{"rescore": 0}' \\
        --phrase-search-options '{"rescore": 1, "rescore_tokens": "all"}' --out scale.json
    python bench/phrase_scale.py --work /tmp/scale-smoke --max-passages 300 --limit 50

An index not given is built under ``--work/CORPUS/`` if missing (so a run resumes), in a
child process (bench/build_memory.py's ``run_traced``) whose peak RSS (its own ``VmHWM``;
``ru_maxrss`` of ``wait4`` is at least this process's RSS at the spawn, Linux keeping it across
exec), wall and CPU seconds the row records; the dense index is built from the BM25
index's corpus store, so the two combine.  ``--phrase-build-options`` JSON is what a built
phrase index gets besides the corpus ({}: the kind's defaults).  Each finished row is kept
in ``--work/rows/`` and reused by a rerun with the same index, options and questions.
Prints one JSON object (rows; per system and options the scale-minus-dev difference of each
metric and the scale/dev ratio of questions per CPU second; the command, machine, commit) on
stdout and to ``--out``; progress on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import index_bytes, log  # noqa: E402
from build_memory import SOURCES, SQUAD_DEV, run_traced  # noqa: E402

from anygrain.utils.atomic import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: each corpus: its SQuAD-format source files (in this order) and the passages they hold
CORPORA: dict[str, tuple[list[Path], int | None]] = {
    "scale": (list(SOURCES), 26_629),
    "dev": ([SQUAD_DEV], 2_067),
}
SYSTEMS = ("phrase", "bm25", "dense", "hybrid")
PASSAGE_METRICS = ["top@1", "top@5", "top@20"]
WARM = 4  # questions searched before a timed evaluation
#: a phrase index's recorded settings a row shows (re-scoring's: the search defaults)
PHRASE_SETTINGS = ("compress", "factory", "threshold", "keep", "bf16", "rescore")
PHRASE_SETTINGS += ("rescore_margin", "rescore_tokens")


def write_corpus(sources: list[Path], out: Path, limit: int | None) -> int:
    """One SQuAD-format file of ``sources``' paragraphs (titles and contexts, no questions),
    cut at ``limit`` paragraphs; the number written."""
    articles, n = [], 0
    for src in sources:
        if not src.exists():
            sys.exit(f"{src}: not found (expected under ../shared/data)")
        for a in json.loads(src.read_text(encoding="utf-8"))["data"]:
            paras = [{"context": p["context"], "qas": []} for p in a["paragraphs"]]
            if limit is not None:
                paras = paras[: max(0, limit - n)]
            if paras:
                articles.append({"title": a.get("title", ""), "paragraphs": paras})
                n += len(paras)
    atomic_write_text(out, json.dumps({"version": "1.1", "data": articles}))
    return n


def corpus_file(work: Path, name: str, limit: int | None) -> tuple[Path, int]:
    """The corpus ``name``'s SQuAD file under ``work`` (written if missing) and its
    passage count, checked against the expected one for a full corpus."""
    sources, expected = CORPORA[name]
    out = work / f"{name}.json"
    count = work / f"{name}.count"
    if not (out.exists() and count.exists()):
        n = write_corpus(sources, out, limit)
        atomic_write_text(count, str(n))
    n = int(count.read_text())
    if limit is None and expected is not None and n != expected:
        sys.exit(f"{out}: {n} passages, expected {expected} (sources changed?)")
    return out, n


def corpus_dir(index: Path) -> Path:
    """Where an index's corpus store lives (its manifest's ``corpus.path``)."""
    m = json.loads((index / "index.json").read_text())
    return (index / m["corpus"]["path"]).resolve()


def child_build(kind: str, out: str, source: str, options: str, threads: int) -> None:
    from anygrain.api import build_index

    c = time.process_time()
    idx = build_index(
        source, kind=kind, out=out, threads=threads, progress=False, **json.loads(options)
    )
    m = idx.manifest
    # this process's own high-water mark: wait4's ru_maxrss is at least the parent's resident
    # set at the spawn (Linux carries it across exec; measured: 600 MB for a child of 13 MB)
    hwm = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    print(
        json.dumps(
            {
                "peak_rss_mb": round(hwm / 1024, 1),
                "cpu_seconds": round(time.process_time() - c, 1),
                "passages": m["corpus"]["n_passages"],
                "settings": m.get("settings"),
            }
        )
    )


def built(
    a: argparse.Namespace,
    given: Path | None,
    out: Path,
    kind: str,
    source: Path,
    options: dict[str, Any],
) -> tuple[Path, dict[str, Any] | None]:
    """The index given, or the one at ``out`` (built in a child process if missing) and
    its build record (peak RSS, seconds; None for an index given)."""
    if given is not None:
        if not (given / "index.json").exists():
            sys.exit(f"{given}: no index.json (not a built index)")
        return given, None
    record = out.with_name(out.name + ".build.json")
    if not (out / "index.json").exists():
        log(f"building {kind} index {out} from {source}")
        me = [sys.executable, __file__, "--threads", str(a.threads), "--work", str(a.work)]
        cmd = [*me, "--child", kind, str(out), str(source), json.dumps(options)]
        res = run_traced(cmd, interval=1.0)
        rec = {
            "kind": kind,
            "source": str(source),
            "options": options,
            "threads": a.threads,
            "wall_seconds": res["wall_seconds"],
            "ru_maxrss_mb": res["peak_rss_mb"],  # at least the parent's RSS at the spawn
            "peak_sampled_rss_mb": res["peak_sampled"]["rss_mb"],
            **(res["child"] or {}),
        }
        atomic_write_text(record, json.dumps(rec, indent=1))
        log(f"built {out}: {rec['wall_seconds']} s, peak {rec['peak_rss_mb']} MB")
    return out, (json.loads(record.read_text()) if record.exists() else None)


def brief(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A build record's peak RSS and seconds (the whole record is in ``builds``)."""
    keys = ("peak_rss_mb", "wall_seconds", "cpu_seconds")
    return None if record is None else {k: record.get(k) for k in keys}


def hybrid_of(given: Path | None, out: Path, bm25: Path, dense: Path) -> Path:
    if given is not None:
        return given
    if not (out / "index.json").exists():
        from anygrain.api import combine_hybrid

        log(f"combining {bm25} and {dense} into {out}")
        combine_hybrid(bm25, dense, out, threads=1)
    return out


def sizes(path: Path) -> dict[str, float]:
    """Bytes per passage of the index's files but the corpus store (a combined hybrid's
    parts, which live elsewhere, included) and of the corpus store."""
    from anygrain.composite.hybrid import HybridIndex

    m = json.loads((path / "index.json").read_text())
    n = int(m["corpus"]["n_passages"])
    dirs = [path]
    if m.get("components"):
        dirs += HybridIndex.part_dirs(path, m)
    total = sum(sum(index_bytes(d).values()) for d in dirs)
    store = sum(f.stat().st_size for f in corpus_dir(path).rglob("*") if f.is_file())
    out = {"kb_per_passage": round(total / n / 1000, 2)}
    if m["kind"] == "phrase":
        parts = index_bytes(path)
        out["kb_per_passage_phrase"] = round(parts["phrase"] / n / 1000, 2)
        out["kb_per_passage_bm25"] = round(parts["sparse"] / n / 1000, 2)
    out["corpus_store_kb_per_passage"] = round(store / n / 1000, 2)
    return out


def timed_eval(idx: Any, qs: Any, opts: dict[str, Any], **kw: Any) -> tuple[Any, float, float]:
    from anygrain.api import evaluate_index

    t, c = time.perf_counter(), time.process_time()
    rep = evaluate_index(idx, qs, progress=False, search_options=opts or None, **kw)
    return rep, time.perf_counter() - t, time.process_time() - c


def evaluate_row(path: Path, system: str, qs: Any, opts: dict[str, Any]) -> dict[str, Any]:
    """One (corpus, system, options) row: passage top@k, phrase EM/F1, questions/s."""
    from anygrain import Index

    idx = Index.load(path)
    n = len(qs)
    # what a server has loaded before its first request (models, re-scoring's torch model)
    idx.search([q.text for q in list(qs)[:WARM]], 1, **opts)
    row: dict[str, Any] = {}
    if system == "phrase":
        rep, secs, cpu = timed_eval(idx, qs, opts, metrics=["em", "f1"], k=1)
        row.update({m: round(100 * v, 2) for m, v in rep.metrics.items()})
        row.update(
            seconds=round(secs, 2),
            cpu_seconds=round(cpu, 2),
            qps=round(n / secs, 2),
            cpu_qps=round(n / cpu, 2),
        )
    rep, secs, cpu = timed_eval(idx, qs, opts, metrics=PASSAGE_METRICS, unit="passage")
    row.update({m: round(v, 4) for m, v in rep.metrics.items()})
    pre = "passage_" if system == "phrase" else ""
    row.update(
        {
            f"{pre}seconds": round(secs, 2),
            f"{pre}cpu_seconds": round(cpu, 2),
            f"{pre}qps": round(n / secs, 2),
            f"{pre}cpu_qps": round(n / cpu, 2),
        }
    )
    return row


def row_key(path: Path, opts: dict[str, Any], a: argparse.Namespace, n_q: int) -> str:
    """A cached row's name: the index (its path and build time), options and questions."""
    m = json.loads((path / "index.json").read_text())
    what = [str(path.resolve()), m.get("created"), opts, a.questions, a.limit, a.shuffle, n_q]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def cost_of_scale(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scale minus dev, per system and search options, for every metric both rows have;
    speed as the ratio scale / dev (``*_ratio``)."""
    metrics = ["em", "f1", *PASSAGE_METRICS]
    speeds = ["cpu_qps", "passage_cpu_qps"]
    by = {(r["corpus"], r["system"], json.dumps(r["search_options"])): r for r in rows}
    out = []
    for (corpus, system, opts), big in by.items():
        small = by.get(("dev", system, opts))
        if corpus != "scale" or small is None:
            continue
        d: dict[str, Any] = {"system": system, "search_options": big["search_options"]}
        d["passages"] = [small["passages"], big["passages"]]
        for m in metrics:
            if m in big and m in small:
                d[m] = round(big[m] - small[m], 4)
        for m in speeds:
            if big.get(m) and small.get(m):
                d[f"{m}_ratio"] = round(big[m] / small[m], 3)
        out.append(d)
    return out


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "loadavg_at_start": list(os.getloadavg()),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    return {"head": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        sys.exit(f"{flag} {text!r}: not JSON ({e})")
    if not isinstance(d, dict):
        sys.exit(f"{flag} {text!r}: give a JSON object")
    return d


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="corpora, built indexes, rows")
    ap.add_argument("--questions", default=f"squad:{SQUAD_DEV}", help="FORMAT:PATH")
    ap.add_argument("--limit", type=int, default=None, help="the first N questions")
    ap.add_argument(
        "--shuffle",
        type=int,
        default=None,
        help="search the questions in a random order (seed): SQuAD lists a paragraph's "
        "questions together, so a batch in file order re-scores passages it shares",
    )
    ap.add_argument("--max-passages", type=int, default=None, help="first N of each corpus")
    ap.add_argument("--corpora", default="scale,dev", help="scale,dev (comma-separated)")
    ap.add_argument("--systems", default="phrase,bm25,hybrid", help=",".join(SYSTEMS))
    ap.add_argument("--threads", type=int, default=1)
    for corpus, flag in (("", ""), ("dev-", "the dev corpus's ")):
        for kind in SYSTEMS:
            ap.add_argument(
                f"--{corpus}{kind}-index", type=Path, default=None, help=f"{flag}{kind} index"
            )
    ap.add_argument("--phrase-build-options", default="{}", help="JSON, for a phrase build")
    ap.add_argument("--dense-model", default="minilm", help="the hybrid's dense model")
    ap.add_argument(
        "--phrase-search-options",
        action="append",
        default=None,
        help='JSON, a phrase row each (repeatable; default {}), e.g. {"rescore": 1}',
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    from anygrain.utils.threads import set_threads

    set_threads(a.threads)
    if a.child:
        child_build(*a.child, threads=a.threads)
        return {}
    from anygrain.api import load_questions
    from anygrain.corpus.questions import Questions

    phrase_build = json_object(a.phrase_build_options, "--phrase-build-options")
    searches = [
        json_object(s, "--phrase-search-options") for s in a.phrase_search_options or ["{}"]
    ]
    systems = [s for s in a.systems.split(",") if s]
    corpora = [c for c in a.corpora.split(",") if c]
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"--systems {s}: one of {', '.join(SYSTEMS)}")
    for c in corpora:
        if c not in CORPORA:
            ap.error(f"--corpora {c}: one of {', '.join(CORPORA)}")
    work = a.work.resolve()
    qs = load_questions(a.questions, limit=a.limit)
    if a.shuffle is not None:
        items = list(qs)
        random.Random(a.shuffle).shuffle(items)
        qs = Questions(items, source=qs.source, format=qs.format)
    log(f"{len(qs)} questions from {a.questions}")
    rows: list[dict[str, Any]] = []
    builds: dict[str, Any] = {}
    report: dict[str, Any] = {
        "command": shlex.join(["python", *(sys.argv if argv is None else [__file__, *argv])]),
        "machine": machine(),
        "commit": commit(),
        "questions": a.questions,
        "n_questions": len(qs),
        "shuffle": a.shuffle,
        "max_passages": a.max_passages,
        "threads": a.threads,
        "corpora": {},
        "builds": builds,
        "rows": rows,
    }
    for corpus in corpora:
        tag = corpus if a.max_passages is None else f"{corpus}-first{a.max_passages}"
        d = work / tag
        d.mkdir(parents=True, exist_ok=True)
        source, n_p = corpus_file(d, corpus, a.max_passages)
        report["corpora"][corpus] = {"file": str(source), "passages": n_p}

        def given(kind: str, c: str = corpus) -> Path | None:
            v = getattr(a, f"{'dev_' if c == 'dev' else ''}{kind}_index")
            return None if v is None else Path(v)

        paths: dict[str, Path] = {}
        if "phrase" in systems:
            paths["phrase"], builds[f"{corpus}/phrase"] = built(
                a, given("phrase"), d / "phrase", "phrase", source, phrase_build
            )
        if {"bm25", "dense", "hybrid"} & set(systems):
            paths["bm25"], builds[f"{corpus}/bm25"] = built(
                a, given("bm25"), d / "bm25", "bm25", source, {}
            )
        if {"dense", "hybrid"} & set(systems) and not ("hybrid" in systems and given("hybrid")):
            # from the BM25 index's corpus store: the same rows, so the two combine
            paths["dense"], builds[f"{corpus}/dense"] = built(
                a, given("dense"), d / "dense", "dense", corpus_dir(paths["bm25"]),
                {"model": a.dense_model},
            )  # fmt: skip
        if "hybrid" in systems:
            paths["hybrid"] = hybrid_of(
                given("hybrid"), d / "hybrid", paths["bm25"], paths.get("dense", Path())
            )
        for system in systems:
            path = paths[system]
            for opts in searches if system == "phrase" else [{}]:
                key = row_key(path, opts, a, len(qs))
                cached = work / "rows" / f"{tag}.{system}.{key}.json"
                if cached.exists():
                    log(f"{tag} {system} {opts}: from {cached}")
                    rows.append(json.loads(cached.read_text()))
                    continue
                log(f"{tag} {system} {opts}: {len(qs)} questions over {n_p} passages")
                m = json.loads((path / "index.json").read_text())
                row: dict[str, Any] = {
                    "corpus": corpus,
                    "system": system,
                    "index": str(path),
                    # the bench's build of it (peak RSS, seconds; this run or an earlier one); None: given
                    "build": (
                        {k: brief(builds.get(f"{corpus}/{k}")) for k in ("bm25", "dense")}
                        if system == "hybrid"
                        else brief(builds.get(f"{corpus}/{system}"))
                    ),
                    "passages": int(m["corpus"]["n_passages"]),
                    "search_options": opts,
                    "n_questions": len(qs),
                    "threads": a.threads,
                    **sizes(path),
                }
                if system == "phrase":
                    s = m.get("settings", {})
                    row["settings"] = {k: s.get(k) for k in PHRASE_SETTINGS}
                    row["vectors_per_passage"] = m.get("counts", {}).get("vectors_per_passage")
                row.update(evaluate_row(path, system, qs, opts))
                shown = ("em", "f1", *PASSAGE_METRICS, "cpu_qps", "passage_cpu_qps")
                log(json.dumps({k: row[k] for k in shown if k in row}))
                atomic_write_text(cached, json.dumps(row))
                rows.append(row)
    report["cost_of_scale"] = cost_of_scale(rows)
    text = json.dumps(report, indent=1)
    if a.out is not None:
        atomic_write_text(a.out, text)
    print(text)
    return report


if __name__ == "__main__":
    main()
