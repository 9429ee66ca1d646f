"""Extreme-value diagnostics for WeiNCE: POT / GPD fits, tail AIC fits, link selection, noise floor.

Reference: Erol et al., ICML 2026 (arXiv 2606.00262); spec/weince.md §1.5, §1.6, §2.4-§2.5,
§4.1, §4.2; spec/metrics.md §4 (pitfalls 9-10) and §5.

Notation and conventions (Coles 2001):

* scores ``s`` (cosine similarities of negatives), threshold ``u``, exceedances ``y = s - u > 0``;
* GPD ``F(y) = 1 - (1 + xi y / sigma)^(-1/xi)`` (exponential at ``xi = 0``), log-likelihood
  ``l(xi, sigma) = -n log sigma - (1 + 1/xi) sum log(1 + xi y / sigma)``;
* ``xi < 0``: reverse-Weibull domain with finite endpoint ``x_F = u - sigma / xi``;
* **sign convention**: ``xi`` here equals ``c`` of ``scipy.stats.genpareto`` and equals ``-c`` of
  ``scipy.stats.genextreme`` (pitfall 9). Every function returns ``xi`` in this (Coles) sign.
* shortfall ``delta = max(1 - s, eps)``; T_lambda logits
  ``(1 - lam) s / tau + lam (-log(1 - min(s, 1 - eps)))`` (spec §1.4).

GPD maximum likelihood is fragile near ``xi <= -0.5`` and the likelihood is unbounded for
``xi < -1`` at ``sigma -> |xi| max y`` (pitfall 10); hence the cap-free *profile* likelihood on a
fixed grid of ``xi`` (spec §4.1), with ``sigma`` kept at ``sigma >= |xi| max y (1 + 1e-9)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import optimize, stats

import torch

from theory.losses import two_view_candidates
from theory.validation import integer, real
from theory.weince import tail_fits, tail_size, tlambda_logits

__all__ = [
    "gpd_loglik",
    "gpd_quantile",
    "profile_sigma",
    "GPDFit",
    "fit_gpd",
    "POTResult",
    "pot_fit",
    "threshold_stability",
    "lower_triangle_scores",
    "embedding_scores",
    "scipy_gpd_fit",
    "gev_fit",
    "TailAICFit",
    "tail_aic_fit",
    "tail_aic_fits",
    "tlambda_loglik",
    "candidates_from_similarity",
    "two_view_link_candidates",
    "LinkSelection",
    "link_select",
    "NoiseFloorTheory",
    "noise_floor_theory",
    "softmax_link_mle",
    "noise_floor_experiment",
]

_XI_ZERO = 1e-8  #: |xi| below this uses the exponential formula (spec §4.1)
_BOUNDARY = 1e-9  #: relative margin keeping sigma above |xi| max y for xi < 0


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _as_1d(name: str, x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name} must be non-empty")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    return a


# --------------------------------------------------------------------------------------------
# GPD: likelihood, quantiles, profile likelihood
# --------------------------------------------------------------------------------------------


def gpd_loglik(y, xi: float, sigma: float) -> float:
    """GPD log-likelihood ``-n log sigma - (1 + 1/xi) sum log(1 + xi y/sigma)`` (metrics.md §5).

    Exponential formula ``-n log sigma - sum y / sigma`` at ``|xi| < 1e-8``; ``-inf`` outside the
    support (``1 + xi y / sigma <= 0``). Shapes: ``y`` ``(n,)`` exceedances ``>= 0``.
    """
    y = _as_1d("y", y)
    xi = real("xi", xi)
    sigma = real("sigma", sigma, lo=0.0, lo_open=True)
    n = y.size
    if abs(xi) < _XI_ZERO:
        return float(-n * math.log(sigma) - y.sum() / sigma)
    t = 1.0 + xi * y / sigma
    if np.any(t <= 0):
        return -math.inf
    return float(-n * math.log(sigma) - (1.0 + 1.0 / xi) * np.log(t).sum())


def gpd_quantile(p, xi: float, sigma: float) -> np.ndarray:
    """GPD quantile ``sigma/xi ((1 - p)^(-xi) - 1)`` (``-sigma log(1 - p)`` at xi = 0), p in [0,1)."""
    p = np.asarray(p, dtype=np.float64)
    if np.any((p < 0) | (p >= 1)):
        raise ValueError("p must lie in [0, 1)")
    xi = real("xi", xi)
    sigma = real("sigma", sigma, lo=0.0, lo_open=True)
    if abs(xi) < _XI_ZERO:
        return -sigma * np.log1p(-p)
    return sigma / xi * np.expm1(-xi * np.log1p(-p))


def _profile(y: np.ndarray, xis: np.ndarray, max_steps: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised profile MLE ``sigma_hat(xi)`` and ``l(xi, sigma_hat(xi))`` over a grid of xi.

    For each xi, Newton steps in ``t = log sigma`` on the sigma-score
    ``g(sigma) = sigma dl/dsigma = -n + (1 + 1/xi) sum a/(1 + a)``, ``a = xi y / sigma``,
    safeguarded by a bisection bracket (g decreases from ``+`` to ``-n``). For ``xi < 0`` sigma is
    kept above ``|xi| max y (1 + 1e-9)``. For ``xi <= -1`` no interior root exists: sigma is
    reported at that constraint and, for ``xi < -1``, the profile value is ``-inf`` (the likelihood
    is unbounded at the constraint, so there is no MLE; pitfall 10).
    """
    n = y.size
    ymax = float(y.max())
    ymean = float(y.mean())
    xis = np.asarray(xis, dtype=np.float64)
    G = xis.size
    sig = np.empty(G)
    ll = np.empty(G)
    zero = np.abs(xis) < _XI_ZERO
    if ymax <= 0:
        raise ValueError("exceedances y must contain a positive value")
    # exponential points: closed form
    sig[zero] = ymean
    ll[zero] = -n * math.log(ymean) - n
    nz = ~zero
    xi = xis[nz]
    if xi.size:
        lo_bound = np.where(xi < 0, np.log(np.abs(xi) * ymax * (1 + _BOUNDARY)), -np.inf)
        # bracket [lo, hi] in log sigma with g(lo) > 0 > g(hi)
        hi = np.full(xi.shape, math.log(ymax * (1 + np.abs(xi).max()) * 1e6 + ymean))
        lo = np.where(xi < 0, lo_bound, math.log(ymax) - 40.0)
        c = 1.0 + 1.0 / xi

        def g_and_dg(t, idx):
            s = np.exp(t[idx])[:, None]
            a = xi[idx, None] * y[None, :] / s
            r = a / (1.0 + a)
            g = -n + c[idx] * r.sum(axis=1)
            dg = -c[idx] * (r / (1.0 + a)).sum(axis=1)  # d g / d log sigma
            return g, dg

        # start: method-of-moments-like sigma = mean (1 - xi), inside the feasible region
        with np.errstate(divide="ignore"):
            t = np.log(np.maximum(ymean * (1.0 - xi), np.exp(lo_bound) * (1 + 1e-3)))
        t = np.clip(t, lo, hi)
        no_root = xi <= -1.0  # g < 0 everywhere: the constraint is active
        idx = np.flatnonzero(~no_root)
        for _ in range(max_steps):
            if idx.size == 0:
                break
            g, dg = g_and_dg(t, idx)
            pos = g > 0
            lo[idx] = np.where(pos, t[idx], lo[idx])
            hi[idx] = np.where(pos, hi[idx], t[idx])
            with np.errstate(divide="ignore", invalid="ignore"):
                t_new = t[idx] - g / dg
            bad = ~np.isfinite(t_new) | (t_new <= lo[idx]) | (t_new >= hi[idx])
            t_new = np.where(bad, 0.5 * (lo[idx] + hi[idx]), t_new)
            done = (np.abs(t_new - t[idx]) < 1e-12) | (g == 0)
            t[idx] = t_new
            idx = idx[~done]
        t = np.where(no_root, lo_bound, t)
        s = np.exp(t)
        sig[nz] = s
        arg = 1.0 + xi[:, None] * y[None, :] / s[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            lg = np.where(arg > 0, np.log(np.maximum(arg, 1e-300)), -np.inf)
        ll_nz = -n * np.log(s) - c * lg.sum(axis=1)
        # xi < -1: the likelihood grows without bound as sigma -> |xi| max y (no MLE, Smith 1985);
        # the sigma-score has no root, and a Newton iteration on it drifts to sigma -> infinity.
        # These grid points are therefore never selected (profile value -inf); xi = -1 itself
        # (the uniform law) keeps its finite boundary value.
        ll_nz[xi < -1.0] = -np.inf
        ll[nz] = ll_nz
    return sig, ll


def profile_sigma(y, xi) -> tuple[np.ndarray, np.ndarray]:
    """Profile MLE of sigma for each ``xi`` and the profile log-likelihood (spec §4.1).

    Shapes: ``y`` ``(n,)`` exceedances, ``xi`` scalar or ``(G,)`` -> (``sigma_hat`` ``(G,)``,
    ``loglik`` ``(G,)``).
    """
    y = _as_1d("y", y)
    if np.any(y < 0):
        raise ValueError("exceedances y must be >= 0")
    xi = np.atleast_1d(np.asarray(xi, dtype=np.float64))
    if not np.all(np.isfinite(xi)):
        raise ValueError("xi must be finite")
    return _profile(y, xi)


@dataclass(frozen=True)
class GPDFit:
    """Result of :func:`fit_gpd` (Coles sign: ``xi = scipy genpareto c``).

    Attributes:
        xi, sigma: profile MLE.
        loglik: ``l(xi, sigma)``.
        n: number of exceedances.
        exp_sigma, exp_loglik: the separately fitted exponential (xi = 0): ``sigma = mean(y)``.
        support_end: ``-sigma/xi`` for ``xi < 0`` (in exceedance units), else ``inf``.
    """

    xi: float
    sigma: float
    loglik: float
    n: int
    exp_sigma: float
    exp_loglik: float
    support_end: float


def fit_gpd(
    y,
    *,
    xi_min: float = -1.5,
    xi_max: float = 1.0,
    n_grid: int = 400,
    n_refine: int = 400,
    refine_steps: float = 4.0,
) -> GPDFit:
    """Cap-free profile-likelihood GPD fit to exceedances (spec/weince.md §4.1).

    Grid of ``n_grid`` xi on ``[xi_min, xi_max]``; for each, ``sigma_hat(xi)`` by safeguarded
    Newton (``<= 100`` steps) on the sigma-score; keep the best; then a refinement grid of
    ``n_refine`` points on ``xi_best +- refine_steps`` grid steps (clipped to the range).
    Grid points with ``xi < -1`` are kept (the notebook's range) but can never be selected: the
    GPD likelihood has no maximum there (see :func:`profile_sigma`); the effective range is
    ``[-1, xi_max]``. With few exceedances (``n`` below ~50) and ``xi`` near -1 the fit is
    unreliable (MLE regular only for ``xi > -0.5``).

    Args:
        y: ``(n,)`` exceedances ``y = s - u > 0`` (``n >= 2``, not all equal).

    Returns:
        :class:`GPDFit`.
    """
    y = _as_1d("y", y)
    if y.size < 2:
        raise ValueError(f"need at least 2 exceedances, got {y.size}")
    if np.any(y < 0):
        raise ValueError("exceedances y must be >= 0")
    if float(y.max()) <= 0:
        raise ValueError("exceedances y must contain a positive value")
    xi_min = real("xi_min", xi_min)
    xi_max = real("xi_max", xi_max)
    if not xi_min < xi_max:
        raise ValueError(f"xi_min must be < xi_max, got {xi_min} and {xi_max}")
    n_grid = integer("n_grid", n_grid, lo=2)
    n_refine = integer("n_refine", n_refine, lo=2)
    refine_steps = real("refine_steps", refine_steps, lo=0.0)
    grid = np.linspace(xi_min, xi_max, n_grid)
    sig, ll = _profile(y, grid)
    j = int(np.argmax(ll))
    h = (xi_max - xi_min) / (n_grid - 1)
    fine = np.linspace(max(xi_min, grid[j] - refine_steps * h), min(xi_max, grid[j] + refine_steps * h), n_refine)
    sig2, ll2 = _profile(y, fine)
    k = int(np.argmax(ll2))
    xi, sigma, best = float(fine[k]), float(sig2[k]), float(ll2[k])
    if ll[j] > best:  # cannot happen unless the refinement grid misses the coarse point
        xi, sigma, best = float(grid[j]), float(sig[j]), float(ll[j])
    exp_sigma = float(y.mean())
    exp_ll = float(-y.size * math.log(exp_sigma) - y.size)
    end = -sigma / xi if xi < 0 else math.inf
    return GPDFit(xi, sigma, best, int(y.size), exp_sigma, exp_ll, end)


@dataclass(frozen=True)
class POTResult:
    """Peaks-over-threshold fit (spec §4.1). ``endpoint = u - sigma/xi`` for ``xi < 0`` else inf.

    ``qq`` is a DataFrame with columns ``p`` (0.01..0.99), ``empirical``, ``gpd`` (fitted xi),
    ``exponential`` (separately fitted sigma), all in exceedance units.
    """

    q: float
    threshold: float
    n_exceed: int
    xi: float
    sigma: float
    endpoint: float
    loglik: float
    exp_sigma: float
    exp_loglik: float
    qq: pd.DataFrame = field(repr=False)
    exceedances: np.ndarray = field(repr=False)


def pot_fit(scores, q: float = 0.99, *, min_exceed: int = 10, **fit_kwargs) -> POTResult:
    """Peaks-over-threshold GPD fit of ``scores`` above their empirical ``q``-quantile (§4.1).

    ``u = np.quantile(scores, q)`` (linear interpolation), ``y = s - u`` for ``s > u``, then
    :func:`fit_gpd`. Shapes: ``scores`` any shape (flattened), e.g. from
    :func:`lower_triangle_scores`.

    Raises:
        ValueError: ``q`` outside ``(0, 1)`` or fewer than ``min_exceed`` exceedances.
    """
    s = _as_1d("scores", scores)
    q = real("q", q, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    min_exceed = integer("min_exceed", min_exceed, lo=2)
    u = float(np.quantile(s, q))
    y = s[s > u] - u
    if y.size < min_exceed:
        raise ValueError(f"only {y.size} exceedances above the q={q} quantile; need min_exceed={min_exceed}")
    fit = fit_gpd(y, **fit_kwargs)
    p = np.round(np.arange(1, 100) / 100.0, 2)
    qq = pd.DataFrame(
        {
            "p": p,
            "empirical": np.quantile(y, p),
            "gpd": gpd_quantile(p, fit.xi, fit.sigma),
            "exponential": gpd_quantile(p, 0.0, fit.exp_sigma),
        }
    )
    endpoint = u - fit.sigma / fit.xi if fit.xi < 0 else math.inf
    return POTResult(q, u, int(y.size), fit.xi, fit.sigma, endpoint, fit.loglik, fit.exp_sigma,
                     fit.exp_loglik, qq, y)


def threshold_stability(
    scores, quantiles: Sequence[float] = (0.98, 0.985, 0.99, 0.992, 0.995), *, min_exceed: int = 100, **fit_kwargs
) -> pd.DataFrame:
    """Shape stability: refit xi at several thresholds (spec §4.1 plot 4).

    Returns a DataFrame with one row per quantile: ``q, threshold, n_exceed, xi, sigma, endpoint,
    loglik, exp_sigma`` (NaN fit columns where fewer than ``min_exceed`` exceedances).
    """
    s = _as_1d("scores", scores)
    rows = []
    for q in quantiles:
        q = real("quantile", q, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        u = float(np.quantile(s, q))
        n_exc = int((s > u).sum())
        row = {"q": q, "threshold": u, "n_exceed": n_exc}
        if n_exc >= min_exceed:
            r = pot_fit(s, q, min_exceed=min_exceed, **fit_kwargs)
            row.update(xi=r.xi, sigma=r.sigma, endpoint=r.endpoint, loglik=r.loglik, exp_sigma=r.exp_sigma)
        else:
            row.update(xi=np.nan, sigma=np.nan, endpoint=np.nan, loglik=np.nan, exp_sigma=np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def lower_triangle_scores(S) -> np.ndarray:
    """Strict lower triangle of a similarity matrix ``(B, B)`` -> ``(B (B-1) / 2,)`` (spec §4.1)."""
    if isinstance(S, torch.Tensor):
        S = S.detach().cpu().double().numpy()
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 2:
        raise ValueError(f"S must be a square matrix (B, B) with B >= 2, got shape {S.shape}")
    i, j = np.tril_indices(S.shape[0], k=-1)
    return S[i, j]


def embedding_scores(z, *, normalize: bool = True) -> np.ndarray:
    """Negative scores of one view (spec §4.1): ``S = z z^T`` (cosine when ``normalize``), strict
    lower triangle. Shapes: ``z`` ``(B, d)`` -> ``(B (B - 1) / 2,)``."""
    if isinstance(z, torch.Tensor):
        z = z.detach().cpu().double().numpy()
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 2:
        raise ValueError(f"z must be 2-D (B, d) with B >= 2, got shape {z.shape}")
    if normalize:
        z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return lower_triangle_scores(z @ z.T)


def scipy_gpd_fit(y) -> tuple[float, float]:
    """``scipy.stats.genpareto.fit(y, floc=0)`` returned as ``(xi, sigma)`` in the Coles sign.

    scipy's ``genpareto`` shape ``c`` *is* xi (metrics.md pitfall 9); a cross-check of
    :func:`fit_gpd`, which is more robust for ``xi <= -0.5``.
    """
    y = _as_1d("y", y)
    c, _, scale = stats.genpareto.fit(y, floc=0.0)
    return float(c), float(scale)


def gev_fit(maxima) -> tuple[float, float, float]:
    """GEV fit of block maxima returned as ``(xi, mu, sigma)`` in the Coles sign.

    Wraps ``scipy.stats.genextreme.fit``, whose shape is ``c = -xi`` (metrics.md pitfall 9):
    ``xi < 0`` is the reverse-Weibull domain (finite endpoint ``mu - sigma / xi``).
    """
    x = _as_1d("maxima", maxima)
    if x.size < 3:
        raise ValueError(f"need at least 3 maxima, got {x.size}")
    c, loc, scale = stats.genextreme.fit(x)
    return float(-c), float(loc), float(scale)


# --------------------------------------------------------------------------------------------
# per-anchor tail AIC fits (the WeiNCE gate, one anchor at a time; spec §2.2-§2.5)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TailAICFit:
    """One anchor's tail fits (spec §2.4-§2.5).

    ``slope_W`` (the anchor-wise Weibull slope beta_hat_i, unused by the gate), ``slope_G``,
    ``sse_W``, ``sse_G`` (floored, with the +1e6 sanity penalties), ``aic_W = n log(SSE_W/n) + 4``,
    ``aic_G``, ``dAIC = aic_G - aic_W`` (0 when ``n_eff < 2``), ``r2_W`` (clipped to [0, 1]),
    ``rho = max(1 - hardest negative, eps)``.
    """

    k_tail: int
    burn: int
    n_eff: int
    rho: float
    slope_W: float
    slope_G: float
    sse_W: float
    sse_G: float
    aic_W: float
    aic_G: float
    dAIC: float
    r2_W: float


def tail_aic_fit(
    neg, *, k_tail: int | None = None, tail_frac: float = 0.1, min_tail: int = 32, eps: float = 1e-6
) -> TailAICFit:
    """The Weibull-vs-Gumbel-fast least-squares "AIC" of one anchor's negative tail (§2.5).

    A readable per-anchor view of the gate's fits: it calls :func:`theory.weince.tail_fits`
    (the implementation the loss uses) on this single row and unpacks the result.

    ``x = log max(1 - T, eps)`` of the ``k_tail`` largest negatives ``T`` (descending), within-tail
    ECDF ``F_k = max(k/(k_tail+1), eps)``, burn-in ``max(1, k_tail // 20)``; OLS of
    ``y_W = log F`` and ``y_G = log(-log F)`` on ``x``; ``dAIC = n_eff log(SSE_G / SSE_W)``.

    Args:
        neg: ``(K,)`` negative similarities of one anchor.
        k_tail: tail size; default :func:`theory.weince.tail_size` ``(K, tail_frac, min_tail)``.
    """
    s = _as_1d("neg", neg)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    K = s.size
    k = tail_size(K, tail_frac, min_tail) if k_tail is None else integer("k_tail", k_tail, lo=1)
    if k > K:
        raise ValueError(f"k_tail must be <= K={K}, got {k}")
    T = np.sort(s)[::-1][:k]
    rho = max(1.0 - T[0], eps)
    fits = tail_fits(T[None, :], eps)  # the loss's own implementation, on this single row
    n, burn = fits.n_eff, fits.burn
    nan = float("nan")
    if n < 2:
        return TailAICFit(k, burn, n, rho, nan, nan, nan, nan, nan, nan, 0.0, nan)
    slope_W, slope_G = (float(v) for v in fits.slope[0])
    sse_W, sse_G = (float(v) for v in fits.sse[0])
    r2 = min(max(1.0 - float(fits.sse_raw[0, 0]) / max(float(fits.syy[0]), 1e-12), 0.0), 1.0)
    aic_W = n * math.log(sse_W / n) + 4.0
    aic_G = n * math.log(sse_G / n) + 4.0
    return TailAICFit(k, burn, n, rho, slope_W, slope_G, sse_W, sse_G, aic_W, aic_G, float(fits.dAIC[0]), r2)


def tail_aic_fits(neg_rows, **kwargs) -> pd.DataFrame:
    """:func:`tail_aic_fit` for every row of ``neg_rows`` ``(A, K)`` -> DataFrame, one row per anchor."""
    arr = neg_rows
    if isinstance(arr, torch.Tensor):
        arr = arr.detach().cpu().double().numpy()
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"neg_rows must be 2-D (A, K), got shape {arr.shape}")
    return pd.DataFrame([tail_aic_fit(r, **kwargs).__dict__ for r in arr])


# --------------------------------------------------------------------------------------------
# link selection in the T_lambda family (spec §1.5, our proposal)
# --------------------------------------------------------------------------------------------


def _cand_list(cand) -> list[np.ndarray]:
    items = cand if isinstance(cand, (list, tuple)) else [cand]
    out = []
    for a in items:
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().double().numpy()
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 2 or a.shape[1] < 2 or a.shape[0] < 1:
            raise ValueError(f"candidate arrays must be 2-D (M, C) with C >= 2 (positive at column 0), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("candidate similarities must be finite")
        out.append(a)
    if not out:
        raise ValueError("cand must contain at least one array")
    return out


def _loglik_arrays(arrs, lam, tau, eps) -> float:
    """``sum_i log softmax(T_lambda logits of row i)_0`` over float64 tensors ``(M, C)``.

    The logits are :func:`theory.weince.tlambda_logits` (the loss's own formula, §2.7).
    """
    total = 0.0
    for a in arrs:
        l = tlambda_logits(a, lam, tau, eps)
        total += float((l[:, 0] - torch.logsumexp(l, dim=1)).sum())
    return total


def tlambda_loglik(cand, lam: float, tau: float = 0.5, eps: float = 1e-6) -> float:
    """Log-likelihood of the observed winners (column 0) under the T_lambda link (spec §1.5).

    ``sum_i log softmax_j((1 - lam) s_ij / tau + lam (-log(1 - min(s_ij, 1 - eps))))_0``.
    Shapes: ``cand`` ``(M, C)`` or a list of such arrays (positive first in every row).
    """
    lam = real("lam", lam, lo=0.0, hi=1.0)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    arrs = [torch.from_numpy(a) for a in _cand_list(cand)]
    return _loglik_arrays(arrs, lam, tau, eps)


def candidates_from_similarity(S, positives, negatives=None) -> np.ndarray:
    """Candidate rows ``[S[i, pos_i], S[i, negatives of i]]`` from a frozen similarity matrix.

    Args:
        S: ``(A, B)`` similarities of anchors to a bank.
        positives: ``(A,)`` column index of each anchor's positive.
        negatives: optional ``(A, B)`` boolean mask of allowed negatives with the same count per
            row; default: every column except the positive (and except column ``i`` when
            ``S`` is square, i.e. the anchor itself).

    Returns:
        ``(A, 1 + K)`` with the positive in column 0 and negatives in ascending column order.
    """
    if isinstance(S, torch.Tensor):
        S = S.detach().cpu().double().numpy()
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2:
        raise ValueError(f"S must be 2-D, got shape {S.shape}")
    A, B = S.shape
    pos = np.asarray(positives).reshape(-1)
    if pos.shape != (A,) or not np.issubdtype(pos.dtype, np.integer) or pos.min() < 0 or pos.max() >= B:
        raise ValueError(f"positives must be ({A},) integer column indices in [0, {B}), got {positives!r}")
    if negatives is None:
        mask = np.ones((A, B), dtype=bool)
        mask[np.arange(A), pos] = False
        if A == B:
            mask[np.arange(A), np.arange(A)] = False
    else:
        mask = np.asarray(negatives, dtype=bool)
        if mask.shape != (A, B):
            raise ValueError(f"negatives must have shape {(A, B)}, got {mask.shape}")
        if np.any(mask[np.arange(A), pos]):
            raise ValueError("negatives must not contain the positive")
    counts = mask.sum(axis=1)
    if counts.min() != counts.max() or counts.min() < 1:
        raise ValueError(f"every anchor needs the same number (>= 1) of negatives, got counts {np.unique(counts)}")
    neg = S[mask].reshape(A, int(counts[0]))
    return np.concatenate([S[np.arange(A), pos][:, None], neg], axis=1)


def two_view_link_candidates(z1, z2) -> np.ndarray:
    """Candidate rows of frozen two-view embeddings for :func:`link_select`.

    The NT-Xent candidate set of :func:`theory.losses.two_view_candidates` (cosine similarities,
    positive ``(i + N) mod 2N`` in column 0, the ``2N - 2`` negatives after it), as float64 numpy.
    Shapes: ``z1, z2`` ``(N, d)`` -> ``(2N, 2N - 1)``.
    """
    with torch.no_grad():
        _, cand = two_view_candidates(torch.as_tensor(z1), torch.as_tensor(z2))
    return cand.double().cpu().numpy()


@dataclass(frozen=True)
class LinkSelection:
    """Result of :func:`link_select` (ours, spec §1.5 [derived proposal]; not the paper's values).

    ``lr_stat = 2 (loglik - loglik0)``; ``p_chi2`` from chi2(1); ``p_boundary`` from the
    ``0.5 chi2(0) + 0.5 chi2(1)`` mixture (Self & Liang 1987) because lambda = 0 lies on the
    boundary of [0, 1]. Both are nominal: in-batch candidate rows share items and are not
    independent. ``profile`` has columns ``lam, loglik, tau``.
    """

    lam_hat: float
    tau_hat: float
    loglik: float
    loglik0: float
    tau0_hat: float
    lr_stat: float
    p_chi2: float
    p_boundary: float
    n_rows: int
    profile: pd.DataFrame = field(repr=False)


def link_select(
    cand,
    *,
    tau: float | None = 0.5,
    eps: float = 1e-6,
    n_grid: int = 51,
    tau_bounds: tuple[float, float] = (0.01, 10.0),
    xatol: float = 1e-7,
) -> LinkSelection:
    """Maximum-likelihood ``lambda_hat`` in the nested T_lambda family + LRT against lambda = 0.

    Treats each row's positive (column 0) as the observed winner among its candidates (spec §1.5):
    ``lambda_hat = argmax_{lam in [0,1]} l(lam, tau)`` on a grid of ``n_grid`` points refined by a
    bounded 1-D optimiser (scipy ``minimize_scalar``, method "bounded") on the bracket around the
    best grid point. ``tau=None`` profiles tau too (bounded search on ``log tau`` within
    ``tau_bounds`` for every lambda; at lambda = 1 tau is not identified).

    Args:
        cand: ``(M, C)`` candidate similarities (positive in column 0) or a list of such arrays
            (e.g. one per frozen batch; widths may differ).
        tau: fixed temperature of the linear branch, or None to fit it.
    """
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    n_grid = integer("n_grid", n_grid, lo=3)
    arrs = [torch.from_numpy(a) for a in _cand_list(cand)]
    n_rows = sum(a.shape[0] for a in arrs)
    if tau is not None:
        tau = real("tau", tau, lo=0.0, lo_open=True)
    else:
        lo_t, hi_t = (real("tau_bounds[0]", tau_bounds[0], lo=0.0, lo_open=True), real("tau_bounds[1]", tau_bounds[1]))
        if not lo_t < hi_t:
            raise ValueError(f"tau_bounds must be increasing, got {tau_bounds}")

    def best_tau(lam: float) -> tuple[float, float]:
        if tau is not None:
            return tau, _loglik_arrays(arrs, lam, tau, eps)
        r = optimize.minimize_scalar(
            lambda lt: -_loglik_arrays(arrs, lam, math.exp(lt), eps),
            bounds=(math.log(lo_t), math.log(hi_t)), method="bounded", options={"xatol": 1e-6},
        )
        return math.exp(r.x), -float(r.fun)

    grid = np.linspace(0.0, 1.0, n_grid)
    prof = [best_tau(float(l)) for l in grid]
    lls = np.array([p[1] for p in prof])
    j = int(np.argmax(lls))
    lo_l, hi_l = grid[max(j - 1, 0)], grid[min(j + 1, n_grid - 1)]
    r = optimize.minimize_scalar(lambda l: -best_tau(l)[1], bounds=(lo_l, hi_l), method="bounded",
                                 options={"xatol": xatol})
    lam_hat, ll_hat = float(r.x), -float(r.fun)
    if lls[j] >= ll_hat:  # the grid point (possibly an end point 0 or 1) is at least as good
        lam_hat, ll_hat = float(grid[j]), float(lls[j])
    tau_hat = best_tau(lam_hat)[0]
    tau0, ll0 = prof[0]
    stat = max(2.0 * (ll_hat - ll0), 0.0)
    p_chi2 = float(stats.chi2.sf(stat, 1))
    p_boundary = 0.5 * p_chi2 if stat > 0 else 1.0
    profile = pd.DataFrame({"lam": grid, "loglik": lls, "tau": [p[0] for p in prof]})
    return LinkSelection(lam_hat, tau_hat, ll_hat, ll0, tau0, stat, p_chi2, p_boundary, n_rows, profile)


# --------------------------------------------------------------------------------------------
# synthetic noise floor (spec §1.6, §4.2)
# --------------------------------------------------------------------------------------------

_NF_SCORES = (0.15, 0.45, 0.70, 0.90)
_NF_NS = (100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True)
class NoiseFloorTheory:
    """Theory values of the noise-floor design (spec §4.2), all computed from the DGP.

    ``p_star`` winner law ``∝ (1 - s)^(-beta)``; ``target = beta (x_top - x_ref)`` with
    ``x = -log(1 - s)``; ``theta_pseudo`` solves ``E_softmax(theta s)[s] = E_p*[s]``;
    ``bias2_floor = (theta_pseudo (s_top - s_ref) - target)^2``; ``fisher = Var_p*(x)``;
    ``c = (x_top - x_ref)^2 / fisher`` (Weibit MSE ~ c/n); Godambe ``A = Var_q(s)``,
    ``B = E_p*[(s - mu_q)^2]``, ``godambe = B / A^2`` (n Var(theta_hat)); ``softmax_var_coef =
    (s_top - s_ref)^2 godambe`` (n Var of the softmax log-odds).
    """

    scores: tuple
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
    return (w @ v) / w.sum(axis=1)


def softmax_link_mle(target_mean, v, *, steps: int = 100, bracket: tuple[float, float] = (-100.0, 100.0)) -> np.ndarray:
    """One-parameter multinomial-logit MLE by moment matching: solve ``E_softmax(b v)[v] = m``.

    Bisection (``steps`` halvings of ``bracket``; the mean is increasing in ``b``), vectorised
    over ``target_mean`` ``(R,)`` -> ``(R,)`` (spec §4.2; both estimators of the noise floor).
    """
    v = _as_1d("v", v)
    m = np.atleast_1d(np.asarray(target_mean, dtype=np.float64))
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
    return 0.5 * (lo + hi)


def noise_floor_theory(scores: Sequence[float] = _NF_SCORES, beta: float = 0.8, top: int = -1, ref: int = 0) -> NoiseFloorTheory:
    """Theory lines of the synthetic noise floor (spec §1.6, §4.2), computed from the DGP.

    Defaults reproduce c = 7.13603 and bias^2 = 0.045151.
    """
    s = _as_1d("scores", scores)
    if np.any((s >= 1) | (s <= -1)):
        raise ValueError("scores must lie in (-1, 1)")
    beta = real("beta", beta, lo=0.0, lo_open=True)
    top, ref = int(top) % s.size, int(ref) % s.size
    x = -np.log1p(-s)
    p = np.exp(beta * (x - x.max()))
    p /= p.sum()
    target = beta * (x[top] - x[ref])
    mu_s = float(p @ s)
    theta = float(optimize.brentq(lambda t: _softmax_mean(np.array([t]), s)[0] - mu_s, -100, 100, xtol=1e-14, rtol=1e-15))
    pseudo = theta * (s[top] - s[ref])
    fisher = float(p @ x**2 - (p @ x) ** 2)
    c = float((x[top] - x[ref]) ** 2 / fisher)
    qd = np.exp(theta * (s - s.max()))
    qd /= qd.sum()
    mu_q = float(qd @ s)
    A = float(qd @ (s - mu_q) ** 2)
    B = float(p @ (s - mu_q) ** 2)
    god = B / A**2
    return NoiseFloorTheory(tuple(s.tolist()), beta, p, float(target), theta, float(pseudo),
                            float((pseudo - target) ** 2), fisher, c, A, B, god,
                            float((s[top] - s[ref]) ** 2 * god))


def noise_floor_experiment(
    ns: Sequence[int] = _NF_NS,
    *,
    reps: int = 12000,
    seed: int = 20260113,
    scores: Sequence[float] = _NF_SCORES,
    beta: float = 0.8,
    steps: int = 100,
) -> pd.DataFrame:
    """Simulate the softmax-vs-Weibit noise floor (spec §4.2, claim W5).

    For each ``n`` in order: ``reps`` multinomial(n, p*) count vectors from
    ``numpy.random.default_rng(seed)`` (one ``rng.multinomial(n, p*, size=reps)`` per n); the
    softmax estimator ``theta_hat`` (moment match in ``s``) and the Weibit estimator ``beta_hat``
    (moment match in ``x = -log(1 - s)``), both by 100-step bisection on [-100, 100]; log-odds
    estimates ``theta_hat (s_top - s_ref)`` and ``beta_hat (x_top - x_ref)`` of the target.

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
