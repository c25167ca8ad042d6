"""``python -m mqcore``: the offline store tools (see :mod:`mqcore.cli`)."""

import sys

from mqcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
