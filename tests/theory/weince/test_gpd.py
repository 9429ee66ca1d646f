"""GPD / POT / GEV fits (theory.weince.gpd) against scipy, brute-force optimisation and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import optimize, stats

from theory.weince.gpd import (
    embedding_scores,
    fit_gpd,
    gev_fit,
    gpd_loglik,
    gpd_quantile,
    lower_triangle_scores,
    pot_fit,
    profile_sigma,
    scipy_gpd_fit,
    threshold_stability,
)

# ---------------------------------------------------------------------------------------------
# GPD likelihood and quantiles vs scipy (genpareto c = xi, Coles sign)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("xi", [-0.6, -0.15, 0.0, 0.3])
def test_gpd_loglik_and_quantile_match_scipy(xi):
    rng = np.random.default_rng(0)
    y = stats.genpareto.rvs(xi, scale=0.2, size=300, random_state=rng)
    want = stats.genpareto.logpdf(y, xi, loc=0, scale=0.25).sum()
    assert abs(gpd_loglik(y, xi, 0.25) - want) < 1e-9 * max(1.0, abs(want))
    p = np.linspace(0.0, 0.99, 23)
    assert np.allclose(
        gpd_quantile(p, xi, 0.25), stats.genpareto.ppf(p, xi, scale=0.25), rtol=1e-12, atol=1e-14
    )


def test_gpd_loglik_outside_support_and_validation():
    y = np.array([0.1, 0.5, 1.0])
    assert gpd_loglik(y, -0.5, 0.4) == -math.inf  # 1 - 0.5 * 1.0 / 0.4 < 0
    with pytest.raises(ValueError, match="sigma"):
        gpd_loglik(y, 0.1, 0.0)
    with pytest.raises(ValueError, match="y"):
        gpd_loglik([np.nan], 0.1, 1.0)
    with pytest.raises(ValueError, match="p"):
        gpd_quantile([1.0], 0.1, 1.0)


@pytest.mark.parametrize("xi", [-0.9, -0.4, -0.1, 0.05, 0.5, 0.95])
def test_profile_sigma_is_the_conditional_maximum(xi):
    rng = np.random.default_rng(1)
    y = stats.genpareto.rvs(-0.2, scale=0.1, size=400, random_state=rng)
    sig, ll = profile_sigma(y, xi)
    lo = abs(xi) * y.max() * (1 + 1e-9) if xi < 0 else 1e-8
    r = optimize.minimize_scalar(
        lambda ls: -gpd_loglik(y, xi, math.exp(ls)),
        bounds=(math.log(lo), math.log(100.0)),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert ll[0] >= -r.fun - 1e-7
    assert abs(sig[0] - math.exp(r.x)) < 1e-4 * sig[0]
    assert abs(ll[0] - gpd_loglik(y, xi, sig[0])) < 1e-8


def test_profile_below_minus_one_keeps_sigma_at_the_constraint():
    y = np.array([0.05, 0.2, 0.3, 0.7, 1.0])
    sig, ll = profile_sigma(y, [-1.2, -1.5, -1.0])
    assert np.allclose(sig, np.array([1.2, 1.5, 1.0]) * 1.0 * (1 + 1e-9), rtol=1e-12)
    assert np.all(ll[:2] == -np.inf)  # unbounded likelihood: no MLE below -1
    assert abs(ll[2] - (-5 * math.log(1 + 1e-9))) < 1e-12  # uniform law at xi = -1
    # a small sample near the boundary still gets a fit in [-1, 1]
    rng = np.random.default_rng(3)
    fit = fit_gpd(stats.genpareto.rvs(-0.8, scale=0.1, size=30, random_state=rng))
    assert -1.0 <= fit.xi < 0


# ---------------------------------------------------------------------------------------------
# GPD fit: recovery of xi and agreement with scipy.stats.genpareto.fit
# ---------------------------------------------------------------------------------------------

XI_TOL = 0.06  # stated tolerance at n = 4000: about 4 standard errors (1 + xi)/sqrt(n)


@pytest.mark.parametrize("xi", [-0.4, -0.15, 0.0, 0.2])
def test_fit_gpd_recovers_xi_and_agrees_with_scipy(xi):
    rng = np.random.default_rng(100 + int(10 * xi))
    n = 4000
    y = stats.genpareto.rvs(xi, scale=0.1, size=n, random_state=rng)
    fit = fit_gpd(y)
    assert abs(fit.xi - xi) < XI_TOL
    assert abs(fit.sigma - 0.1) < 0.01
    c, _, scale = stats.genpareto.fit(y, floc=0)
    assert abs(fit.xi - c) < 5e-3  # scipy's c is xi (same sign)
    assert fit.loglik >= gpd_loglik(y, c, scale) - 1e-3  # the profile max is at least as good
    assert abs(fit.exp_sigma - y.mean()) < 1e-15
    assert abs(fit.exp_loglik - stats.expon.logpdf(y, scale=y.mean()).sum()) < 1e-8
    if fit.xi < 0:
        assert abs(fit.support_end + fit.sigma / fit.xi) < 1e-15
    else:
        assert fit.support_end == math.inf


def test_fit_gpd_validation():
    with pytest.raises(ValueError, match="exceedances"):
        fit_gpd([0.1])
    with pytest.raises(ValueError, match=">= 0"):
        fit_gpd([0.1, -0.2, 0.3])
    with pytest.raises(ValueError, match="xi_min"):
        fit_gpd([0.1, 0.2, 0.3], xi_min=1.0, xi_max=0.0)


def bounded_scores(n, a, rng):
    """Scores with ``P(1 - s <= t) = t^a``: exact GPD exceedances with xi = -1/a, endpoint 1."""
    return 1.0 - rng.random(n) ** (1.0 / a)


def test_pot_fit_endpoint_and_qq():
    rng = np.random.default_rng(7)
    s = bounded_scores(300_000, 4.0, rng)
    r = pot_fit(s, 0.99)
    assert r.n_exceed == 3000
    assert abs(r.threshold - np.quantile(s, 0.99)) < 1e-15
    assert abs(r.xi + 0.25) < 0.07
    assert abs(r.endpoint - 1.0) < 0.01 and r.endpoint == r.threshold - r.sigma / r.xi
    assert list(r.qq.columns) == ["p", "empirical", "gpd", "exponential"] and len(r.qq) == 99
    assert np.all(np.diff(r.qq["gpd"]) > 0)
    # the Weibull-domain fit tracks the empirical quantiles better than the exponential
    err_gpd = np.abs(r.qq["gpd"] - r.qq["empirical"]).max()
    err_exp = np.abs(r.qq["exponential"] - r.qq["empirical"]).max()
    assert err_gpd < err_exp
    with pytest.raises(ValueError, match="min_exceed"):
        pot_fit(s[:500], 0.99, min_exceed=10)
    with pytest.raises(ValueError, match="q"):
        pot_fit(s, 1.0)


def test_threshold_stability_scan():
    rng = np.random.default_rng(8)
    s = bounded_scores(200_000, 5.0, rng)
    df = threshold_stability(s)
    assert isinstance(df, pd.DataFrame) and list(df["q"]) == [0.98, 0.985, 0.99, 0.992, 0.995]
    assert np.all(np.diff(df["threshold"]) > 0) and np.all(np.diff(df["n_exceed"]) < 0)
    assert np.all(np.abs(df["xi"] + 0.2) < 0.1)
    small = threshold_stability(s[:15000], min_exceed=100)
    assert small["xi"].isna().iloc[-1] and not small["xi"].isna().iloc[0]


def test_sign_convention_wrappers():
    rng = np.random.default_rng(9)
    y = stats.genpareto.rvs(-0.3, scale=0.1, size=3000, random_state=rng)
    xi, _ = scipy_gpd_fit(y)
    assert abs(xi - fit_gpd(y).xi) < 5e-3 and xi < 0
    # reverse-Weibull maxima: scipy genextreme c = +0.3 means xi = -0.3 (Coles)
    m = stats.genextreme.rvs(0.3, loc=0.5, scale=0.1, size=3000, random_state=rng)
    xi, mu, s = gev_fit(m)
    assert abs(xi + 0.3) < 0.06 and abs(mu - 0.5) < 0.01 and m.max() < mu - s / xi + 1e-9


def test_embedding_scores():
    z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    assert np.allclose(embedding_scores(z), [1.0, 0.0, 0.0])
    assert np.allclose(embedding_scores(z, normalize=False), [2.0, 0.0, 0.0])


def test_lower_triangle_scores():
    S = torch.arange(16.0).reshape(4, 4)
    got = lower_triangle_scores(S)
    assert got.tolist() == [4.0, 8.0, 9.0, 12.0, 13.0, 14.0]
    with pytest.raises(ValueError, match="square"):
        lower_triangle_scores(np.zeros((2, 3)))


def test_pot_numbers_are_the_scalar_fields():
    rng = np.random.default_rng(3)
    r = pot_fit(rng.beta(2.0, 5.0, size=5000), 0.95)
    got = r.numbers()
    assert set(got) == {
        "q",
        "threshold",
        "n_exceed",
        "xi",
        "sigma",
        "endpoint",
        "loglik",
        "exp_sigma",
        "exp_loglik",
    }
    assert got["n_exceed"] == len(r.exceedances) and got["xi"] == r.xi and got["threshold"] == r.threshold
    assert all(isinstance(v, (int, float)) for v in got.values())


@pytest.mark.parametrize(
    "fit,sample,name",
    [
        (gev_fit, np.full(20, 0.7), "maxima"),
        (gev_fit, np.full(5, -3.0), "maxima"),
        (fit_gpd, np.full(30, 0.3), "exceedances y"),
        (scipy_gpd_fit, np.full(30, 0.3), "exceedances y"),
    ],
)
def test_constant_samples_are_refused_not_fitted(fit, sample, name):
    # a sample without spread has no scale: the gev_fit gave (0.85, 1.0, 5e-24)
    with pytest.raises(ValueError, match=f"^{name} are all equal"):
        fit(sample)
    spread = sample.copy()
    spread[0] += 0.05
    fit(spread)  # one value apart: a sample with spread is fitted


def test_fit_gpd_grids_beyond_memory_raise_naming_the_grid():
    y = np.random.default_rng(1).exponential(size=50)
    for name in ("n_grid", "n_refine"):
        with pytest.raises(
            ValueError, match=rf"^{name} = 1000000000 needs [0-9,.]+ GiB .* over the memory limit of"
        ):
            fit_gpd(y, **{name: 10**9})
