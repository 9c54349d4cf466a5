"""Indexes made of indexes: the hybrid kind (BM25 + dense, fused) and the sharded kind (N
indexes of one kind over row ranges of a corpus, searched as one).  They stand on the kinds
(``sparse/``, ``dense/``, ``phrase/``), a floor above them; the kinds never import them."""
