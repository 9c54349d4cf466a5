"""Sparse retrieval: BM25 analyzers and the bm25s-backed index."""
