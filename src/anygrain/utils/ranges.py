"""The range of each typed numeric setting, declared once and checked wherever it enters.

A setting's :class:`Range` sits beside the dataclass field it bounds; the dataclass's
``__post_init__`` calls :meth:`Range.check`, so every entry -- the command line, the
Python API, a server request and ``index.json`` read back on open -- is checked the same
way, since each builds the dataclass.  A range refuses what is not a number (a string, a
bool), NaN and the infinities, and values outside its bounds.  Bounds are chosen so that
every score computed with the value stays finite in float32: ``--sparse-weight 1e308`` is
finite itself but made every fused score ``inf`` (and ``--json`` print ``Infinity``,
which is not JSON), and ``--bm25-k1 1e308`` made every BM25 score NaN, so no hits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from anygrain.errors import AnygrainError


@dataclass(frozen=True)
class Range:
    """``label`` must be a finite number in ``[low, high]`` (``low_open``: ``> low``)."""

    label: str
    low: float
    high: float
    low_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        low = f"above {self.low:g}" if self.low_open else f"from {self.low:g}"
        return f"{kind} {low} to {self.high:g}"

    def check(self, value: Any, where: str = "") -> float:
        """``value`` as a float (an int when ``integer``); an AnygrainError naming the
        setting, what it takes and what it got otherwise."""
        at = f"{where}: " if where else ""
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and self.integer and isinstance(value, float):
            ok = value.is_integer()
        if ok:
            v = float(value)
            ok = math.isfinite(v) and (v > self.low if self.low_open else v >= self.low)
            ok = ok and v <= self.high
        if not ok:
            raise AnygrainError(f"{at}{self.label} must be {self.describe()}, got {value!r}")
        return int(value) if self.integer else float(value)
