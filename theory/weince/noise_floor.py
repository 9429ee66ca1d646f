"""The synthetic softmax-vs-Weibit noise floor: theory values and the Monte Carlo experiment.

Erol et al., ICML 2026 (arXiv 2606.00262), the synthetic noise-floor experiment (claim W5);
``docs/weince.md#the-noise-floor``. Winners are drawn from the Weibit law ``p* ∝ (1 - s)^(-beta)``
over fixed scores ``s``; the softmax estimator matches moments in ``s``, the Weibit estimator in
``x = -log(1 - s)``. Input rule of the EVT tools (``docs/weince.md#inputs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from theory.validation import integer, real
from theory.weince._inputs import as_float64

__all__ = [
    "NoiseFloorTheory",
    "noise_floor_theory",
    "softmax_link_mle",
    "noise_floor_experiment",
]

_NF_SCORES = (0.15, 0.45, 0.70, 0.90)
_NF_NS = (100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True)
class NoiseFloorTheory:
    """Theory values of the noise-floor design, all computed from the DGP (``docs/weince.md#the-noise-floor``).

    ``p_star`` winner law ``∝ (1 - s)^(-beta)``; ``target = beta (x_top - x_ref)`` with
    ``x = -log(1 - s)``; ``theta_pseudo`` solves ``E_softmax(theta s)[s] = E_p*[s]``;
    ``bias2_floor = (theta_pseudo (s_top - s_ref) - target)^2``; ``fisher = Var_p*(x)``;
    ``c = (x_top - x_ref)^2 / fisher`` (Weibit MSE ~ c/n); Godambe ``A = Var_q(s)``,
    ``B = E_p*[(s - mu_q)^2]``, ``godambe = B / A^2`` (n Var(theta_hat)); ``softmax_var_coef =
    (s_top - s_ref)^2 godambe`` (n Var of the softmax log-odds).
    """

    scores: tuple[float, ...]
    beta: float
    p_star: np.ndarray
    target: float
    theta_pseudo: float
    pseudo_log_odds: float
    bias2_floor: float
    fisher: float
    c: float
    godambe_A: float
    godambe_B: float
    godambe: float
    softmax_var_coef: float


def _softmax_mean(theta: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``E_{softmax(theta v)}[v]`` for a vector of theta ``(R,)`` -> ``(R,)``."""
    l = theta[:, None] * v[None, :]
    l = l - l.max(axis=1, keepdims=True)
    w = np.exp(l)
    return np.asarray((w @ v) / w.sum(axis=1))


def softmax_link_mle(
    target_mean: Any, v: Any, *, steps: int = 100, bracket: tuple[float, float] = (-100.0, 100.0)
) -> np.ndarray:
    """One-parameter multinomial-logit MLE by moment matching: solve ``E_softmax(b v)[v] = m``.

    Bisection (``steps`` halvings of ``bracket``; the mean is increasing in ``b``), vectorised
    over ``target_mean`` (both estimators of the noise floor, ``docs/weince.md#the-noise-floor``).

    Args:
        target_mean: sample means ``m`` to match (flattened).
        v: the candidates' coordinates (flattened).
        steps: bisection halvings, ``>= 1``.
        bracket: increasing search interval of ``b``.

    Returns:
        ``b_hat``, one per target mean.

    Shape:
        ``target_mean`` ``(R,)``, ``v`` ``(C,)`` -> ``(R,)``.

    Raises:
        ValueError: non-finite inputs, ``steps < 1``, a bracket that is not increasing.
    """
    v = as_float64("v", v, flatten=True)
    m = as_float64("target_mean", target_mean, flatten=True)
    steps = integer("steps", steps, lo=1)
    lo = np.full(m.shape, float(bracket[0]))
    hi = np.full(m.shape, float(bracket[1]))
    if not bracket[0] < bracket[1]:
        raise ValueError(f"bracket must be increasing, got {bracket}")
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        below = _softmax_mean(mid, v) < m
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.asarray(0.5 * (lo + hi))


def noise_floor_theory(
    scores: Any = _NF_SCORES, beta: float = 0.8, top: int = -1, ref: int = 0
) -> NoiseFloorTheory:
    """Theory lines of the synthetic noise floor, computed from the DGP (``docs/weince.md#the-noise-floor``).

    Defaults reproduce c = 7.13603 and bias^2 = 0.045151.

    Args:
        scores: candidate scores in ``(-1, 1)``.
        beta: the Weibit exponent ``> 0``.
        top: index of the top candidate (negative indices allowed).
        ref: index of the reference candidate.

    Returns:
        :class:`NoiseFloorTheory`.

    Raises:
        ValueError: scores outside ``(-1, 1)`` or non-finite, ``beta <= 0``.
    """
    s = as_float64("scores", scores, flatten=True)
    if np.any((s >= 1) | (s <= -1)):
        raise ValueError("scores must lie in (-1, 1)")
    beta = real("beta", beta, lo=0.0, lo_open=True)
    top, ref = int(top) % s.size, int(ref) % s.size
    x = -np.log1p(-s)
    p = np.exp(beta * (x - x.max()))
    p /= p.sum()
    target = beta * (x[top] - x[ref])
    mu_s = float(p @ s)
    theta = float(
        optimize.brentq(
            lambda t: _softmax_mean(np.array([t]), s)[0] - mu_s, -100, 100, xtol=1e-14, rtol=1e-15
        )
    )
    pseudo = theta * (s[top] - s[ref])
    fisher = float(p @ x**2 - (p @ x) ** 2)
    c = float((x[top] - x[ref]) ** 2 / fisher)
    qd = np.exp(theta * (s - s.max()))
    qd /= qd.sum()
    mu_q = float(qd @ s)
    A = float(qd @ (s - mu_q) ** 2)
    B = float(p @ (s - mu_q) ** 2)
    god = B / A**2
    return NoiseFloorTheory(
        tuple(s.tolist()),
        beta,
        p,
        float(target),
        theta,
        float(pseudo),
        float((pseudo - target) ** 2),
        fisher,
        c,
        A,
        B,
        god,
        float((s[top] - s[ref]) ** 2 * god),
    )


def noise_floor_experiment(
    ns: Sequence[int] = _NF_NS,
    *,
    reps: int = 12000,
    seed: int = 20260113,
    scores: Any = _NF_SCORES,
    beta: float = 0.8,
    steps: int = 100,
) -> pd.DataFrame:
    """Simulate the softmax-vs-Weibit noise floor (claim W5, ``docs/weince.md#the-noise-floor``).

    For each ``n`` in order: ``reps`` multinomial(n, p*) count vectors from
    ``numpy.random.default_rng(seed)`` (one ``rng.multinomial(n, p*, size=reps)`` per n); the
    softmax estimator ``theta_hat`` (moment match in ``s``) and the Weibit estimator ``beta_hat``
    (moment match in ``x = -log(1 - s)``), both by 100-step bisection on [-100, 100]; log-odds
    estimates ``theta_hat (s_top - s_ref)`` and ``beta_hat (x_top - x_ref)`` of the target.

    Args:
        ns: sample sizes ``n >= 1``, simulated in this order.
        reps: replications per ``n`` (``>= 2``).
        seed: seed of ``numpy.random.default_rng``.
        scores: candidate scores.
        beta: the Weibit exponent.
        steps: bisection halvings of both estimators.

    Returns:
        DataFrame, one row per n: ``n, reps, mse_softmax, mse_weibit, se_mse_softmax,
        se_mse_weibit`` (Monte-Carlo standard errors), ``bias2_softmax`` (empirical),
        ``theory_weibit = c/n``, ``bias2_floor``, ``theory_softmax = bias2_floor +
        softmax_var_coef / n`` (the finite-n Godambe line), ``c``.
    """
    reps = integer("reps", reps, lo=2)
    ns = [integer("n", n, lo=1) for n in ns]
    th = noise_floor_theory(scores, beta)
    s = np.asarray(th.scores)
    x = -np.log1p(-s)
    top, ref = s.size - 1, 0
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        counts = rng.multinomial(n, th.p_star, size=reps).astype(np.float64)
        mean_s = counts @ s / n
        mean_x = counts @ x / n
        lam_s = softmax_link_mle(mean_s, s, steps=steps) * (s[top] - s[ref])
        lam_w = softmax_link_mle(mean_x, x, steps=steps) * (x[top] - x[ref])
        es = (lam_s - th.target) ** 2
        ew = (lam_w - th.target) ** 2
        rows.append(
            {
                "n": n,
                "reps": reps,
                "mse_softmax": float(es.mean()),
                "mse_weibit": float(ew.mean()),
                "se_mse_softmax": float(es.std(ddof=1) / math.sqrt(reps)),
                "se_mse_weibit": float(ew.std(ddof=1) / math.sqrt(reps)),
                "bias2_softmax": float((lam_s.mean() - th.target) ** 2),
                "theory_weibit": th.c / n,
                "bias2_floor": th.bias2_floor,
                "theory_softmax": th.bias2_floor + th.softmax_var_coef / n,
                "c": th.c,
            }
        )
    return pd.DataFrame(rows)
