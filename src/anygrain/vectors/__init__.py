"""Vector search under the index kinds: FAISS indexes over inner-product vectors.

The floor dense and phrase indexes both stand on (neither imports the other):

- :mod:`~anygrain.vectors.factory`: which FAISS factory an index gets from its size (one
  :class:`~anygrain.vectors.factory.FactoryPolicy` per kind), what training it needs and
  the default ``nprobe``;
- :mod:`~anygrain.vectors.sources`: what a build reads vectors from;
- :mod:`~anygrain.vectors.adding`: adding vectors in bounded batches;
- :mod:`~anygrain.vectors.disk`: indexes on disk (memory-mapped reads, atomic writes) and
  the blocked layout of an index larger than its memory budget;
- :mod:`~anygrain.vectors.faiss_index`: :class:`~anygrain.vectors.faiss_index.FaissIndex`,
  the wrapper the kinds build, open and search.

Nothing here imports faiss until one of these modules is imported.
"""
