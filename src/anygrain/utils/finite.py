"""The one check every encoder's output passes, on torch or on ONNX Runtime."""

from __future__ import annotations

import numpy as np

from anygrain.errors import AnygrainError


def check_finite(vectors: np.ndarray, model: str, what: str) -> np.ndarray:
    """``vectors``, or an error naming ``model`` when any is NaN or infinite.

    Damaged weights give NaN vectors, and FAISS then returns no hits at all: every
    search would come back empty and every metric 0 without a word."""
    if not np.isfinite(vectors).all():
        bad = int((~np.isfinite(vectors.reshape(len(vectors), -1))).any(axis=1).sum())
        raise AnygrainError(
            f"model {model or '(unnamed)'}: {bad} of {len(vectors)} {what} vectors are NaN or "
            "infinite; its weights are probably damaged (reinstall or retrain it)"
        )
    return vectors
