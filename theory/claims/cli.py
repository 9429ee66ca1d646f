"""``python -m theory``: numerical, convex and symbolic verification of the theory claims.

Prints one row per claim of docs/claims.md#theory-checks (T1-T8) plus the WeiNCE Weibull top-1
law (W-law, docs/weince.md#the-w-law-check): what was checked, how many instances, the worst violation or error, and
PASS/FAIL; then the open problems O1, O1b, O1c (docs/open_problems.md: FOUND / NOT FOUND, or FAIL
when a control fails); then one line per sub-check. ``--json`` / ``--csv`` print the same records
(:mod:`theory.claims`) instead. Exits with status 1 if any check fails.

The checks and their runner are in :mod:`theory.claims.checks` (the groups of
:mod:`theory.claims.checks_harris`, :mod:`~theory.claims.checks_scl`, :mod:`~theory.claims.checks_ucl`,
:mod:`~theory.claims.checks_weince`). Run ``python -m theory --help`` for the flags.
"""

from __future__ import annotations

import argparse
import time

from theory.claims import checks
from theory.claims.record import to_json
from theory.claims.table import format_table, to_csv


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (every flag explained in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m theory",
        description=(
            "Verify the theory claims T1-T8 of docs/claims.md (Harris dominance, NC optimality of SCL/HSCL/UCL, "
            "the HUCL value at NC, batched versions) and the WeiNCE Weibull top-1 law, by exact enumeration, "
            "Monte Carlo with confidence intervals, cvxpy Gram programs and sympy; and search the open problems "
            "O1-O1c of docs/open_problems.md (does a configuration beat NC for HUCL, where does NC become a "
            "saddle, how wide is the bracket on the tight bound). Prints one row per claim and exits with "
            "status 1 if any check (or a control of a search) fails; FOUND and NOT FOUND are answers, not failures."
        ),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer random instances, smaller Monte Carlo samples and fewer convex programs "
        "(about 3x faster; same checks)",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="the open problems O1-O1c at the large scale (C up to 20, n = 2 and 4, mean and sum psi, "
        "16 restarts, 1000 L-BFGS iterations; the Hessian at NC for C = 3..20): tens of minutes on 2 cores; "
        "the checks T1-T8 and W-law keep their default (or --quick) scale",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of every random instance and Monte Carlo draw (default 0); same seed, same table",
    )
    parser.add_argument("--brief", action="store_true", help="print only the one-row-per-claim table")
    parser.add_argument(
        "--timing", action="store_true", help="print the time of each group of checks to stderr"
    )
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json",
        action="store_true",
        help="print the claim records as JSON (theory.claims.to_json: id, statement, verdict, "
        "sub-checks with their evidence, setting, command) instead of the table",
    )
    fmt.add_argument(
        "--csv",
        action="store_true",
        help="print one CSV row per sub-check (theory.claims.to_csv) instead of the table; "
        "with --brief one row per claim",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the checks, print them, return the exit status (0: all PASS, 1: a FAIL)."""
    import torch

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    t0 = time.perf_counter()
    claims = checks.run_checks(quick=args.quick, seed=args.seed, progress=args.timing, large=args.large)
    passed = all(c.verdict.ok for c in claims)
    if args.json:
        print(to_json(claims))
    elif args.csv:
        print(to_csv(claims, subchecks=not args.brief), end="")
    else:
        print(format_table(claims, subchecks=not args.brief))
        n_sub = sum(len(c.subchecks) for c in claims)
        status = "ALL PASS" if passed else "SOME CHECKS FAILED"
        print(
            f"\n{status} ({n_sub} sub-checks, {time.perf_counter() - t0:.1f} s, seed {args.seed}"
            f"{', quick' if args.quick else ''}{', large' if args.large else ''})"
        )
    return 0 if passed else 1
