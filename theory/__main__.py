"""``python -m theory``: the verification table of the theory checks (:mod:`theory.claims.cli`)."""

import sys

from theory.claims.cli import main

if __name__ == "__main__":
    sys.exit(main())
