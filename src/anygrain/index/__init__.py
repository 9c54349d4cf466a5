"""Index kinds' home: the Index base and manifest, the kind registry, the typed build
settings and the gold-passage scope; and index maintenance: adding documents, deleting
and compacting (``updater``, ``tombstones``).  Each kind's class lives with its method
(``sparse/``, ``dense/``, ``phrase/``) or in ``composite/`` (``hybrid``, ``sharded``) and
registers itself on import; its add and compaction live beside its build (``update.py``,
``composite/hybrid_update.py``) and run through its class's hooks, so the updater imports
no kind."""
