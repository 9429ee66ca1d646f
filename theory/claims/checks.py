"""Runner of the theory checks: one :class:`theory.claims.Claim` per check and open-problem id.

The check ids are T1-T8 and W-law; the open problems are O1, O1b and O1c.

:data:`GROUPS` lists every check function: Harris dominance, beta monotonicity and the batched
losses (:mod:`theory.claims.checks_harris`), the SCL / HSCL optima
(:mod:`theory.claims.checks_scl`), the UCL optimum and HUCL at NC (:mod:`theory.claims.checks_ucl`),
the WeiNCE Weibull top-1 law (:mod:`theory.claims.checks_weince`), and the searches of the open
problems O1-O1c (:mod:`theory.claims.checks_open`; ``large=True`` runs them at the large scale).

A group is ``(title, claim ids, check function)``; a check function appends ``(claim id, SubCheck)``
pairs to a list. An exception inside a group becomes a FAIL sub-check of each of its claims (never a
crash), after the sub-checks it produced before failing; a claim no check reported on is a FAIL
(never silently passed). An open problem's record is FOUND / NOT FOUND from its finding
sub-checks, or FAIL when one of its PASS / FAIL controls fails (:meth:`Claim.from_findings`).
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from theory.claims._support import CheckFn
from theory.claims.catalogue import CATALOGUE, CHECK_IDS, OPEN_IDS
from theory.claims.checks_harris import check_batched, check_beta_monotone, check_harris
from theory.claims.checks_open import CRITERIA, check_hessian, check_landscape
from theory.claims.checks_scl import check_hscl, check_scl
from theory.claims.checks_ucl import check_hucl, check_ucl
from theory.claims.checks_weince import check_weibull
from theory.claims.record import Claim, SubCheck, Verdict

__all__ = ["GROUPS", "THEORY_IDS", "run_groups", "run_checks", "command"]

#: The ids ``python -m theory`` reports on: the checks, then the open problems.
THEORY_IDS: tuple[str, ...] = CHECK_IDS + OPEN_IDS

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
    ("HUCL landscape search (O1, O1c)", ("O1", "O1c"), check_landscape),
    ("Hessian at NC (O1b)", ("O1b",), check_hessian),
)

#: The check functions that take ``large=True`` (the ``--large`` scale of the open problems).
_SCALABLE = (check_landscape, check_hessian)


def command(quick: bool = False, seed: int = 0, large: bool = False) -> str:
    """The command line that reproduces the checks: ``python -m theory [--quick] [--large] [--seed S]``."""
    return (
        "python -m theory"
        + (" --quick" if quick else "")
        + (" --large" if large else "")
        + (f" --seed {seed}" if seed else "")
    )


def _scale(quick: bool, large: bool, claim_id: str) -> str:
    """The scale a claim ran at: ``--large`` changes the open problems' scale only."""
    return "large" if large and claim_id in OPEN_IDS else ("quick" if quick else "full")


def run_groups(
    groups: Sequence[tuple[str, tuple[str, ...], CheckFn]],
    *,
    quick: bool = False,
    seed: int = 0,
    progress: bool = False,
    large: bool = False,
) -> list[Claim]:
    """Run ``groups``; one :class:`theory.claims.Claim` per claim id they name, in catalogue order.

    Args:
        groups: ``(title, claim ids, check function)`` triples.
        quick: passed to every check function (smaller instances).
        seed: passed to every check function.
        progress: print the time of each group to stderr.
        large: the open problems' searches at their large scale (``--large``).

    Returns:
        The claims, each with ``command`` (:func:`command`) and ``setting``
        (``{"scale": "quick" | "full" | "large", "seed": ...}``); an open problem's record also
        carries its declared criterion (:data:`theory.claims.checks_open.CRITERIA`).
    """
    ids = [cid for cid in THEORY_IDS if any(cid in g[1] for g in groups)]
    ids += [cid for g in groups for cid in g[1] if cid not in ids]  # ids outside the catalogue order
    subs: dict[str, list[SubCheck]] = {cid: [] for cid in ids}
    for title, claim_ids, fn in tqdm(
        groups, desc="theory checks", disable=not sys.stderr.isatty(), leave=False
    ):
        t0 = time.perf_counter()
        out: list[tuple[str, SubCheck]] = []
        try:
            (functools.partial(fn, large=True) if large and fn in _SCALABLE else fn)(out, quick, seed)
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
    cmd = command(quick, seed, large)
    claims = []
    for cid, ss in subs.items():
        setting = {"scale": _scale(quick, large, cid), "seed": str(seed)}
        if ss and cid in CATALOGUE and CATALOGUE[cid].kind == "open":
            claims.append(
                Claim.from_findings(cid, ss, setting=setting, command=cmd, criterion=CRITERIA.get(cid, ""))
            )
        elif ss:
            claims.append(Claim.from_subchecks(cid, ss, setting=setting, command=cmd))
        else:
            claims.append(Claim(cid, Verdict.FAIL, setting=setting, command=cmd, notes="no check ran"))
    return claims


def run_checks(
    quick: bool = False, seed: int = 0, progress: bool = False, large: bool = False
) -> list[Claim]:
    """Run every theory check (:data:`GROUPS`): T1-T8, W-law and O1-O1c, in catalogue order.

    A claim id of :data:`THEORY_IDS` that no group reports on is a FAIL.
    """
    claims = {c.id: c for c in run_groups(GROUPS, quick=quick, seed=seed, progress=progress, large=large)}
    for cid in THEORY_IDS:
        setting = {"scale": _scale(quick, large, cid), "seed": str(seed)}
        if cid not in claims:
            claims[cid] = Claim(
                cid, Verdict.FAIL, setting=setting, command=command(quick, seed, large), notes="no check ran"
            )
    order = list(THEORY_IDS) + [cid for cid in claims if cid not in THEORY_IDS]
    return [claims[cid] for cid in order]
