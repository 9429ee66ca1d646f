"""Per-anchor tail-AIC fits (theory.weince.tails) against numpy polyfit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from theory.weince.tails import tail_aic_fit, tail_aic_fits


# ---------------------------------------------------------------------------------------------
# per-anchor tail AIC fits vs numpy polyfit
# ---------------------------------------------------------------------------------------------


def polyfit_reference(negs, k, eps=1e-6):
    T = np.sort(negs)[::-1][:k]
    burn = max(1, k // 20)
    n = k - burn
    x = np.log(np.maximum(1 - T, eps))[burn:]
    F = (np.arange(1, k + 1) / (k + 1))[burn:]
    out = []
    for y in (np.log(F), np.log(-np.log(F))):
        b, a = np.polyfit(x, y, 1)
        out.append((b, max(((y - a - b * x) ** 2).sum(), 1e-12)))
    (bW, sW), (bG, sG) = out
    sW += 1e6 if bW <= 0 else 0.0
    sG += 1e6 if bG >= 0 else 0.0
    return bW, bG, n * math.log(sG / n) - n * math.log(sW / n)


@pytest.mark.parametrize("K,k", [(510, None), (126, None), (14, None), (200, 40)])
def test_tail_aic_fit_matches_polyfit(K, k):
    rng = np.random.default_rng(K)
    negs = np.tanh(rng.normal(0.1, 0.4, K))
    fit = tail_aic_fit(negs, k_tail=k)
    kk = fit.k_tail
    assert kk == {510: 51, 126: 32, 14: 14, 200: 40}[K]
    bW, bG, daic = polyfit_reference(negs, kk)
    assert abs(fit.slope_W - bW) < 1e-8 and abs(fit.slope_G - bG) < 1e-8
    assert abs(fit.dAIC - daic) < 1e-7
    assert abs(fit.aic_G - fit.aic_W - fit.dAIC) < 1e-12
    assert 0 <= fit.r2_W <= 1 and fit.rho == max(1 - negs.max(), 1e-6)
    df = tail_aic_fits(np.stack([negs, negs[::-1]]), k_tail=k)
    assert len(df) == 2 and np.allclose(df["dAIC"], fit.dAIC)


def test_tail_aic_fit_ties_and_fallback():
    fit = tail_aic_fit(np.full(40, 0.3))  # all tail points tied: both slopes 0, both penalised
    assert fit.slope_W == 0 and fit.slope_G == 0
    n = fit.n_eff
    F = (np.arange(1, 33) / 33)[1:]
    yW, yG = np.log(F), np.log(-np.log(F))
    want = n * math.log((((yG - yG.mean()) ** 2).sum() + 1e6) / (((yW - yW.mean()) ** 2).sum() + 1e6))
    assert abs(fit.dAIC - want) < 1e-9 and abs(fit.dAIC) < 1e-3
    small = tail_aic_fit([0.1, 0.2])  # k_tail = 2, n_eff = 1: no fit, dAIC = 0
    assert small.n_eff == 1 and small.dAIC == 0.0
    with pytest.raises(ValueError, match="k_tail"):
        tail_aic_fit([0.1, 0.2, 0.3], k_tail=5)
