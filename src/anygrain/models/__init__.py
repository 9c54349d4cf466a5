"""Encoders: the model base (save, load, fingerprint, type registry), resolving names to
model directories, the bi-encoder, and converters."""
