"""Calibrated confidence of read answers: the probability that an answer span is correct.

An answer's score (:mod:`anygrain.reader.answering`) mixes a span logit with a retrieval
score: it ranks one question's answers but cannot be compared across questions or
thresholded.  A :class:`Calibration` maps an answer's features to a probability in
``[0, 1]`` with a logistic model fitted on held-out training questions
(``bench/calibrate_reader.py``).  The features (:data:`FEATURES`) are all scores, higher
meaning more likely right, and every weight is kept non-negative when fitting, so the
confidence never falls as any of them rises:

* ``span_score``: the span's start + end logit;
* ``span_log_prob``: its log probability among its window's valid spans;
* ``selection``: its passage window's selection logit;
* ``retrieval``: its passage's retrieval score, normalised as the answer score normalises
  it (``(r - r_best) / spread``, so 0 for the best passage);
* ``margin``: its combined score minus that of the next different answer (capped at
  :data:`MARGIN_CAP`, which an answer with no rival gets).

The calibration is saved as ``confidence.json`` beside a reader, with the fingerprint of
the reader's weights it was fitted for: it is refused for another reader, and a reader
without one gives no confidence (None), never an invented one.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anygrain.errors import AnygrainError

__all__ = [
    "CONFIDENCE_FILE",
    "FEATURES",
    "MARGIN_CAP",
    "Calibration",
    "confidence_for",
    "fit_calibration",
    "fit_logistic",
    "load_calibration",
    "reader_fingerprint",
]

CONFIDENCE_FILE = "confidence.json"
FORMAT = "anygrain.reader-confidence"
FORMAT_VERSION = 1
FEATURES = ("span_score", "span_log_prob", "selection", "retrieval", "margin")
MARGIN_CAP = 20.0


def reader_fingerprint(directory: str | Path) -> str:
    """A fingerprint of the weights of the reader saved at ``directory`` (its safetensors
    files' bytes, whichever runtime reads them), so a calibration follows its weights."""
    path = Path(directory)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise AnygrainError(f"{path}: no reader weights (*.safetensors) to fingerprint")
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with f.open("rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Calibration:
    """A logistic model over standardised :data:`FEATURES`: ``sigmoid(bias + sum(w_i *
    (x_i - mean_i) / scale_i))`` with every ``w_i >= 0``; ``threshold`` is the default
    abstention threshold chosen with it (None: none chosen)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    reader_fingerprint: str
    threshold: float | None = None
    features: tuple[str, ...] = FEATURES
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        n = len(self.features)
        if tuple(self.features) != FEATURES:
            raise AnygrainError(
                f"confidence calibration: features {list(self.features)}, expected {list(FEATURES)}"
            )
        if not len(self.weights) == len(self.mean) == len(self.scale) == n:
            raise AnygrainError(f"confidence calibration: need {n} weights, means and scales")
        values = [*self.weights, self.bias, *self.mean, *self.scale]
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise AnygrainError("confidence calibration: a weight, mean or scale is not finite")
        if min(self.weights) < 0 or min(self.scale) <= 0:
            raise AnygrainError(
                "confidence calibration: weights must be >= 0 and scales > 0 (monotone)"
            )
        t = self.threshold
        if t is not None and not 0 <= t <= 1:
            raise AnygrainError(f"confidence calibration: threshold {t} is not in [0, 1]")

    def probability(self, x: np.ndarray) -> np.ndarray:
        """``(N,)`` probabilities for ``(N, len(FEATURES))`` feature rows."""
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        # a span missing a score (no rival, no window) counts as the lowest seen
        z = np.nan_to_num(z, nan=-10.0, posinf=10.0, neginf=-10.0)
        logit = self.bias + z @ np.asarray(self.weights)
        return np.clip(1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50))), 0.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "reader_fingerprint": self.reader_fingerprint,
            "features": list(self.features),
            "weights": list(self.weights),
            "bias": self.bias,
            "mean": list(self.mean),
            "scale": list(self.scale),
            "threshold": self.threshold,
            "info": self.info,
        }

    def save(self, path: str | Path) -> Path:
        """Write the calibration to ``path`` (a reader directory gets ``confidence.json``)."""
        p = Path(path)
        if p.is_dir():
            p = p / CONFIDENCE_FILE
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return p

    @staticmethod
    def from_dict(d: dict[str, Any], where: str) -> Calibration:
        if d.get("format") != FORMAT or d.get("format_version") != FORMAT_VERSION:
            raise AnygrainError(
                f"{where}: not a reader confidence calibration of format version "
                f"{FORMAT_VERSION} (format {d.get('format')!r}, version "
                f"{d.get('format_version')!r})"
            )
        try:
            return Calibration(
                weights=tuple(float(v) for v in d["weights"]),
                bias=float(d["bias"]),
                mean=tuple(float(v) for v in d["mean"]),
                scale=tuple(float(v) for v in d["scale"]),
                reader_fingerprint=str(d["reader_fingerprint"]),
                threshold=None if d.get("threshold") is None else float(d["threshold"]),
                features=tuple(str(f) for f in d["features"]),
                info=dict(d.get("info") or {}),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise AnygrainError(f"{where}: bad confidence calibration ({e!r})") from e
        except AnygrainError as e:
            raise AnygrainError(f"{where}: {e}") from e


def load_calibration(path: str | Path, reader_dir: str | Path) -> Calibration:
    """The calibration at ``path``, refused in one line unless it was fitted for the reader
    saved at ``reader_dir``."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise AnygrainError(f"{p}: cannot read the confidence calibration ({e})") from e
    if not isinstance(d, dict):
        raise AnygrainError(f"{p}: not a reader confidence calibration")
    cal = Calibration.from_dict(d, str(p))
    mine = reader_fingerprint(reader_dir)
    if cal.reader_fingerprint != mine:
        raise AnygrainError(
            f"{p}: fitted for reader {cal.reader_fingerprint}, not for {reader_dir} "
            f"({mine}); refit it (bench/calibrate_reader.py)"
        )
    return cal


_CACHE: dict[tuple[str, float], Calibration | None] = {}


def confidence_for(reader: Any) -> Calibration | None:
    """The calibration saved beside ``reader`` (the directory it was loaded from), or None
    when it has none; refused when it belongs to another reader."""
    where = getattr(reader, "loaded_from", "") or ""
    if not where:
        return None
    p = Path(where) / CONFIDENCE_FILE
    try:
        stamp = p.stat().st_mtime
    except OSError:
        return None
    key = (str(p), stamp)
    if key not in _CACHE:
        _CACHE[key] = load_calibration(p, where)
    return _CACHE[key]


def fit_logistic(
    x: np.ndarray, y: np.ndarray, *, l2: float = 1e-3
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """``(weights, bias, mean, scale)`` of a logistic model of labels ``y`` over the
    standardised columns of ``x`` (any number), every weight bounded at 0 (L-BFGS-B where
    SciPy is installed, else projected gradient descent)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = (x - mean) / scale
    n, d = z.shape

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        logit = z @ w + b
        p = 1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50)))
        nll = np.logaddexp(0.0, logit) - y * logit
        g = p - y
        grad = np.concatenate([z.T @ g / n + l2 * w, [g.mean()]])
        return float(nll.mean() + 0.5 * l2 * w @ w), grad

    theta = np.zeros(d + 1)
    try:
        from scipy.optimize import minimize

        res = minimize(
            loss, theta, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * d + [(None, None)]
        )
        theta = np.asarray(res.x)
    except ImportError:
        for _ in range(5000):
            _, g = loss(theta)
            theta -= 0.5 * g
            theta[:d] = np.maximum(theta[:d], 0.0)
    return np.maximum(theta[:d], 0.0), float(theta[d]), mean, scale


def fit_calibration(
    x: np.ndarray,
    y: np.ndarray,
    reader_fingerprint: str,
    *,
    l2: float = 1e-3,
    info: dict[str, Any] | None = None,
) -> Calibration:
    """Fit the logistic model on feature rows ``x`` (:data:`FEATURES`) and labels ``y``
    (1: correct) with :func:`fit_logistic`, so the confidence is monotone in each feature."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(FEATURES) or len(x) != len(y) or len(x) < 2:
        raise AnygrainError(f"need (N, {len(FEATURES)}) features and N labels, N >= 2")
    w, bias, mean, scale = fit_logistic(x, y, l2=l2)
    return Calibration(
        weights=tuple(float(v) for v in w),
        bias=bias,
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        reader_fingerprint=reader_fingerprint,
        info=dict(info or {}),
    )


def best_threshold(conf: Sequence[float], should_abstain: Sequence[bool]) -> tuple[float, float]:
    """``(threshold, F1)``: the threshold whose abstentions (confidence below it) best match
    ``should_abstain`` (F1 of abstaining; for example the questions the documents cannot
    answer)."""
    c = np.asarray(conf, dtype=np.float64)
    wrong = np.asarray(should_abstain, dtype=bool)
    best = (0.0, 0.0)
    for t in np.unique(np.concatenate([c, [0.0, 1.0]])):
        abstain = c < t
        tp = float((abstain & wrong).sum())
        if tp == 0:
            continue
        prec, rec = tp / abstain.sum(), tp / max(wrong.sum(), 1)
        f1 = 2 * prec * rec / (prec + rec)
        if f1 > best[1]:
            best = (float(t), f1)
    return best
