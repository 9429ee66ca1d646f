"""Per-anchor tail "AIC" fits of negative similarities (the WeiNCE gate, one anchor at a time).

Erol et al., ICML 2026 (arXiv 2606.00262), spec/weince.md §2.2-§2.5. The fits are those of
:func:`theory.weince.tailfit.tail_fits`, the implementation the loss's gate uses, so the
diagnostics and the loss agree exactly without the diagnostics depending on the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from theory.validation import as_finite_1d, integer, real
from theory.weince.tailfit import tail_fits, tail_size

__all__ = ["TailAICFit", "tail_aic_fit", "tail_aic_fits"]


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

    A readable per-anchor view of the gate's fits: it calls :func:`theory.weince.tailfit.tail_fits`
    (the implementation the loss's gate uses) on this single row and unpacks the result.

    ``x = log max(1 - T, eps)`` of the ``k_tail`` largest negatives ``T`` (descending), within-tail
    ECDF ``F_k = max(k/(k_tail+1), eps)``, burn-in ``max(1, k_tail // 20)``; OLS of
    ``y_W = log F`` and ``y_G = log(-log F)`` on ``x``; ``dAIC = n_eff log(SSE_G / SSE_W)``.

    Args:
        neg: ``(K,)`` negative similarities of one anchor.
        k_tail: tail size; default :func:`theory.weince.tailfit.tail_size` ``(K, tail_frac, min_tail)``.
    """
    s = as_finite_1d("neg", neg)
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
