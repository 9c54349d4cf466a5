"""Index kinds' home: the Index base and manifest, the kind registry, the hybrid kind, fusion
of runs and the gold-passage scope.  Each kind's class lives with its method (``sparse/``,
``dense/``, ``phrase/``) or here (``hybrid``) and registers itself on import."""
