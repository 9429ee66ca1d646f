"""Theory checks T6 and T7: the UCL optimum ``L*_UCL`` at NC, and HUCL at NC with ``q(beta)``.

Jiang et al., arXiv 2311.05139, section 3; docs/hcl.md. T6: UCL minimised by NC at the binomial
value (closed form, exact batches, sympy, cvxpy); T7: the HUCL loss at NC through the same-class
probability ``q(beta)``, above ``L*_UCL``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from theory.claims._support import (
    _add,
    _loss,
    _mc_interval,
    _mc_worst,
    _nc_batch,
    _random_ball,
    _rounding_worst,
)
from theory.claims.record import SubCheck
from theory.hcl import convex, symbolic
from theory.hcl.optima import (
    collision_probability,
    hucl_at_nc,
    hucl_at_nc_batch,
    scl_optimum,
    ucl_optimum,
    weak_bound,
)
from theory.options import PSI_FORMS

__all__ = ["check_ucl", "check_hucl"]


def check_ucl(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T6: L*_UCL and its NC optimality under conditional independence (docs/hcl.md#the-ucl-optimum-t6).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    e, half, printed = _rounding_worst(
        [(ucl_optimum(6, psi="sum", num_negatives=2), "0.589452"), (ucl_optimum(100), "0.3152")]
    )
    _add(
        out,
        "T6",
        "L*_UCL vs docs/hcl.md#optimal-values (C=6,k=2: 0.589452; C=100: 0.3152), to half a unit in the last printed digit",
        2,
        "error",
        e,
        half,
        label=f"|L*_UCL - {printed}| (printed)",
    )
    e = max(
        abs(
            float(symbolic.ucl_optimum_expr(C, psi=p, num_negatives=K))
            - ucl_optimum(C, psi=p, num_negatives=K)
        )
        for C, p, K in ((6, "sum", 2), (10, "mean", 8), (4, "triplet", 5))
    )
    _add(out, "T6", "sympy exact binomial sum = optima float", 3, "error", e, 1e-12)
    gap = min(
        ucl_optimum(C, psi=p, num_negatives=K) - scl_optimum(C, psi=p, num_negatives=K)
        for C in (2, 3, 10, 100)
        for p in ("mean", "sum")
        for K in (1, 2, 256)
    )
    _add(
        out,
        "T6",
        "L*_UCL > L*_SCL (C in {2,3,10,100}, mean/sum, K in {1,2,256})",
        24,
        "gap",
        gap,
        0.0,
        f"smallest excess {gap:.3e}",
    )
    cases = [(C, 1, dom) for C in (3, 4, 5, 6) for dom in ("sphere", "ball")]
    cases += (
        [(4, 2, "sphere")] if quick else [(C, 2, dom) for C in (3, 4, 5, 6) for dom in ("sphere", "ball")]
    )
    val_err, g_err = 0.0, 0.0
    for C, k, dom in cases:
        for psi in ("mean",) if quick else ("mean", "sum"):
            sol = convex.minimize_ucl(C, psi=psi, normalization=dom, num_negatives=k)
            val_err = max(val_err, abs(sol.value - ucl_optimum(C, psi=psi, num_negatives=k)))
            g_err = max(g_err, sol.etf_deviation())
    _add(
        out,
        "T6",
        "cvxpy UCL Gram program (C=3..6, sphere & ball, k=1,2): value = L*_UCL",
        len(cases),
        "error",
        val_err,
        1e-6,
    )
    _add(out, "T6", "cvxpy UCL Gram program: optimal G = ETF Gram", len(cases), "error", g_err, 2e-3)
    # the optimum has rank C-1 (one zero eigenvalue): d = C-1 suffices in this collapsed setting
    lam = np.linalg.eigvalsh(sol.G)
    _add(
        out,
        "T6",
        f"rank of the UCL optimum (C={sol.G.shape[0]}) is C-1: smallest eigenvalue",
        1,
        "error",
        abs(float(lam[0])),
        1e-3,
        f"second smallest {lam[1]:.4f}; d >= C-1 vs d >= C left open (docs/hcl.md#the-ucl-optimum-t6)",
    )
    # sampled estimator at an NC batch: its mean is the binomial mixture of the batch
    gen = torch.Generator().manual_seed(seed)
    counts = [6, 6, 6, 6]
    z, labels = _nc_batch(counts)
    reps = 30 if quick else 100
    mc_cases: list[tuple[float, float]] = []
    for psi, K in (("mean", 4), ("sum", 3)):
        vals = [
            _loss(
                z,
                labels,
                setting="unsupervised",
                psi=psi,
                estimator="sampled",
                num_negatives=K,
                generator=gen,
            )
            for _ in range(reps)
        ]
        m, hw = _mc_interval(vals)
        ref = hucl_at_nc_batch(counts, 0.0, psi=psi, num_negatives=K)
        mc_cases.append((abs(m - ref), hw))
    diff, tol = _mc_worst(mc_cases)
    _add(
        out,
        "T6",
        f"UCL sampled estimator at NC batch (Monte Carlo, {reps} batches): mean = binomial value within 4 SE",
        2 * reps,
        "error",
        diff,
        tol,
        label="|mean loss - binomial value| (tol 4 SE)",
    )
    # counter-example without conditional independence (docs/hcl.md#the-ucl-optimum-t6): x+ = x, uniform on the sphere
    rng = np.random.default_rng(seed + 5)
    n = 100_000 if quick else 400_000
    u = rng.normal(size=(n, 50))
    w = rng.normal(size=(n, 50))
    s = (u * w).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(w, axis=1)
    spread = float(np.logaddexp(0.0, s - 1).mean())
    nc = ucl_optimum(2, psi="sum", num_negatives=1)
    _add(
        out,
        "T6",
        "counter-example x+=x (C=2,k=1,d=50): spread config beats NC, so cond. independence is needed",
        n,
        "gap",
        nc - spread,
        0.0,
        f"NC {nc:.4f} vs spread {spread:.4f} (docs/hcl.md: 0.4100 vs 0.3152)",
    )


def check_hucl(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T7: the HUCL value at NC and the lower bounds (docs/hcl.md#hucl-at-neural-collapse-t7).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    q_table = [
        ((100, 0), "0.010"),
        ((100, 2), "0.071"),
        ((100, 5), "0.612"),
        ((100, 10), "0.996"),
        ((100, 30), "1.000"),
        ((10, 2), "0.506"),
        ((10, 5), "0.966"),
        ((200, 5), "0.433"),
        ((200, 10), "0.9915"),
    ]
    e, half, printed = _rounding_worst([(collision_probability(C, b), v) for (C, b), v in q_table])
    _add(
        out,
        "T7",
        "q(beta) vs docs/hcl.md#hucl-at-neural-collapse-t7 (C=10,100,200), to half a unit in the last printed digit",
        len(q_table),
        "error",
        e,
        half,
        label=f"|q(beta) - {printed}| (printed)",
    )
    l_table = [(0, "0.3152"), (2, "0.3430"), (5, "0.5614"), (10, "0.6919"), (30, "0.6931")]
    s10 = [(0, "0.589"), (2, "0.924"), (5, "1.092")]
    e, half, printed = _rounding_worst(
        [(hucl_at_nc(100, b), v) for b, v in l_table]
        + [(hucl_at_nc(6, b, psi="sum", num_negatives=2), v) for b, v in s10]
    )
    _add(
        out,
        "T7",
        "L_HUCL(NC) vs docs/hcl.md#optimal-values (C=100, K=256; C=6,k=2: 0.589->0.924->1.092), "
        "to half a unit in the last printed digit",
        len(l_table) + len(s10),
        "error",
        e,
        half,
        label=f"|L_HUCL(NC) - {printed}| (printed)",
    )
    err = 0.0
    for C, b in ((6, 2), (10, 1), (4, 3)):
        for psi in PSI_FORMS:
            err = max(
                err,
                abs(
                    float(symbolic.hucl_at_nc_expr(C, b, psi=psi, num_negatives=3))
                    - hucl_at_nc(C, b, psi=psi, num_negatives=3)
                ),
            )
    _add(out, "T7", "sympy exact binomial HUCL value = optima float", 9, "error", err, 1e-12)
    betas = [0, 0.5, 1, 2, 5, 10, 30]
    gap = math.inf
    for C in (2, 3, 10, 100):
        for psi in PSI_FORMS:
            vals = [hucl_at_nc(C, b, psi=psi, num_negatives=16) for b in betas]
            gap = min(gap, float(np.diff(vals).min()))
    _add(
        out,
        "T7",
        "L_HUCL(NC) non-decreasing in beta from L*_UCL (C in {2,3,10,100}, 3 psi)",
        12,
        "gap",
        gap,
        1e-12,
    )
    strict = min(
        hucl_at_nc(C, 1.0, psi=p) - ucl_optimum(C, psi=p) for C in (2, 10, 100) for p in ("mean", "sum")
    )
    _add(
        out,
        "T7",
        "L_HUCL(NC, beta=1) > L*_UCL: the UCL bound is not tight for HUCL",
        6,
        "gap",
        strict,
        0.0,
        f"smallest excess {strict:.3e}",
    )
    lim = max(
        abs(hucl_at_nc(C, 1e4, psi=p) - {"mean": math.log(2), "sum": math.log(257)}[p])
        for C in (2, 10, 100)
        for p in ("mean", "sum")
    )
    _add(
        out,
        "T7",
        "beta -> inf limit psi(0,...,0) (log 2 mean form, log(1+K) sum form)",
        6,
        "error",
        lim,
        1e-9,
    )
    # batch counterpart vs the losses at exact NC batches (expectation estimator: exact)
    rng = np.random.default_rng(seed + 6)
    worst, n = 0.0, 0
    for _ in range(6 if quick else 20):
        C = int(rng.integers(2, 10))
        counts = rng.integers(0, 6, size=C)
        counts[0] = max(counts[0], 1)
        counts[-1] = max(counts[-1], 1)
        z, labels = _nc_batch(counts)
        for psi in PSI_FORMS:
            beta = float(rng.choice([0.0, 1.0, 5.0, 30.0]))
            sn, sp_ = bool(rng.integers(2)), bool(rng.integers(2))
            if not sp_ and (counts <= 1).all():
                sp_ = True
            K = int(rng.integers(1, 300))
            got = _loss(
                z,
                labels,
                setting="unsupervised",
                beta=beta,
                psi=psi,
                num_negatives=K,
                self_negative=sn,
                self_positive=sp_,
            )
            ref = hucl_at_nc_batch(
                counts,
                beta,
                psi=psi,
                num_negatives=K,
                estimator="expectation",
                self_negative=sn,
                self_positive=sp_,
            )
            worst = max(worst, abs(got - ref))
            n += 1
    _add(
        out,
        "T7",
        "batch formula (plug-in q_c) = theory.hcl HUCL expectation estimator at NC batches",
        n,
        "error",
        worst,
        1e-9,
    )
    gen = torch.Generator().manual_seed(seed)
    counts = np.array([5, 3, 4, 2, 6])
    z, labels = _nc_batch(counts)
    reps = 30 if quick else 100
    mc_cases: list[tuple[float, float]] = []
    for psi, beta in (("mean", 2.0), ("sum", 5.0)):
        vals = [
            _loss(
                z,
                labels,
                setting="unsupervised",
                beta=beta,
                psi=psi,
                estimator="sampled",
                num_negatives=4,
                generator=gen,
            )
            for _ in range(reps)
        ]
        m, hw = _mc_interval(vals)
        mc_cases.append((abs(m - hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=4)), hw))
    diff, tol = _mc_worst(mc_cases)
    _add(
        out,
        "T7",
        f"batch binomial formula = mean of the sampled HUCL estimator ({reps} batches) within 4 SE",
        2 * reps,
        "error",
        diff,
        tol,
        label="|mean loss - batch formula| (tol 4 SE)",
    )
    # weak bound psi(-1,...,-1): below L*_UCL, and below UCL/HUCL of any balanced batch (x+ may be x)
    gap = min(ucl_optimum(C, psi=p) - weak_bound(psi=p) for C in (2, 10, 100) for p in ("mean", "sum"))
    worst, n = math.inf, 0
    for _ in range(10 if quick else 40):
        C = int(rng.integers(2, 8))
        per = int(rng.integers(1, 6))
        z = _random_ball(rng, C * per, int(rng.integers(1, 8)))
        labels = torch.arange(C).repeat_interleave(per)
        for psi in PSI_FORMS:
            got = _loss(
                z, labels, setting="unsupervised", beta=float(rng.uniform(0, 10)), psi=psi, num_negatives=8
            )
            worst = min(worst, got - weak_bound(psi=psi, num_negatives=8))
            n += 1
    _add(out, "T7", "weak bound psi(-1..-1) <= L*_UCL (C=100 mean: 0.3133 < 0.3152)", 6, "gap", gap, 0.0)
    _add(
        out,
        "T7",
        "random balanced batches: HUCL/UCL - psi(-1..-1) (self-positive pairs included)",
        n,
        "gap",
        worst,
        1e-12,
    )
