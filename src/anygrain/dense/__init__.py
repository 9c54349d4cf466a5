"""Dense retrieval: passage vectors from a bi-encoder, in resumable shards, searched with FAISS."""
