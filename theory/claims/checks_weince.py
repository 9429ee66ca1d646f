"""The theory check of the WeiNCE paper: the Weibull top-1 law (W-law of ``python -m theory``).

Erol et al., ICML 2026 (arXiv 2606.00262), ``docs/weince.md#the-weibit-top-1-law``: for shortfalls
``D_j = q_j W_j`` with ``W_j`` i.i.d. Weibull of shape ``beta``,
``P(D_j smallest) = q_j^(-beta) / sum_k q_k^(-beta)`` (sympy integration and Monte Carlo), and
the T_lambda logit is increasing and convex (sympy). Same conventions as
the other check modules (:mod:`theory.claims.checks`).
"""

from __future__ import annotations

import numpy as np

from theory.claims._support import _add, _mc_worst
from theory.claims.record import SubCheck
from theory.weince import symbolic

__all__ = ["check_weibull"]


def check_weibull(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """Sub-checks of the W-law: sympy integration, a Monte Carlo and the T_lambda derivative.

    Args:
        out: receives ``(claim id, SubCheck)`` pairs.
        quick: fewer instances and draws.
        seed: seed of the Monte Carlo.
    """
    ok = all(symbolic.check_weibull_top1_law(K) for K in (2, 3))
    n = 2
    if not quick:
        ok = ok and all(symbolic.check_weibull_top1_law(K, b) for K in (2, 3) for b in (1, 2))
        n += 4
    _add(
        out,
        "W-law",
        "sympy exact integration, K=2,3, symbolic beta" + ("" if quick else " and beta=1,2"),
        n,
        "error",
        0.0 if ok else 1.0,
        0.0,
        label="identities not holding (0: all hold exactly)",
    )
    rng = np.random.default_rng(seed + 8)
    m = 100_000 if quick else 400_000
    cases: list[tuple[float, float]] = []
    for beta in (0.5, 2.0, 5.0):
        q = rng.uniform(0.2, 1.0, size=4)
        D = q * rng.weibull(beta, size=(m, q.size))
        freq = np.bincount(D.argmin(axis=1), minlength=q.size) / m
        p = q ** (-beta) / (q ** (-beta)).sum()
        se = np.sqrt(p * (1 - p) / m)
        cases += zip(np.abs(freq - p).tolist(), (4 * se).tolist(), strict=True)
    diff, tol = _mc_worst(cases)
    _add(
        out,
        "W-law",
        f"Monte Carlo K=4, beta in {{0.5,2,5}}, {m} draws: winning frequencies = law within 4 SE",
        3 * m,
        "error",
        diff,
        tol,
        label="|winning frequency - law| (tol 4 SE)",
    )
    ok = symbolic.check_tlambda_derivative()
    _add(
        out,
        "W-law",
        "sympy: dT_lambda/ds = (1-lambda)/tau + lambda/(1-s) > 0, convex",
        1,
        "error",
        0.0 if ok else 1.0,
        0.0,
        label="identities not holding (0: all hold exactly)",
    )
