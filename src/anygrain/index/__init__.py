"""Index maintenance: adding documents to an index, deleting and compacting (updater, tombstones)."""
