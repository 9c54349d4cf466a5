"""Readers, one module per format; importing this package registers them all."""

from anygrain.corpus.readers import squad  # noqa: F401
