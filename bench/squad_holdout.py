"""Split a SQuAD-format training file by article into a training part and a held-out
validation part (the last ``--holdout`` articles), for choosing recipes and checkpoints
without touching any test set.  Writes ``train.json`` and ``validation.json`` into
``--out`` (outside the repository) and prints JSON counts.

    python bench/squad_holdout.py ../shared/data/squad-v1.1/train-v1.1.json --out /work/runs/split
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--holdout", type=int, default=20, help="articles held out (from the end)")
    args = ap.parse_args()
    data = json.loads(args.source.read_text(encoding="utf-8"))
    articles = data["data"]
    if not 0 < args.holdout < len(articles):
        raise SystemExit(f"--holdout must be in 1..{len(articles) - 1}")
    parts = {"train": articles[: -args.holdout], "validation": articles[-args.holdout :]}
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, arts in parts.items():
        path = args.out / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"version": data.get("version", ""), "data": arts}, ensure_ascii=False),
            encoding="utf-8",
        )
        tmp.replace(path)
        counts[name] = {
            "articles": len(arts),
            "paragraphs": sum(len(a["paragraphs"]) for a in arts),
            "questions": sum(len(p["qas"]) for a in arts for p in a["paragraphs"]),
            "path": str(path),
        }
    print(json.dumps(counts, indent=2))


if __name__ == "__main__":
    main()
