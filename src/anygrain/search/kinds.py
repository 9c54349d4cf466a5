"""Imports every index kind so each registers itself with ``Index``."""

from anygrain.dense import index as _dense  # noqa: F401
from anygrain.phrase import index as _phrase  # noqa: F401
from anygrain.search import hybrid  # noqa: F401
from anygrain.sparse import bm25  # noqa: F401
