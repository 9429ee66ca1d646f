"""Theory checks T1-T3 and T8: Harris dominance, beta monotonicity, the batched losses.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139); docs/hcl.md#theory and
docs/claims.md#theory-checks.

* T1, T2 -- Harris dominance ``L_HSCL >= L_SCL``, ``L_HUCL >= L_UCL``: exact k-tuple
  enumeration (random psi, eta) and Monte Carlo with confidence intervals;
* T3 -- exponential tilting: the loss is non-decreasing in beta;
* T8 -- the batched losses: Harris per batch, every exact-NC batch attains ``L*``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from theory.claims._support import _add, _loss, _mc_interval, _nc_batch, _random_ball
from theory.claims.record import SubCheck
from theory.hcl.harris import beta_monotonicity, harris_exact_check, harris_monte_carlo
from theory.hcl.optima import (
    scl_optimum,
)
from theory.options import ESTIMATORS, PSI_FORMS, SETTINGS

__all__ = ["check_harris", "check_beta_monotone", "check_batched"]


def check_harris(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T1, T2: hard >= easy by exact enumeration and by Monte Carlo (docs/hcl.md#harris-dominance-t1-t2).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    n_exact = 40 if quick else 150
    pairs = 1000 if quick else 4000
    for claim, setting in (("T1", "supervised"), ("T2", "unsupervised")):
        r = harris_exact_check(n_exact, setting=setting, seed=seed)
        _add(
            out,
            claim,
            f"exact k-tuple enumeration, random psi & eta ({r.details['pairs']} pairs)",
            r.instances,
            "gap",
            r.worst_gap,
            1e-10,
            r.details["worst_instance"],
        )
        for eta, params in (
            ("exponential", {"beta": 5.0}),
            ("step", {"threshold": 0.0, "low": 0.2}),
            ("polynomial", {"power": 3.0, "shift": 1.0}),
        ):
            r = harris_monte_carlo(setting=setting, num_pairs=pairs, eta=eta, eta_params=params, seed=seed)
            lo, hi = r.details["ci"]
            # gap = upper end of the 99% CI of E_hard - E_base: negative only if significantly violated
            _add(
                out,
                claim,
                f"Monte Carlo {eta}, C=10 N=500 d=9 K=256 mean-psi",
                r.instances,
                "gap",
                hi,
                0.0,
                f"E_hard-E_base={r.details['estimate']:.4f} CI99=[{lo:.4f},{hi:.4f}]",
                label="upper end of the 99% CI of E_hard - E_base",
            )


def check_beta_monotone(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T3: the hard losses are non-decreasing in beta (docs/hcl.md#monotonicity-in-beta-t3).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    n = 20 if quick else 60
    for setting in SETTINGS:
        r = beta_monotonicity(n, setting=setting, seed=seed)
        curve = ", ".join(f"{v:.3f}" for v in r.details["mean_curve"])
        _add(
            out,
            "T3",
            f"exact enumeration {setting}, beta in {r.details['betas']}",
            r.instances,
            "gap",
            r.worst_gap,
            1e-10,
            f"mean curve {curve}",
        )
    # realistic batch: expectation estimator of theory.hcl on a random unit-ball batch
    rng = np.random.default_rng(seed + 1)
    C, per = 10, 26
    z = _random_ball(rng, C * per, C - 1)
    labels = torch.arange(C).repeat_interleave(per)
    betas = [0.0, 0.5, 1, 2, 5, 10, 30, 100]
    worst, count = math.inf, 0
    for setting in SETTINGS:
        for psi in PSI_FORMS:
            vals = [_loss(z, labels, setting=setting, beta=b, psi=psi) for b in betas]
            worst = min(worst, float(np.diff(vals).min()))
            count += 1
    _add(
        out,
        "T3",
        f"theory.hcl expectation estimator, B={C * per} C={C}, 3 psi x 2 settings, beta<=100",
        count,
        "gap",
        worst,
        1e-10,
    )


def check_batched(out: list[tuple[str, SubCheck]], quick: bool, seed: int) -> None:
    """T8: the batched versions of the bounds (docs/hcl.md#batched-versions-t8).

    Appends ``(claim id, SubCheck)`` pairs to ``out``; ``quick`` uses smaller instances.
    """
    rng = np.random.default_rng(seed + 7)
    worst, n = math.inf, 0
    for _ in range(15 if quick else 60):
        C = int(rng.integers(2, 10))
        B = int(rng.integers(C, 64))
        labels = torch.from_numpy(np.concatenate([np.arange(C), rng.integers(0, C, B - C)]))
        z = _random_ball(rng, B, int(rng.integers(1, 12)))
        for setting in SETTINGS:
            for psi in PSI_FORMS:
                beta = float(rng.choice([0.5, 2.0, 5.0, 30.0]))
                base = _loss(z, labels, setting=setting, beta=0.0, psi=psi, num_negatives=32)
                hard = _loss(z, labels, setting=setting, beta=beta, psi=psi, num_negatives=32)
                worst = min(worst, hard - base)
                n += 1
    _add(
        out,
        "T8",
        "Harris per batch: hard - base for random batches (expectation estimator, SCL & UCL, 3 psi)",
        n,
        "gap",
        worst,
        1e-10,
    )
    worst, n = 0.0, 0
    gen = torch.Generator().manual_seed(seed)
    for _ in range(10 if quick else 30):
        C = int(rng.integers(2, 20))
        counts = rng.integers(0, 5, size=C)
        counts[:2] = np.maximum(counts[:2], 1)
        z, labels = _nc_batch(counts)
        psi = str(rng.choice(list(PSI_FORMS)))
        beta = float(rng.choice([0.0, 5.0, 100.0]))
        est = str(rng.choice(list(ESTIMATORS)))
        got = _loss(
            z,
            labels,
            setting="supervised",
            beta=beta,
            psi=psi,
            estimator=est,
            num_negatives=256,
            generator=gen,
        )
        worst = max(worst, abs(got - scl_optimum(C, psi=psi, num_negatives=256)))
        n += 1
    _add(
        out, "T8", "every exact-NC batch (any class counts, any beta) attains L*_SCL", n, "error", worst, 1e-9
    )
    # expected batched loss over random mini-batches of a balanced data set >= L*_SCL
    C, per, b = 10, 40, 64
    z_all = _random_ball(rng, C * per, C - 1)
    y_all = torch.arange(C).repeat_interleave(per)
    n = 40 if quick else 200
    vals = []
    for _ in range(n):
        idx = torch.from_numpy(rng.choice(C * per, size=b, replace=False))
        vals.append(_loss(z_all[idx], y_all[idx], setting="supervised", beta=5.0, psi="mean"))
    m, hw = _mc_interval(vals)
    lstar = scl_optimum(C, psi="mean")
    _add(
        out,
        "T8",
        f"E_batch HSCL over {n} random batches (b={b}, C={C}) - L*_SCL (4 SE lower end)",
        n,
        "gap",
        m - hw - lstar,
        0.0,
        f"mean {m:.4f} vs L* {lstar:.4f}",
    )
    # a single 2-class antipodal batch beats L*_SCL(C=10): only the expectation is bounded
    z2 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    one = _loss(z2, torch.tensor([0, 0, 1, 1]), setting="supervised", psi="mean")
    _add(
        out,
        "T8",
        "a 2-class antipodal batch has loss below L*_SCL(C=10): the batched bound is in expectation",
        1,
        "gap",
        lstar - one,
        0.0,
        f"{one:.4f} < {lstar:.4f}",
    )
