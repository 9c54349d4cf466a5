"""The ``anygrain`` command line: :mod:`anygrain.cli.main` is the app, and each command group
has its own module (``index``, ``search``, ``eval``, ``train``, ``maintain``, ...)."""
