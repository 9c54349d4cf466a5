"""``python -m anygrain.cli``: the ``anygrain`` command."""

import sys

try:
    from anygrain.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while Python imports the command: no traceback
    sys.exit(130)

main()
