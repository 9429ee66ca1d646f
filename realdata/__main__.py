"""``python -m realdata``: see :mod:`realdata.cli` and docs/realdata.md."""

import sys

if __name__ == "__main__":
    try:
        from realdata.cli import main
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load: nothing has started
        sys.exit(130)
    sys.exit(main())
