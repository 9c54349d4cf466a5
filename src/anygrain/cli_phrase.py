"""CLI pieces for phrase retrieval, as plain functions the main CLI registers as commands.

* ``train_phrase_cmd`` -> ``anygrain train phrase`` (``train_app.command("phrase")(train_phrase_cmd)``)
* :func:`print_phrase_hits` -> how ``anygrain search PHRASE_DIR "q" [--unit ...]`` prints hits
* ``refilter_cmd`` -> ``anygrain refilter DIR --out DIR2 --keep F``
* ``train_query_side_cmd`` -> ``anygrain train phrase-query-side INDEX --train ... --out DIR``

Each also works called directly from Python with keyword arguments.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from anygrain.cli_common import (
    BF16Opt,
    CheckpointEveryOpt,
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    ThreadsOpt,
    console,
    fail,
    out,
    run_trainer,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.phrase.compress import Compress
from anygrain.search.highlight import phrase_context
from anygrain.search.hit import Hit
from anygrain.train.optim import GradClip
from anygrain.train.phrase.losses import InBatchNegatives


def train_phrase_cmd(
    train: Annotated[
        list[str],
        typer.Option("--train", help="SQuAD-format training data, FORMAT:PATH or PATH; repeatable"),
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", help="Model directory to write (also checkpoints and log)")
    ],
    model: Annotated[
        str, typer.Option(help="Starting encoder: minilm, me5-small, hub name or directory")
    ] = "minilm",
    epochs: Annotated[int, typer.Option(help="Passes over the training questions")] = 3,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Questions per step")] = 32,
    lr: Annotated[float, typer.Option(help="Peak learning rate (linear warm-up and decay)")] = 1e-4,
    max_minutes: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option("--max-minutes", help="Stop cleanly (checkpoint + model) after this long"),
    ] = None,
    fit_budget: Annotated[
        bool,
        typer.Option(
            "--fit-budget/--no-fit-budget",
            help="With --max-minutes: shrink the LR schedule (and pre-batch start) to end in time",
        ),
    ] = True,
    question_encoder: Annotated[
        str,
        typer.Option(
            "--question-encoder",
            help="shared: one encoder, two heads; separate: two encoders (paper)",
        ),
    ] = "shared",
    prebatch: Annotated[
        bool, typer.Option("--prebatch/--no-prebatch", help="Pre-batch negatives (last 2 batches)")
    ] = True,
    inbatch: Annotated[
        bool, typer.Option("--inbatch/--no-inbatch", help="In-batch negatives")
    ] = True,
    teacher: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--teacher", help="Cross-attention reader directory to distil from"),
    ] = None,
    inbatch_negatives: Annotated[
        InBatchNegatives,
        typer.Option(
            "--inbatch-negatives",
            help="gold: other questions' gold starts/ends (paper); tokens: every token of the "
            "other passages in the batch",
        ),
    ] = InBatchNegatives.GOLD,
    grad_clip: Annotated[
        GradClip,
        typer.Option(
            "--grad-clip",
            help="global: one gradient norm; per-side: phrase and question encoders apart",
        ),
    ] = GradClip.GLOBAL,
    freeze_embeddings: Annotated[
        bool,
        typer.Option(
            "--freeze-embeddings",
            help="Keep the backbone's embedding layers fixed (the model can then be packed small)",
        ),
    ] = False,
    bf16: BF16Opt = False,
    max_passage_length: Annotated[
        int, typer.Option("--max-passage-length", help="Tokens per window")
    ] = 384,
    doc_stride: Annotated[
        int, typer.Option("--doc-stride", help="Overlap between windows (tokens)")
    ] = 128,
    max_examples: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--max-examples",
            help="Train on a seeded subset of this many questions, taken passage by passage",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for data order, heads and dropout")] = 12345,
    threads: ThreadsOpt = None,
    checkpoint_every: CheckpointEveryOpt = 200,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
) -> None:
    """Train a DensePhrases model (single-passage, in-batch and pre-batch losses, filter)."""
    from anygrain.train import phrase

    def run(errors: ErrorLog) -> Path:
        cfg = phrase.PhraseTrainConfig(
            train=list(train),
            out=str(out_dir),
            model=model,
            question_encoder=question_encoder,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            max_minutes=max_minutes,
            fit_budget=fit_budget,
            pre_batch=2 if prebatch else 0,
            in_batch=inbatch,
            teacher=teacher,
            in_batch_negatives=inbatch_negatives.value,
            grad_clip=grad_clip.value,
            freeze_embeddings=freeze_embeddings,
            bf16=bf16,
            max_passage_length=max_passage_length,
            doc_stride=doc_stride,
            max_examples=max_examples,
            seed=seed,
            threads=threads,
            checkpoint_every=checkpoint_every,
        )
        return phrase.train(cfg, progress=not quiet, resume=resume, errors=errors)

    run_trainer(run, on_error, "trained phrase model")


def print_phrase_hits(
    hits: Sequence[Hit], *, as_json: bool = False, console_: Console | None = None
) -> None:
    """Answer phrases (or sentences) highlighted in their context; passages and documents in brief."""
    if as_json:
        for h in hits:
            print(json.dumps(h.to_dict(), ensure_ascii=False))
        return
    c = console_ or out
    table = Table(show_lines=True)
    for col in ("#", "score", "answer", "title", "context"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        before, phrase, after = phrase_context(h)
        answer = phrase if h.span is not None else ""
        ctx = f"{escape(before)}[bold yellow]{escape(phrase)}[/]{escape(after)}"
        table.add_row(str(i), f"{h.score:.3f}", escape(answer), escape(h.title), ctx)
    c.print(table)


def refilter_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Phrase index to start from")],
    out_dir: Annotated[Path, typer.Option("--out", help="New phrase index directory")],
    threshold: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Filter threshold tau (a logit; at least the source's)"),
    ] = None,
    keep: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Instead of --threshold: keep about this fraction of the vectors"),
    ] = None,
    faiss: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--faiss", help="FAISS factory (default: chosen from the new size)"),
    ] = None,
    compress: Annotated[
        Compress, typer.Option(help="Quantize the new index's FAISS vectors")
    ] = Compress.NONE,
    pq_m: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--pq-m", help="opq-pq: bytes per vector (default dim/8)"),
    ] = None,
    keep_dump: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option(
            "--keep-dump/--no-keep-dump",
            help="Keep the float16 vectors (default: only with --compress none)",
        ),
    ] = None,
    quiet: QuietOpt = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the anygrain index already in --out")
    ] = False,
) -> None:
    """A smaller phrase index at a higher filter threshold, from stored vectors (no re-encoding)."""
    from anygrain.phrase.refilter import refilter

    try:
        idx = refilter(
            index_dir,
            out_dir,
            threshold,
            keep=keep,
            factory=faiss,
            progress=not quiet,
            overwrite=overwrite,
            compress=compress,
            pq_m=pq_m,
            keep_dump=keep_dump,
        )
    except AnygrainError as e:
        fail(e)
        return
    c = idx.manifest["counts"]
    console.print(
        f"threshold {idx.manifest['settings']['threshold']:.4f}: {c['vectors_per_passage']} vectors per passage, "
        f"{c['bytes_per_passage']:.0f} bytes per passage → {out_dir}"
    )


def train_query_side_cmd(
    index_dir: Annotated[
        Path, typer.Argument(help="Phrase index over the TRAINING passages (never the test set)")
    ],
    train: Annotated[
        list[str],
        typer.Option("--train", help="Questions with answers (SQuAD format); repeatable"),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Phrase model directory to write")],
    loss: Annotated[
        str,
        typer.Option(help="Positives: phrase (answer text), passage (gold passage), or both"),
    ] = "phrase",
    epochs: Annotated[int, typer.Option(help="Passes over the questions")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Questions per step")] = 16,
    lr: Annotated[float, typer.Option(help="Peak learning rate")] = 3e-5,
    top_k: Annotated[int, typer.Option("--top-k", help="MIPS depth per side")] = 100,
    max_examples: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--max-examples", help="Train on a seeded random subset of questions"),
    ] = None,
    bf16: BF16Opt = False,
    threads: ThreadsOpt = None,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
) -> None:
    """Fine-tune a phrase model's question encoder against a built phrase index."""
    from anygrain.train import phrase

    def run(errors: ErrorLog) -> Path:
        cfg = phrase.PhraseQuerySideConfig(
            index=str(index_dir),
            train=list(train),
            out=str(out_dir),
            loss=loss,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            top_k=top_k,
            max_examples=max_examples,
            bf16=bf16,
            threads=threads,
        )
        return phrase.train_query_side(cfg, progress=not quiet, resume=resume, errors=errors)

    path = run_trainer(run, on_error, "phrase model (query side fine-tuned)")
    console.print(f"use it with `anygrain eval INDEX --model {escape(str(path))}`")


def pack_cmd(
    model_dir: Annotated[
        Path, typer.Argument(help="Trained phrase model (trained with --freeze-embeddings)")
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Packed model directory to write")],
    bits: Annotated[int, typer.Option(help="Bits per weight difference: 4 or 8")] = 4,
    group: Annotated[int, typer.Option(help="Values sharing one scale")] = 64,
    card: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--card", help="A model card (Markdown) to store beside the weights"),
    ] = None,
) -> None:
    """Store a phrase model as quantised differences from its backbone (a few MB)."""
    from anygrain.phrase.model import PhraseEncoder
    from anygrain.phrase.packed import PackedInfo, PackSettings, pack_phrase_model

    try:
        settings = PackSettings(bits=bits, group=group)
        text = card.read_text(encoding="utf-8") if card else None
        path = pack_phrase_model(
            PhraseEncoder.load(model_dir), out_dir, settings=settings, card=text
        )
    except (AnygrainError, OSError) as e:
        fail(e)
        return
    info = PackedInfo.read(path)
    console.print(f"packed {model_dir} at {bits} bits: {info.size_bytes / 1e6:.1f} MB → {path}")
