"""Peaks-over-threshold and extreme-value fits of similarity tails: GPD, POT, GEV.

Reference: Erol et al., ICML 2026 (arXiv 2606.00262): the tails of trained encoders' similarities;
Coles (2001), ch. 4 (GPD, POT) and ch. 3 (GEV). Documentation:
``docs/weince.md#gpd-and-peaks-over-threshold``, ``docs/weince.md#threshold-stability-and-qq``,
``docs/weince.md#gev-fits``, ``docs/weince.md#scipy-shape-sign-conventions``.

Input rule (``docs/weince.md#inputs``): every array argument may be a numpy array, a torch tensor
(any device and real dtype) or a sequence; it is converted to float64 numpy; NaN / inf and meta
tensors raise ``ValueError`` naming the argument.

Notation and conventions (Coles 2001):

* scores ``s`` (cosine similarities of negatives), threshold ``u``, exceedances ``y = s - u > 0``;
* GPD ``F(y) = 1 - (1 + xi y / sigma)^(-1/xi)`` (exponential at ``xi = 0``), log-likelihood
  ``l(xi, sigma) = -n log sigma - (1 + 1/xi) sum log(1 + xi y / sigma)``;
* ``xi < 0``: reverse-Weibull domain with finite endpoint ``x_F = u - sigma / xi``;
* **sign convention**: ``xi`` here equals ``c`` of ``scipy.stats.genpareto`` and equals ``-c`` of
  ``scipy.stats.genextreme``. Every function returns ``xi`` in this (Coles) sign.

GPD maximum likelihood is fragile near ``xi <= -0.5`` and the likelihood is unbounded for
``xi < -1`` at ``sigma -> |xi| max y`` (Smith 1985); hence the cap-free *profile* likelihood on a
fixed grid of ``xi`` (the authors' notebook protocol), with ``sigma >= |xi| max y (1 + 1e-9)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from theory.validation import check_size, integer, real
from theory.weince._inputs import as_float64

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
]

_XI_ZERO = 1e-8  #: |xi| below this uses the exponential formula
_BOUNDARY = 1e-9  #: relative margin keeping sigma above |xi| max y for xi < 0


def gpd_loglik(y: Any, xi: float, sigma: float) -> float:
    """GPD log-likelihood ``-n log sigma - (1 + 1/xi) sum log(1 + xi y/sigma)``.

    Exponential formula ``-n log sigma - sum y / sigma`` at ``|xi| < 1e-8``; ``-inf`` outside the
    support (``1 + xi y / sigma <= 0``). ``docs/weince.md#gpd-and-peaks-over-threshold``.

    Args:
        y: exceedances (flattened).
        xi: shape (Coles sign).
        sigma: scale ``> 0``.

    Returns:
        The log-likelihood (``-inf`` outside the support).

    Shape:
        ``y`` ``(n,)`` -> scalar.

    Raises:
        ValueError: non-finite ``y`` / ``xi``, ``sigma <= 0``.
    """
    y = as_float64("y", y, flatten=True)
    xi = real("xi", xi)
    sigma = real("sigma", sigma, lo=0.0, lo_open=True)
    n = y.size
    if abs(xi) < _XI_ZERO:
        return float(-n * math.log(sigma) - y.sum() / sigma)
    t = 1.0 + xi * y / sigma
    if np.any(t <= 0):
        return -math.inf
    return float(-n * math.log(sigma) - (1.0 + 1.0 / xi) * np.log(t).sum())


def gpd_quantile(p: Any, xi: float, sigma: float) -> np.ndarray:
    """GPD quantile ``sigma/xi ((1 - p)^(-xi) - 1)`` (``-sigma log(1 - p)`` at ``xi = 0``).

    Args:
        p: probabilities in ``[0, 1)``, any shape.
        xi: shape (Coles sign).
        sigma: scale ``> 0``.

    Returns:
        Quantiles, the shape of ``p``.

    Raises:
        ValueError: ``p`` outside ``[0, 1)`` or non-finite, bad ``xi`` / ``sigma``.
    """
    p = as_float64("p", p)
    if np.any((p < 0) | (p >= 1)):
        raise ValueError("p must lie in [0, 1)")
    xi = real("xi", xi)
    sigma = real("sigma", sigma, lo=0.0, lo_open=True)
    if abs(xi) < _XI_ZERO:
        return np.asarray(-sigma * np.log1p(-p))
    return np.asarray(sigma / xi * np.expm1(-xi * np.log1p(-p)))


def _require_spread(name: str, x: np.ndarray, what: str) -> None:
    """``ValueError`` naming ``name`` when every value of ``x`` is the same (to working precision).

    A sample without spread has no scale: a maximum-likelihood fit of a continuous law to it is a
    spurious point-mass limit (``sigma -> 0``), not an estimate, so it is refused.
    """
    top = float(np.abs(x).max())
    if float(x.max() - x.min()) <= 8.0 * np.finfo(np.float64).eps * top:
        raise ValueError(
            f"{name} are all equal ({float(x[0])!r}, n = {x.size}): a sample without spread has no "
            f"{what} scale, the fit would be a point mass (sigma -> 0); pass a sample with spread"
        )


#: Bytes per (grid point, exceedance) of :func:`_profile` (its (G, n) float64 work arrays).
_PROFILE_BYTES = 6 * 8


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

        def g_and_dg(t: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def profile_sigma(y: Any, xi: Any) -> tuple[np.ndarray, np.ndarray]:
    """Profile MLE of sigma for each ``xi`` and the profile log-likelihood.

    ``docs/weince.md#gpd-and-peaks-over-threshold``, steps 2-3.

    Args:
        y: exceedances ``>= 0`` (flattened), at least one positive.
        xi: one shape or a grid of shapes.

    Returns:
        ``(sigma_hat, loglik)``, each ``(G,)``.

    Shape:
        ``y`` ``(n,)``, ``xi`` scalar or ``(G,)`` -> ``(G,)``, ``(G,)``.

    Raises:
        ValueError: non-finite or negative ``y``, non-finite ``xi``.
    """
    y = as_float64("y", y, flatten=True)
    if np.any(y < 0):
        raise ValueError("exceedances y must be >= 0")
    return _profile(y, as_float64("xi", xi, flatten=True))


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
    y: Any,
    *,
    xi_min: float = -1.5,
    xi_max: float = 1.0,
    n_grid: int = 400,
    n_refine: int = 400,
    refine_steps: float = 4.0,
) -> GPDFit:
    """Cap-free profile-likelihood GPD fit to exceedances (``docs/weince.md#gpd-and-peaks-over-threshold``).

    Grid of ``n_grid`` xi on ``[xi_min, xi_max]``; for each, ``sigma_hat(xi)`` by safeguarded
    Newton (``<= 100`` steps) on the sigma-score; keep the best; then a refinement grid of
    ``n_refine`` points on ``xi_best +- refine_steps`` grid steps (clipped to the range).
    Grid points with ``xi < -1`` are kept (the notebook's range) but can never be selected: the
    GPD likelihood has no maximum there (see :func:`profile_sigma`); the effective range is
    ``[-1, xi_max]``. With few exceedances (``n`` below ~50) and ``xi`` near -1 the fit is
    unreliable (MLE regular only for ``xi > -0.5``).

    Args:
        y: ``(n,)`` exceedances ``y = s - u > 0`` (``n >= 2``, not all equal).
        xi_min: lower end of the xi grid.
        xi_max: upper end of the xi grid (``> xi_min``).
        n_grid: points of the coarse grid (``>= 2``).
        n_refine: points of the refinement grid (``>= 2``).
        refine_steps: half-width of the refinement, in coarse grid steps (``>= 0``).

    Returns:
        :class:`GPDFit`.

    Raises:
        ValueError: fewer than 2 exceedances, negative or non-finite ``y``, all ``y`` equal (no
            scale to fit), bad grid settings, or grids too large to allocate (naming ``n_grid``
            or ``n_refine``, with the memory they need).
    """
    y = as_float64("y", y, flatten=True)
    if y.size < 2:
        raise ValueError(f"need at least 2 exceedances, got {y.size}")
    if np.any(y < 0):
        raise ValueError("exceedances y must be >= 0")
    if float(y.max()) <= 0:
        raise ValueError("exceedances y must contain a positive value")
    _require_spread("exceedances y", y, "GPD")
    xi_min = real("xi_min", xi_min)
    xi_max = real("xi_max", xi_max)
    if not xi_min < xi_max:
        raise ValueError(f"xi_min must be < xi_max, got {xi_min} and {xi_max}")
    n_grid = integer("n_grid", n_grid, lo=2)
    n_refine = integer("n_refine", n_refine, lo=2)
    for name, G in (("n_grid", n_grid), ("n_refine", n_refine)):
        check_size(
            name,
            G,
            G * (y.size + 1) * _PROFILE_BYTES,
            what=f"the profile's ({G}, {y.size}) float64 work arrays",
        )
    refine_steps = real("refine_steps", refine_steps, lo=0.0)
    grid = np.linspace(xi_min, xi_max, n_grid)
    sig, ll = _profile(y, grid)
    j = int(np.argmax(ll))
    h = (xi_max - xi_min) / (n_grid - 1)
    fine = np.linspace(
        max(xi_min, grid[j] - refine_steps * h), min(xi_max, grid[j] + refine_steps * h), n_refine
    )
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
    """Peaks-over-threshold fit. ``endpoint = u - sigma/xi`` for ``xi < 0`` else inf.

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

    def numbers(self) -> dict[str, float | int]:
        """The scalar results (every field but ``qq`` and ``exceedances``), for records and tables."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("qq", "exceedances")}


def pot_fit(scores: Any, q: float = 0.99, *, min_exceed: int = 10, **fit_kwargs: Any) -> POTResult:
    """Peaks-over-threshold GPD fit of ``scores`` above their empirical ``q``-quantile.

    ``u = np.quantile(scores, q)`` (linear interpolation), ``y = s - u`` for ``s > u``, then
    :func:`fit_gpd` (``docs/weince.md#gpd-and-peaks-over-threshold``; claim W1).

    Args:
        scores: similarities of negatives, any shape (flattened), e.g. from
            :func:`lower_triangle_scores`.
        q: threshold quantile in ``(0, 1)``.
        min_exceed: minimal number of exceedances (``>= 2``).
        **fit_kwargs: passed to :func:`fit_gpd`.

    Returns:
        :class:`POTResult`.

    Raises:
        ValueError: non-finite ``scores``, ``q`` outside ``(0, 1)`` or fewer than ``min_exceed``
            exceedances.
    """
    s = as_float64("scores", scores, flatten=True)
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
    return POTResult(
        q, u, int(y.size), fit.xi, fit.sigma, endpoint, fit.loglik, fit.exp_sigma, fit.exp_loglik, qq, y
    )


def threshold_stability(
    scores: Any,
    quantiles: Sequence[float] = (0.98, 0.985, 0.99, 0.992, 0.995),
    *,
    min_exceed: int = 100,
    **fit_kwargs: Any,
) -> pd.DataFrame:
    """Shape stability: refit xi at several thresholds (``docs/weince.md#threshold-stability-and-qq``).

    Args:
        scores: similarities of negatives, any shape (flattened).
        quantiles: threshold quantiles, each in ``(0, 1)``.
        min_exceed: minimal number of exceedances for a fit.
        **fit_kwargs: passed to :func:`fit_gpd`.

    Returns:
        One row per quantile: ``q, threshold, n_exceed, xi, sigma, endpoint, loglik, exp_sigma``
        (NaN fit columns where fewer than ``min_exceed`` exceedances).
    """
    s = as_float64("scores", scores, flatten=True)
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


def lower_triangle_scores(S: Any) -> np.ndarray:
    """Strict lower triangle of a similarity matrix: each unordered pair once.

    Args:
        S: ``(B, B)`` similarities, ``B >= 2``.

    Returns:
        ``(B (B - 1) / 2,)`` float64, row-major order of ``np.tril_indices(B, -1)``.

    Raises:
        ValueError: not square, ``B < 2``, non-finite.
    """
    S = as_float64("S", S)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 2:
        raise ValueError(f"S must be a square matrix (B, B) with B >= 2, got shape {S.shape}")
    i, j = np.tril_indices(S.shape[0], k=-1)
    return np.asarray(S[i, j])


def embedding_scores(z: Any, *, normalize: bool = True) -> np.ndarray:
    """Negative scores of one view: the strict lower triangle of ``z z^T``.

    The authors' POT protocol (``docs/weince.md#gpd-and-peaks-over-threshold``): cosine
    similarities when ``normalize``.

    Args:
        z: ``(B, d)`` embeddings, ``B >= 2``.
        normalize: L2-normalise the rows first.

    Returns:
        ``(B (B - 1) / 2,)`` float64 scores.

    Raises:
        ValueError: not 2-D, ``B < 2``, non-finite.
    """
    z = as_float64("z", z)
    if z.ndim != 2 or z.shape[0] < 2:
        raise ValueError(f"z must be 2-D (B, d) with B >= 2, got shape {z.shape}")
    if normalize:
        z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return lower_triangle_scores(z @ z.T)


def scipy_gpd_fit(y: Any) -> tuple[float, float]:
    """``scipy.stats.genpareto.fit(y, floc=0)`` returned as ``(xi, sigma)`` in the Coles sign.

    scipy's ``genpareto`` shape ``c`` *is* xi (``docs/weince.md#scipy-shape-sign-conventions``); a
    cross-check of :func:`fit_gpd`, which is more robust for ``xi <= -0.5``.

    Args:
        y: exceedances (flattened).

    Returns:
        ``(xi, sigma)``.

    Raises:
        ValueError: non-finite ``y``, or all ``y`` equal (no scale to fit).
    """
    y = as_float64("y", y, flatten=True)
    _require_spread("exceedances y", y, "GPD")
    c, _, scale = stats.genpareto.fit(y, floc=0.0)
    return float(c), float(scale)


def gev_fit(maxima: Any) -> tuple[float, float, float]:
    """GEV fit of block maxima returned as ``(xi, mu, sigma)`` in the Coles sign.

    Wraps ``scipy.stats.genextreme.fit``, whose shape is ``c = -xi``
    (``docs/weince.md#gev-fits``): ``xi < 0`` is the reverse-Weibull domain (finite endpoint
    ``mu - sigma / xi``).

    Args:
        maxima: block maxima (flattened), at least 3.

    Returns:
        ``(xi, mu, sigma)``.

    Raises:
        ValueError: fewer than 3 maxima, non-finite values, or all maxima equal (a degenerate
            sample: no scale to fit).
    """
    x = as_float64("maxima", maxima, flatten=True)
    if x.size < 3:
        raise ValueError(f"need at least 3 maxima, got {x.size}")
    _require_spread("maxima", x, "GEV")
    c, loc, scale = stats.genextreme.fit(x)
    return float(-c), float(loc), float(scale)
