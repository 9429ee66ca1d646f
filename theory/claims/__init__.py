"""The verification harness: the one claims record, the theory checks and ``python -m theory``.

Every verdict the project prints is a :class:`Claim` (docs/claims.md). This package holds the
record and everything that verifies the theory, apart from the mathematics it verifies:

* :mod:`theory.claims.record` -- :class:`Verdict`, :class:`Evidence`, :class:`SubCheck`,
  :class:`Claim`, :func:`not_run`, JSON (:func:`to_json` / :func:`from_json`);
* :mod:`theory.claims.catalogue` -- :data:`CATALOGUE`, the single list of claim ids and their
  statements (:func:`statement`);
* :mod:`theory.claims.table` -- records as a table (:func:`to_frame`, :func:`to_csv`,
  :func:`format_table`);
* :mod:`theory.claims.checks` -- the runner of the theory checks (T1-T8, W-law) and their groups:
  Harris dominance, beta monotonicity and the batched losses in
  :mod:`theory.claims.checks_harris`, the SCL / HSCL optima in :mod:`theory.claims.checks_scl`,
  the UCL optimum and HUCL at NC in :mod:`theory.claims.checks_ucl`, the Weibull top-1 law in
  :mod:`theory.claims.checks_weince`;
* :mod:`theory.claims.cli` -- ``python -m theory``.

Importing this package loads the record, the catalogue and the table only (no torch): the
checks are imported by the runner and the command line.
"""

from theory.claims.catalogue import (
    ALL_IDS,
    CATALOGUE,
    CHECK_IDS,
    CLAIM_IDS,
    OPEN_IDS,
    CatalogueEntry,
    statement,
)
from theory.claims.record import Claim, Evidence, SubCheck, Verdict, from_json, not_run, to_json
from theory.claims.table import format_table, to_csv, to_frame

__all__ = [
    "Verdict",
    "Evidence",
    "SubCheck",
    "Claim",
    "CatalogueEntry",
    "CATALOGUE",
    "CHECK_IDS",
    "CLAIM_IDS",
    "OPEN_IDS",
    "ALL_IDS",
    "statement",
    "not_run",
    "to_json",
    "from_json",
    "to_frame",
    "to_csv",
    "format_table",
]
