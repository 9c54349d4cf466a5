"""Phrase filter sweep: index size against accuracy (Lee, Wettig & Chen, 2021, Figure 4).

From one phrase index built with its float16 dump (``anygrain index --kind phrase``,
the default ``--compress none``), writes one refiltered index per filter setting
(``anygrain refilter``: a higher threshold from the stored vectors, no re-encoding),
optionally per compression too, and measures for each

* vectors per passage and index bytes per passage (every file of the phrase index but
  the model: FAISS indexes, dump if kept, token metadata),
* passage top@1 / top@5 (passages ranked by their best phrase),
* phrase EM / F1 of the top phrase over the open corpus,

then prints one JSON object (also written to ``--out``) and plots top@5 and EM against
vectors per passage to ``--plot`` (PNG).

    python bench/phrase_filter_sweep.py INDEX_DIR --questions squad:dev-v1.1.json \\
        --keep 1,0.5,0.25,0.1 [--thresholds 0,1,2] [--compress none,sq8,opq-pq] \\
        --work runs/sweep --plot sweep.png [--out sweep.json] [--limit 1000]

``--keep`` gives fractions of the source's vectors to keep (each turned into a threshold
tau), ``--thresholds`` taus directly; both may be given.  ``--qat-model DIR`` adds, for each
point compressed with ``--qat-compress`` (default ``opq-pq``), a row searched with that
question encoder: one fine-tuned against decoded vectors of a compressed index of the
TRAINING paragraphs (quantisation-aware query-side training, ``bench/phrase_query_side.py
--compress opq-pq``), as DensePhrases does.  Refiltered indexes are kept
under ``--work`` and reused by a rerun with the same settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from anygrain.api import evaluate_index, load_questions
from anygrain.index.base import Index
from anygrain.phrase import PhraseIndex
from anygrain.phrase.compress import Compress
from anygrain.phrase.refilter import refilter, threshold_for_fraction


def _floats(s: str | None) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()] if s else []


def _index_for(
    src: PhraseIndex, work: Path, tau: float, compress: Compress, progress: bool
) -> PhraseIndex:
    """The refiltered index at ``tau`` (reused when one with these settings exists)."""
    out = work / f"tau{tau:+.4f}-{compress.value}"
    if (out / "index.json").exists():
        idx = Index.load(out)
        s = idx.manifest["settings"]
        if (
            isinstance(idx, PhraseIndex)
            and abs(float(s["threshold"]) - tau) < 1e-9
            and s.get("compress", "none") == compress.value
            and s.get("refiltered_from", {}).get("path") == str(src.path)
        ):
            return idx
        import shutil

        shutil.rmtree(out)
    return refilter(src, out, tau, compress=compress, progress=progress)


def sweep(
    index_dir: str | Path,
    questions: str,
    *,
    work: str | Path,
    keep: list[float] | None = None,
    thresholds: list[float] | None = None,
    compress: list[str] | None = None,
    limit: int | None = None,
    k: int = 5,
    progress: bool = False,
    qat_model: str | None = None,
    qat_compress: str = "opq-pq",
) -> dict[str, Any]:
    """Refilter ``index_dir`` at each setting and evaluate; the JSON-ready result."""
    src = Index.load(index_dir)
    if not isinstance(src, PhraseIndex):
        raise SystemExit(f"{index_dir}: not a phrase index")
    qs = load_questions(questions, limit=limit)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    settings: list[tuple[str, float]] = [
        (f"keep={f:g}", threshold_for_fraction(src, f)) for f in (keep or [])
    ]
    settings += [(f"tau={t:g}", t) for t in (thresholds or [])]
    if not settings:
        raise SystemExit("give --keep and/or --thresholds")
    floor = src.manifest["settings"].get("threshold")
    points = []
    for c in [Compress(x) for x in (compress or ["none"])]:
        for label, tau in settings:
            if floor is not None:
                tau = max(tau, float(floor))
            t0 = time.time()
            idx = _index_for(src, work, tau, c, progress)
            build_s = time.time() - t0
            counts = idx.manifest["counts"]
            searched = [(c.value, idx)]
            if qat_model and c.value == qat_compress:
                tuned = Index.load(idx.path, model=qat_model)
                searched.append((f"{c.value}+qat", tuned))
            for name, ix in searched:
                t0 = time.time()
                passage = evaluate_index(
                    ix, qs, unit="passage", k=k, metrics=["top@1", f"top@{k}"], progress=progress
                )
                phrase = evaluate_index(ix, qs, k=1, metrics=["em", "f1"], progress=progress)
                points.append(
                    {
                        "setting": label,
                        "threshold": round(float(tau), 6),
                        "compress": name,
                        "factory": idx.manifest["settings"]["factory"],
                        "vectors_per_passage": counts["vectors_per_passage"],
                        "bytes_per_passage": counts["bytes_per_passage"],
                        "bytes": counts["bytes"],
                        "kept_fraction": counts["kept_fraction"],
                        "passage": passage.metrics,
                        "phrase": phrase.metrics,
                        "unit_search": passage.to_dict().get("unit_search"),
                        "build_seconds": round(build_s, 2),
                        "eval_seconds": round(time.time() - t0, 2),
                        "path": str(idx.path),
                        **({"question_encoder": qat_model} if ix is not idx else {}),
                    }
                )
    return {
        "index": str(src.path),
        "questions": questions,
        "n_questions": len(qs),
        "k": k,
        "source": {
            "threshold": floor,
            "vectors_per_passage": src.manifest["counts"]["vectors_per_passage"],
            "bytes_per_passage": src.manifest["counts"]["bytes_per_passage"],
        },
        "points": points,
    }


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """Passage top@k and phrase EM against vectors per passage, one line per compression."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = result["k"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    by: dict[str, list[dict[str, Any]]] = {}
    for p in result["points"]:
        by.setdefault(p["compress"], []).append(p)
    for name, pts in by.items():
        pts = sorted(pts, key=lambda p: p["vectors_per_passage"])
        x = [p["vectors_per_passage"] for p in pts]
        for ax, y in (
            (axes[0], [100 * p["passage"][f"top@{k}"] for p in pts]),
            (axes[1], [100 * p["phrase"]["em"] for p in pts]),
        ):
            ax.plot(x, y, marker="o", label=f"compress {name}")
            for xi, yi, p in zip(x, y, pts, strict=True):
                ax.annotate(
                    f"{p['bytes_per_passage'] / 1024:.1f} KiB",
                    (xi, yi),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(3, 3),
                )
    for ax, title in ((axes[0], f"passage top-{k} (%)"), (axes[1], "phrase EM (%)")):
        ax.set_xlabel("vectors per passage")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{Path(result['index']).name}: {result['n_questions']} questions")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("index", help="phrase index built with its float16 dump")
    ap.add_argument("--questions", required=True, help="FORMAT:PATH with answers and gold")
    ap.add_argument("--work", required=True, help="directory for the refiltered indexes")
    ap.add_argument("--keep", default=None, help="comma-separated fractions of vectors to keep")
    ap.add_argument("--thresholds", default=None, help="comma-separated filter thresholds tau")
    ap.add_argument("--compress", default="none", help="comma-separated: none,sq8,sq4,opq-pq")
    ap.add_argument("--plot", default=None, help="PNG to write")
    ap.add_argument("--out", default=None, help="JSON file to write (also printed)")
    ap.add_argument("--limit", type=int, default=None, help="first N questions")
    ap.add_argument("-k", type=int, default=5, help="passage top@k (default 5)")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--qat-model", default=None, help="quantisation-aware question encoder")
    ap.add_argument("--qat-compress", default="opq-pq", help="the points it is searched on")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        from anygrain.utils.threads import set_threads

        set_threads(args.threads)
    result = sweep(
        args.index,
        args.questions,
        work=args.work,
        keep=_floats(args.keep),
        thresholds=_floats(args.thresholds),
        compress=[c.strip() for c in args.compress.split(",") if c.strip()],
        limit=args.limit,
        k=args.k,
        progress=args.progress,
        qat_model=args.qat_model,
        qat_compress=args.qat_compress,
    )
    if args.plot:
        result["plot"] = str(plot(result, args.plot))
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
