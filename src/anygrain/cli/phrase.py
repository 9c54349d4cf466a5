"""``anygrain pack`` and ``anygrain attach-sparse``: what remains phrase-specific on the command line (phrase training is
under :mod:`anygrain.cli.train`, ``refilter`` under :mod:`anygrain.cli.index`, phrase hits are
printed by :mod:`anygrain.cli.search`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from anygrain.cli.common import console, fail
from anygrain.errors import AnygrainError


def pack_cmd(
    model_dir: Annotated[
        Path,
        typer.Argument(help="Trained phrase model or reader (trained with --freeze-embeddings)"),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Packed model directory to write")],
    bits: Annotated[int, typer.Option(help="Bits per weight difference: 4 or 8")] = 4,
    group: Annotated[int, typer.Option(help="Values sharing one scale")] = 64,
    card: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--card", help="A model card (Markdown) to store beside the weights"),
    ] = None,
) -> None:
    """Store a phrase model or a reader as quantised differences from its backbone (a few MB)."""
    from anygrain.api import pack_phrase_model

    try:
        info = pack_phrase_model(model_dir, out_dir, bits=bits, group=group, card=card)
    except (AnygrainError, OSError) as e:
        fail(e)
        return
    console.print(f"packed {model_dir} at {bits} bits: {info.size_bytes / 1e6:.1f} MB → {out_dir}")


def attach_sparse_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Phrase index to give a BM25 part")],
    from_dir: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--from", help="Copy this BM25 index (built over the same corpus)"),
    ] = None,
    weight: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option("--sparse-weight", help="Weight of the BM25 part (default: the saved or 1.0)"),
    ] = None,
    lang: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="en | zh: the BM25 analyser (detected when omitted)"),
    ] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress bar")] = False,
) -> None:
    """Fuse BM25 into an existing phrase index's scores (the phrase vectors stay as they are)."""
    from anygrain.api import attach_sparse

    try:
        fusion = attach_sparse(
            index_dir, bm25_from=from_dir, weight=weight, lang=lang, progress=not quiet
        )
    except (AnygrainError, OSError) as e:
        fail(e)
        return
    console.print(f"{index_dir}: BM25 part attached (sparse fusion {fusion})")
