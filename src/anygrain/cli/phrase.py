"""``anygrain pack``: what remains phrase-specific on the command line (phrase training is
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
