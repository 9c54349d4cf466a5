"""How many CPU threads torch and FAISS use: one setting for index, search and eval.

The library never reads ``OMP_NUM_THREADS`` itself; callers pass ``threads`` and
this sets both pools, which otherwise each default to every core (on a CPU shared
with other jobs their spin-waiting slows everyone down).
"""

from __future__ import annotations

from anygrain.errors import AnygrainError


def set_threads(n: int | None) -> None:
    """Use ``n`` intra-op threads in torch and FAISS; ``None`` leaves their defaults."""
    if n is None:
        return
    if n < 1:
        raise AnygrainError(f"threads must be at least 1, got {n}")
    import torch

    torch.set_num_threads(n)
    try:
        import faiss
    except ImportError:  # training alone needs no FAISS (e.g. on a GPU machine)
        return
    faiss.omp_set_num_threads(n)
