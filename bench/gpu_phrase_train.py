"""Train phrase models on a GPU machine, several recipes side by side, and pack each.

Each recipe (a JSON object of :class:`PhraseTrainConfig` fields) runs as its own process
on the same GPU; every finished model is packed (4-bit differences from its backbone,
``anygrain pack``) and tarred into ``--out`` with its training log, so a run on a
borrowed machine brings back a few MB per model.  A packed model made against a
backbone copy stored in another precision is re-based on the real backbone with
``python bench/gpu_phrase_train.py --rebase PACKED --out DIR`` (it reloads the
differences onto the installed backbone and packs again).

    python bench/gpu_phrase_train.py --train squad:train.json --work /tmp/runs --out OUT \\
        --recipe A '{"in_batch_negatives": "gold"}' --recipe B '{"hard_negatives": 1}' \\
        --common '{"batch_size": 128, "lr": 2e-4, "max_minutes": 7, "bf16": true}'

On a borrowed machine whose command is cut at a time limit, point ``--out`` at the folder
that comes back (the device tool's ``$OUT``): each recipe's tar lands there as soon as that
recipe is done, so a run cut short still returns the recipes that finished (a session lost
a finished model by copying results only at the end).  Keep ``max_minutes`` well inside the
limit: it counts data loading and BM25 mining, not packing.  bm25s imports JAX, which takes
75% of a GPU at import unless ``JAX_PLATFORMS=cpu`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def train_one(name: str, config: dict, work: Path, out: Path) -> None:
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.packed import pack_phrase_model
    from anygrain.train.phrase import PhraseTrainConfig, train

    run = work / name
    t0 = time.time()
    train(PhraseTrainConfig(**{**config, "out": str(run)}), progress=False)
    trained = time.time() - t0
    packed = work / f"{name}-packed"
    pack_phrase_model(PhraseEncoder.load(run), packed)
    with tarfile.open(out / f"{name}.tar", "w") as tar:
        tar.add(packed, arcname=f"{name}-packed")
        for f in ("train_config.json", "train_log.jsonl"):
            if (run / f).exists():
                tar.add(run / f, arcname=f"{name}-run/{f}")
    print(json.dumps({"recipe": name, "train_seconds": round(trained, 1)}), flush=True)


def rebase(packed: Path, out: Path) -> None:
    """Reload a packed model's differences onto the installed backbone and pack again."""
    from anygrain.models.base import ModelType, read_config
    from anygrain.phrase.packed import load_packed, pack_phrase_model

    model = load_packed(packed, read_config(packed, ModelType.PACKED_PHRASE), verify=False)
    pack_phrase_model(model, out)
    print(json.dumps({"rebased": str(packed), "out": str(out)}))


def main() -> None:
    # bm25s (hard-negative mining) imports JAX: keep it off the GPU the recipes share
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", action="append", default=[])
    ap.add_argument("--work", type=Path, default=Path("/tmp/anygrain-gpu"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--recipe", nargs=2, action="append", default=[], metavar=("NAME", "JSON"))
    ap.add_argument("--common", default="{}")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one recipe (child process)
    ap.add_argument("--rebase", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rebase:
        rebase(args.rebase, args.out)
        return
    common = {"train": args.train, **json.loads(args.common)}
    recipes = {name: {**common, **json.loads(js)} for name, js in args.recipe}
    if args.one:
        train_one(args.one, recipes[args.one], args.work, args.out)
        return
    procs = []
    for name in recipes:
        log = open(args.out / f"{name}.log", "w")  # noqa: SIM115 - closed when the child ends
        cmd = [sys.executable, __file__, "--out", str(args.out), "--work", str(args.work)]
        for t in args.train:
            cmd += ["--train", t]
        for n, js in args.recipe:
            cmd += ["--recipe", n, js]
        cmd += ["--common", args.common, "--one", name]
        procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    for name, p, log in procs:
        rc = p.wait()
        log.close()
        print(json.dumps({"recipe": name, "rc": rc}), flush=True)


if __name__ == "__main__":
    main()
