"""Encoders: resolving names to model directories, the bi-encoder, and converters."""
