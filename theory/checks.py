"""Runner of the theory checks: one :class:`theory.claims.Claim` per check id (T1-T8, W-law).

Every group of :mod:`theory.hcl.checks` and :mod:`theory.weince.checks` reports into the claims.

A group is ``(title, claim ids, check function)``; a check function appends ``(claim id, SubCheck)``
pairs to a list. An exception inside a group becomes a FAIL sub-check of each of its claims (never a
crash), after the sub-checks it produced before failing; a claim no check reported on is a FAIL
(never silently passed).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence

from theory.claims import CHECK_IDS, Claim, SubCheck, Verdict
from theory.hcl import checks as hcl_checks
from theory.weince import checks as weince_checks

__all__ = ["GROUPS", "run_groups", "run_checks", "command"]

#: ``(title, claim ids, check function)``: every theory check, in the order of the table.
GROUPS: tuple[tuple[str, tuple[str, ...], Callable[[list[tuple[str, SubCheck]], bool, int], None]], ...] = (
    *hcl_checks.GROUPS,
    *weince_checks.GROUPS,
)


def command(quick: bool = False, seed: int = 0) -> str:
    """The command line that reproduces the checks: ``python -m theory [--quick] [--seed S]``."""
    return "python -m theory" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")


def run_groups(
    groups: Sequence[tuple[str, tuple[str, ...], Callable[[list[tuple[str, SubCheck]], bool, int], None]]],
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
    from tqdm import tqdm

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
