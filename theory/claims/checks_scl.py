"""Theory checks T4 and T5: SCL and HSCL are minimised by Neural Collapse at ``L*_SCL``.

Jiang et al., arXiv 2311.05139, section 3; docs/hcl.md#the-scl-optimum-t4-t5. The closed form
against exact NC batches and the losses, sympy, and cvxpy programs over class-mean Gram matrices.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from theory.claims._support import _add, _loss, _nc_batch, _random_ball, _rounding_worst
from theory.claims.record import SubCheck
from theory.collapse import paper_conditions
from theory.hcl import convex, symbolic
from theory.hcl.optima import (
    scl_optimum,
)
from theory.options import ESTIMATORS, PSI_FORMS

__all__ = ["check_scl", "check_hscl"]


def check_scl(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T4: L*_SCL closed form, sympy, convex programs and exact NC batches (docs/hcl.md#the-scl-optimum-t4-t5).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    # closed form vs the batched losses at an exact NC batch
    rng = np.random.default_rng(seed + 2)
    worst, n = 0.0, 0
    gen = torch.Generator().manual_seed(seed)
    for _ in range(4 if quick else 10):
        C = int(rng.integers(3, 12))
        counts = rng.integers(1, 6, size=C)
        z, labels = _nc_batch(counts)
        for psi in PSI_FORMS:
            K = int(rng.integers(1, 300))
            tau = float(rng.uniform(0.2, 2.0))
            for est in ESTIMATORS:
                for beta in (0.0, 5.0):
                    got = _loss(
                        z,
                        labels,
                        setting="supervised",
                        beta=beta,
                        psi=psi,
                        tau=tau,
                        estimator=est,
                        num_negatives=K,
                        generator=gen,
                    )
                    ref = scl_optimum(C, psi=psi, tau=tau, num_negatives=K)
                    worst = max(worst, abs(got - ref))
                    if beta == 0:
                        n += 1
    _add(
        out,
        "T4",
        "L*_SCL closed form = theory.hcl SCL at exact NC batches (3 psi, 2 estimators)",
        n,
        "error",
        worst,
        1e-9,
    )
    # the values of docs/hcl.md#optimal-values
    table = [
        ((10, "mean", 256, 1.0), "0.284572"),
        ((100, "mean", 256, 1.0), "0.310555"),
        ((200, "mean", 256, 1.0), "0.311913"),
        ((10, "sum", 256, 1.0), "4.445863"),
        ((100, "sum", 256, 1.0), "4.545745"),
        ((200, "sum", 256, 1.0), "4.550768"),
        ((10, "sum", 256, 0.5), "3.358367"),
        ((100, "sum", 256, 0.5), "3.554003"),
        ((200, "sum", 256, 0.5), "3.563865"),
        ((6, "sum", 2, 1.0), "0.471495"),
    ]
    err, half, printed = _rounding_worst(
        [(scl_optimum(C, psi=p, num_negatives=K, tau=t), v) for (C, p, K, t), v in table]
    )
    _add(
        out,
        "T4",
        "L*_SCL vs the printed values of docs/hcl.md#optimal-values, to half a unit in the last printed digit",
        len(table),
        "error",
        err,
        half,
        label=f"|L*_SCL - {printed}| (printed)",
    )
    # sympy: exact optimal values, ETF spectrum, -1/(C-1)
    err = 0.0
    for C in (3, 6, 10, 100):
        for psi, K in (("mean", 256), ("sum", 2), ("sum", 256), ("triplet", 3)):
            err = max(
                err,
                abs(
                    float(symbolic.scl_optimum_expr(C, psi=psi, num_negatives=K, margin=2))
                    - scl_optimum(C, psi=psi, num_negatives=K, margin=2)
                ),
            )
    _add(out, "T4", "sympy exact L*_SCL = optima float (4 C x 4 psi)", 16, "error", err, 1e-12)
    ok = symbolic.check_etf_spectrum()
    _, m = symbolic.min_mean_pairwise_inner_product()
    ok = ok and str(m) == "-1/(C - 1)"
    _add(
        out,
        "T4",
        "sympy: ETF Gram spectrum {C/(C-1) x(C-1), 0}; min mean inner product -1/(C-1)",
        8,
        "error",
        0.0 if ok else 1.0,
        0.0,
        label="identities not holding (0: all hold exactly)",
    )
    # cvxpy programs
    cases = [(C, 1, dom) for C in (3, 4, 5, 6) for dom in ("sphere", "ball")]
    cases += (
        [(3, 2, "ball"), (6, 2, "sphere")]
        if quick
        else [(C, 2, dom) for C in (3, 4, 5, 6) for dom in ("sphere", "ball")]
    )
    val_err, g_err = 0.0, 0.0
    for C, k, dom in cases:
        sol = convex.minimize_scl(C, psi="mean", normalization=dom, num_negatives=k)
        val_err = max(val_err, abs(sol.value - scl_optimum(C, psi="mean", num_negatives=k)))
        g_err = max(g_err, sol.etf_deviation())
    _add(
        out,
        "T4",
        "cvxpy SCL Gram program (C=3..6, sphere & ball, k=1,2): value = L*_SCL",
        len(cases),
        "error",
        val_err,
        1e-6,
    )
    _add(
        out,
        "T4",
        "cvxpy SCL Gram program: optimal G = ETF Gram (max entry error)",
        len(cases),
        "error",
        g_err,
        2e-3,
    )
    # class means recovered from the optimal G satisfy the paper's NC conditions
    w, V = np.linalg.eigh(sol.G)
    mu = V * np.sqrt(np.clip(w, 0, None))
    cond = paper_conditions(torch.from_numpy(mu))
    _add(
        out,
        "T4",
        f"theory.collapse.paper_conditions of the C={sol.G.shape[0]} cvxpy optimum",
        1,
        "error",
        max(cond.values()),
        5e-3,
    )
    # random collapsed configurations stay above L* (best of 600 in 0.486-0.492, docs/claims.md)
    n = 200 if quick else 600
    rng = np.random.default_rng(seed + 3)
    lstar = scl_optimum(6, psi="sum", num_negatives=2)
    best = math.inf
    for _ in range(n):
        mu = rng.normal(size=(6, 5))
        mu /= np.linalg.norm(mu, axis=1, keepdims=True)
        best = min(best, convex.population_loss_at_gram(mu @ mu.T, psi="sum", num_negatives=2))
    _add(
        out,
        "T4",
        f"{n} random unit-norm class-mean sets (C=6,d=5,k=2,sum): F(G) - L*",
        n,
        "gap",
        best - lstar,
        0.0,
        f"best random F={best:.4f} > L*={lstar:.6f}; expected 0.486-0.492",
    )
    # hinge psi: the optimum value is attained by non-ETF Grams too (no uniqueness)
    C, margin = 4, 2.0
    sol = convex.minimize_scl(C, psi="triplet", margin=margin, num_negatives=1)
    u = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=float)  # two antipodal pairs
    other = convex.population_loss_at_gram(u @ u.T, psi="triplet", margin=margin, num_negatives=1)
    ref = scl_optimum(C, psi="triplet", margin=margin)
    _add(
        out,
        "T4",
        "triplet psi (C=4, margin 2): cvxpy value = closed form = value of a non-ETF Gram",
        2,
        "error",
        max(abs(sol.value - ref), abs(other - ref)),
        1e-7,
        "NC optimal but not the unique optimum",
    )
    # unequal priors: the optimum moves away from the ETF
    pri = [0.4, 0.3, 0.2, 0.1]
    sol = convex.minimize_scl(4, priors=pri, normalization="ball", num_negatives=1)
    at_etf = convex.population_loss_at_gram(convex.etf_gram_np(4), priors=pri, num_negatives=1)
    _add(
        out,
        "T4",
        "unequal priors (0.4,0.3,0.2,0.1), C=4: optimum <= ETF value (beyond the paper)",
        1,
        "gap",
        at_etf - sol.value,
        1e-7,
        f"optimum {sol.value:.4f} vs ETF {at_etf:.4f}; max |G - G_ETF| = {sol.etf_deviation():.3f}",
    )


def check_hscl(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T5: HSCL is minimised by NC for every hardening (docs/hcl.md#the-scl-optimum-t4-t5).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    rng = np.random.default_rng(seed + 4)
    gen = torch.Generator().manual_seed(seed)
    worst, n = 0.0, 0
    for beta in (0.0, 2.0, 5.0, 10.0, 30.0, 1000.0):
        C = int(rng.integers(3, 12))
        z, labels = _nc_batch(rng.integers(1, 6, size=C))
        for psi in PSI_FORMS:
            for est in ESTIMATORS:
                got = _loss(
                    z,
                    labels,
                    setting="supervised",
                    beta=beta,
                    psi=psi,
                    estimator=est,
                    num_negatives=64,
                    generator=gen,
                )
                worst = max(worst, abs(got - scl_optimum(C, psi=psi, num_negatives=64)))
                n += 1
    _add(
        out,
        "T5",
        "HSCL at exact NC = L*_SCL for beta in {0,...,1000} (3 psi, 2 estimators)",
        n,
        "error",
        worst,
        1e-9,
    )
    # any f: HSCL >= L*_SCL (balanced batches, expectation estimator)
    worst, n = math.inf, 0
    for _ in range(10 if quick else 40):
        C = int(rng.integers(2, 8))
        per = int(rng.integers(1, 6))
        d = int(rng.integers(C - 1, C + 3))
        z = _random_ball(rng, C * per, max(d, 1))
        labels = torch.arange(C).repeat_interleave(per)
        for psi in PSI_FORMS:
            beta = float(rng.uniform(0, 20))
            got = _loss(z, labels, setting="supervised", beta=beta, psi=psi, num_negatives=16)
            worst = min(worst, got - scl_optimum(C, psi=psi, num_negatives=16))
            n += 1
    _add(out, "T5", "random balanced unit-ball batches: HSCL - L*_SCL", n, "gap", worst, 1e-12)
