"""``python -m anygrain.cli``: the ``anygrain`` command."""

from anygrain.cli.main import main

main()
