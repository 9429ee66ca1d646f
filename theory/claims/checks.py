"""Runner of the theory checks: one :class:`theory.claims.Claim` per check id (T1-T8, W-law).

:data:`GROUPS` lists every check function: Harris dominance, beta monotonicity and the batched
losses (:mod:`theory.claims.checks_harris`), the SCL / HSCL optima
(:mod:`theory.claims.checks_scl`), the UCL optimum and HUCL at NC (:mod:`theory.claims.checks_ucl`),
and the WeiNCE Weibull top-1 law (:mod:`theory.claims.checks_weince`).

A group is ``(title, claim ids, check function)``; a check function appends ``(claim id, SubCheck)``
pairs to a list. An exception inside a group becomes a FAIL sub-check of each of its claims (never a
crash), after the sub-checks it produced before failing; a claim no check reported on is a FAIL
(never silently passed).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from theory.claims._support import CheckFn
from theory.claims.catalogue import CHECK_IDS
from theory.claims.checks_harris import check_batched, check_beta_monotone, check_harris
from theory.claims.checks_scl import check_hscl, check_scl
from theory.claims.checks_ucl import check_hucl, check_ucl
from theory.claims.checks_weince import check_weibull
from theory.claims.record import Claim, SubCheck, Verdict

__all__ = ["GROUPS", "run_groups", "run_checks", "command"]

#: ``(title, claim ids, check function)``: every theory check, in the order of the table.
GROUPS: tuple[tuple[str, tuple[str, ...], CheckFn], ...] = (
    ("Harris (T1, T2)", ("T1", "T2"), check_harris),
    ("beta monotonicity (T3)", ("T3",), check_beta_monotone),
    ("SCL optimum (T4)", ("T4",), check_scl),
    ("HSCL optimum (T5)", ("T5",), check_hscl),
    ("UCL optimum (T6)", ("T6",), check_ucl),
    ("HUCL at NC (T7)", ("T7",), check_hucl),
    ("batched losses (T8)", ("T8",), check_batched),
    ("Weibull top-1 law (W-law)", ("W-law",), check_weibull),
)


def command(quick: bool = False, seed: int = 0) -> str:
    """The command line that reproduces the checks: ``python -m theory [--quick] [--seed S]``."""
    return "python -m theory" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")


def run_groups(
    groups: Sequence[tuple[str, tuple[str, ...], CheckFn]],
    *,
    quick: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> list[Claim]:
    """Run ``groups``; one :class:`theory.claims.Claim` per claim id they name, in catalogue order.

    Args:
        groups: ``(title, claim ids, check function)`` triples.
        quick: passed to every check function (smaller instances).
        seed: passed to every check function.
        progress: print the time of each group to stderr.

    Returns:
        The claims, each with ``command`` (:func:`command`) and ``setting``
        (``{"scale": "quick" | "full", "seed": ...}``).
    """
    ids = [cid for cid in CHECK_IDS if any(cid in g[1] for g in groups)]
    ids += [cid for g in groups for cid in g[1] if cid not in ids]  # ids outside the catalogue order
    subs: dict[str, list[SubCheck]] = {cid: [] for cid in ids}
    for title, claim_ids, fn in tqdm(
        groups, desc="theory checks", disable=not sys.stderr.isatty(), leave=False
    ):
        t0 = time.perf_counter()
        out: list[tuple[str, SubCheck]] = []
        try:
            fn(out, quick, seed)
        except Exception as exc:
            for cid in claim_ids:
                out.append(
                    (
                        cid,
                        SubCheck.tolerance(
                            f"{title} raised {type(exc).__name__}: {exc}",
                            math.inf,
                            0.0,
                            kind="error",
                            instances=0,
                        ),
                    )
                )
        for cid, sub in out:
            subs.setdefault(cid, []).append(sub)
        if progress:
            print(f"  {title}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    setting = {"scale": "quick" if quick else "full", "seed": str(seed)}
    cmd = command(quick, seed)
    claims = []
    for cid, ss in subs.items():
        if ss:
            claims.append(Claim.from_subchecks(cid, ss, setting=setting, command=cmd))
        else:
            claims.append(Claim(cid, Verdict.FAIL, setting=setting, command=cmd, notes="no check ran"))
    return claims


def run_checks(quick: bool = False, seed: int = 0, progress: bool = False) -> list[Claim]:
    """Run every theory check (:data:`GROUPS`): the claims T1-T8 and W-law, in catalogue order.

    A claim id of the catalogue's checks that no group reports on is a FAIL.
    """
    claims = {c.id: c for c in run_groups(GROUPS, quick=quick, seed=seed, progress=progress)}
    setting = {"scale": "quick" if quick else "full", "seed": str(seed)}
    for cid in CHECK_IDS:
        if cid not in claims:
            claims[cid] = Claim(
                cid, Verdict.FAIL, setting=setting, command=command(quick, seed), notes="no check ran"
            )
    order = list(CHECK_IDS) + [cid for cid in claims if cid not in CHECK_IDS]
    return [claims[cid] for cid in order]
