"""Index kinds' home: the Index base and manifest, the kind registry, the hybrid and sharded
kinds, fusion of runs and the gold-passage scope; and index maintenance: adding documents,
deleting and compacting (``updater``, ``tombstones``).  Each kind's class lives with its
method (``sparse/``, ``dense/``, ``phrase/``) or here (``hybrid``, ``sharded``) and registers
itself on import."""
