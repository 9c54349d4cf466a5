"""Loading Hugging Face model directories and safetensors files, with damage reported as
one :class:`~anygrain.errors.AnygrainError` naming the file rather than a traceback from
deep inside transformers or safetensors."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from anygrain.errors import AnygrainError
from anygrain.utils.threads import follow_threads


def _damaged() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """``(bad weights, any damage)``: what from_pretrained and load_file raise for a damaged
    file: safetensors' own error (truncated file, bad header), OSError (missing or
    unreadable), ValueError (bad JSON), ..."""
    from safetensors import SafetensorError

    bad_weights: tuple[type[BaseException], ...] = (
        SafetensorError,
        EOFError,
        pickle.UnpicklingError,
    )
    return bad_weights, (*bad_weights, OSError, ValueError, RuntimeError, KeyError)


def encoder_inputs(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    token_embeds: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """A Hugging Face encoder's keyword inputs; ``token_embeds`` (B, L, width), the rows of
    its token-embedding table, stands in for ``input_ids`` (how an ONNX graph that keeps the
    table outside is traced)."""
    kw = {"attention_mask": attention_mask}
    if token_type_ids is not None:
        kw["token_type_ids"] = token_type_ids
    if token_embeds is not None:
        kw["inputs_embeds"] = token_embeds
    elif input_ids is not None:
        kw["input_ids"] = input_ids
    else:
        raise ValueError("input_ids or token_embeds is needed")
    return kw


def damaged_model(where: Path, e: BaseException) -> AnygrainError:
    """The one-line error for a model file that cannot be read."""
    return AnygrainError(
        f"{where}: cannot load the model ({type(e).__name__}: {e}); a file is "
        "truncated or damaged: save or download the model again"
    )


def check_weight_files(path: Path) -> None:
    """Read the header of every safetensors file under the model directory ``path`` (a few
    KB each, no torch), so that a truncated or damaged one fails a build before it reads the
    corpus, with the error loading it would give."""
    from safetensors import SafetensorError, safe_open

    for f in sorted(Path(path).rglob("*.safetensors")):
        try:
            with safe_open(str(f), framework="numpy"):
                pass
        except (SafetensorError, OSError) as e:
            raise damaged_model(f, e) from None


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """No per-file progress bars from transformers: a model here is several small HF dirs."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_hf_dir(path: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a Hugging Face directory (typed Any: HF classes vary), the
    weights in float32 whatever the file stores (half-precision weights train badly and run
    slowly on a CPU; autocast gives the speed where it is wanted)."""
    from transformers import AutoModel, AutoTokenizer

    if not (path / "config.json").exists():
        raise AnygrainError(f"{path}: missing model files (no config.json)")
    bad_weights, damaged = _damaged()
    weights = next(
        (path / n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()),
        path,
    )
    follow_threads()  # a --threads given before torch was imported
    with quiet_transformers():
        try:
            model = AutoModel.from_pretrained(str(path), dtype=torch.float32)
        except damaged as e:
            raise damaged_model(weights if isinstance(e, bad_weights) else path, e) from None
        try:
            return model, AutoTokenizer.from_pretrained(str(path))
        except damaged as e:
            raise AnygrainError(
                f"{path}: cannot load the tokenizer ({type(e).__name__}: {e}); its files are "
                "missing or damaged: save or download the model again"
            ) from None


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors (heads and other small parts of a saved model)."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise AnygrainError(f"{path}: missing")
    _, damaged = _damaged()
    try:
        return load_file(str(path))
    except damaged as e:
        raise AnygrainError(
            f"{path}: cannot read the tensors ({type(e).__name__}: {e}); the file is "
            "truncated or damaged: save the model again"
        ) from None
