"""``python -m realdata``: see :mod:`realdata.cli` and docs/realdata.md."""

import sys

from realdata.cli import main

if __name__ == "__main__":
    sys.exit(main())
