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
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from anygrain.cli_common import (
    OnErrorOpt,
    QuietOpt,
    ResumeOpt,
    config_options,
    console,
    fail,
    out,
    run_trainer,
)
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.phrase.compress import Compress
from anygrain.search.highlight import phrase_context
from anygrain.search.hit import Hit
from anygrain.train.phrase.config import PhraseQuerySideConfig, PhraseTrainConfig

PHRASE_OPTIONS = (
    "train",
    "out",
    "model",
    "epochs",
    "batch_size",
    "lr",
    "max_minutes",
    "fit_budget",
    "question_encoder",
    "in_batch",
    "teacher",
    "in_batch_negatives",
    "grad_clip",
    "freeze_embeddings",
    "bf16",
    "max_passage_length",
    "doc_stride",
    "max_examples",
    "seed",
    "threads",
    "checkpoint_every",
)


@config_options(PhraseTrainConfig, PHRASE_OPTIONS)
def train_phrase_cmd(
    prebatch: Annotated[
        bool, typer.Option("--prebatch/--no-prebatch", help="Pre-batch negatives (last 2 batches)")
    ] = True,
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Train a DensePhrases model (single-passage, in-batch and pre-batch losses, filter)."""
    from anygrain.train import phrase

    def run(errors: ErrorLog) -> Path:
        cfg = phrase.PhraseTrainConfig(**settings, pre_batch=2 if prebatch else 0)
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


QUERY_SIDE_OPTIONS = (
    "index",
    "train",
    "out",
    "loss",
    "epochs",
    "batch_size",
    "lr",
    "top_k",
    "max_examples",
    "bf16",
    "threads",
)


@config_options(PhraseQuerySideConfig, QUERY_SIDE_OPTIONS)
def train_query_side_cmd(
    resume: ResumeOpt = True,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    **settings: Any,
) -> None:
    """Fine-tune a phrase model's question encoder against a built phrase index."""
    from anygrain.train import phrase

    def run(errors: ErrorLog) -> Path:
        cfg = phrase.PhraseQuerySideConfig(**settings)
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
