"""Tests of theory/evt.py against scipy, brute-force optimisation and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import optimize, stats

from theory.evt import (
    candidates_from_similarity,
    two_view_link_candidates,
    embedding_scores,
    gev_fit,
    scipy_gpd_fit,
    fit_gpd,
    gpd_loglik,
    gpd_quantile,
    link_select,
    lower_triangle_scores,
    noise_floor_experiment,
    noise_floor_theory,
    pot_fit,
    profile_sigma,
    softmax_link_mle,
    tail_aic_fit,
    tail_aic_fits,
    threshold_stability,
    tlambda_loglik,
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
    assert np.allclose(gpd_quantile(p, xi, 0.25), stats.genpareto.ppf(p, xi, scale=0.25), rtol=1e-12, atol=1e-14)


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
    r = optimize.minimize_scalar(lambda ls: -gpd_loglik(y, xi, math.exp(ls)),
                                 bounds=(math.log(lo), math.log(100.0)), method="bounded",
                                 options={"xatol": 1e-12})
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
    c, loc, scale = stats.genpareto.fit(y, floc=0)
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
    xi, sigma = scipy_gpd_fit(y)
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


# ---------------------------------------------------------------------------------------------
# link selection
# ---------------------------------------------------------------------------------------------


def simulate_tlambda(M, C, lam, tau, seed, eps=1e-6):
    """Rows of C candidates; the winner drawn from the T_lambda softmax and moved to column 0."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-0.3, 0.995, size=(M, C))
    logits = (1 - lam) * s / tau + lam * (-np.log1p(-np.minimum(s, 1 - eps)))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    win = (p.cumsum(axis=1) > rng.random((M, 1))).argmax(axis=1)
    out = s.copy()
    out[np.arange(M), 0], out[np.arange(M), win] = s[np.arange(M), win], s[np.arange(M), 0]
    return out


def test_tlambda_loglik_matches_loop():
    cand = simulate_tlambda(7, 5, 0.3, 0.5, seed=1)
    for lam in (0.0, 0.3, 1.0):
        want = 0.0
        for row in cand:
            l = [(1 - lam) * v / 0.5 + lam * (-math.log(1 - min(v, 1 - 1e-6))) for v in row]
            want += l[0] - math.log(sum(math.exp(v) for v in l))
        assert abs(tlambda_loglik(cand, lam, 0.5) - want) < 1e-10
    assert abs(tlambda_loglik([cand[:3], cand[3:]], 0.3) - tlambda_loglik(cand, 0.3)) < 1e-10
    # eps clamps the shortfall branch: rows with s > 1 - eps
    eps = 0.1
    assert (cand > 1 - eps).any()
    want = 0.0
    for row in cand:
        l = [0.5 * v / 0.5 + 0.5 * (-math.log(1 - min(v, 1 - eps))) for v in row]
        want += l[0] - math.log(sum(math.exp(v) for v in l))
    assert abs(tlambda_loglik(cand, 0.5, 0.5, eps=eps) - want) < 1e-10
    assert abs(tlambda_loglik(cand, 0.5, 0.5, eps=eps) - tlambda_loglik(cand, 0.5, 0.5)) > 1e-6


def test_link_select_recovers_lambda_and_lrt():
    cand = simulate_tlambda(3000, 16, 0.4, 0.5, seed=2)
    res = link_select(cand, tau=0.5)
    grid = np.linspace(0, 1, 2001)
    brute = np.array([tlambda_loglik(cand, g, 0.5) for g in grid[::10]])
    assert res.loglik >= brute.max() - 1e-9
    assert abs(res.lam_hat - 0.4) < 0.1
    assert abs(res.lr_stat - 2 * (res.loglik - tlambda_loglik(cand, 0.0, 0.5))) < 1e-8
    assert res.p_chi2 < 1e-6 and abs(res.p_boundary - 0.5 * res.p_chi2) < 1e-300 + 1e-12 * res.p_chi2
    assert res.n_rows == 3000 and len(res.profile) == 51
    # under lambda = 0 the test does not reject
    null = link_select(simulate_tlambda(3000, 16, 0.0, 0.5, seed=3), tau=0.5)
    assert null.lam_hat < 0.1 and null.p_boundary > 0.01


def test_link_select_with_tau_fitted():
    cand = simulate_tlambda(2000, 12, 0.3, 0.25, seed=4)
    res = link_select(cand, tau=None, n_grid=21)
    assert abs(res.lam_hat - 0.3) < 0.15
    assert abs(math.log(res.tau_hat / 0.25)) < 0.3
    assert res.loglik >= tlambda_loglik(cand, 0.3, 0.25) - 1e-6
    with pytest.raises(ValueError, match="tau"):
        link_select(cand, tau=0.0)
    with pytest.raises(ValueError, match="candidate"):
        link_select(np.zeros((3, 1)))


def test_candidates_from_similarity():
    S = np.arange(16.0).reshape(4, 4)
    got = candidates_from_similarity(S, [2, 3, 0, 1])
    assert got.tolist() == [[2, 1, 3], [7, 4, 6], [8, 9, 11], [13, 12, 14]]
    mask = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=bool)
    assert candidates_from_similarity(S, [2, 3, 0, 1], mask).tolist() == [[2, 1], [7, 4], [8, 9], [13, 14]]
    with pytest.raises(ValueError, match="positives"):
        candidates_from_similarity(S, [4, 0, 0, 0])
    # the two-view helper equals the generic one on the cosine matrix
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g, dtype=torch.float64)
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    want = candidates_from_similarity((z @ z.T).numpy(), (np.arange(10) + 5) % 10)
    assert np.allclose(two_view_link_candidates(z1, z2), want, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# noise floor (spec §4.2)
# ---------------------------------------------------------------------------------------------


def test_noise_floor_theory_numbers():
    th = noise_floor_theory()
    assert np.allclose(th.p_star, [0.0975, 0.1381, 0.2243, 0.5401], atol=5e-5)
    assert abs(th.target - 1.7121) < 5e-5
    assert abs(th.theta_pseudo - 2.56606) < 5e-6
    assert abs(th.pseudo_log_odds - 1.92454) < 5e-6
    assert abs(th.bias2_floor - 0.045151) < 5e-7
    assert abs(th.c - 7.13603) < 5e-6
    assert abs(th.godambe_A - 0.050023) < 5e-7 and abs(th.godambe_B - 0.059332) < 5e-7
    assert abs(th.godambe - 23.7109) < 5e-5


def test_softmax_link_mle_matches_brentq():
    v = np.array([0.15, 0.45, 0.7, 0.9])
    m = np.array([0.3, 0.55, 0.8, 0.89])
    got = softmax_link_mle(m, v)

    def mean(b):
        w = np.exp(b * v - (b * v).max())
        return (w @ v) / w.sum()

    for gi, mi in zip(got, m):
        assert abs(gi - optimize.brentq(lambda b: mean(b) - mi, -100, 100, xtol=1e-14)) < 1e-9


def test_noise_floor_draw_order_matches_manual_loop():
    df = noise_floor_experiment((100, 200), reps=40)
    th = noise_floor_theory()
    s = np.array([0.15, 0.45, 0.7, 0.9])
    x = -np.log1p(-s)
    rng = np.random.default_rng(20260113)
    for n, row in zip((100, 200), df.itertuples()):
        errs_s, errs_w = [], []
        counts = rng.multinomial(n, th.p_star, size=40)
        for c in counts:
            for v, errs, scale in ((s, errs_s, s[3] - s[0]), (x, errs_w, x[3] - x[0])):
                m = c @ v / n

                def mean(b, v=v):
                    w = np.exp(b * v - (b * v).max())
                    return (w @ v) / w.sum()

                b = optimize.brentq(lambda b: mean(b) - m, -100, 100, xtol=1e-14)
                errs.append((b * scale - th.target) ** 2)
        assert abs(row.mse_softmax - np.mean(errs_s)) < 1e-9
        assert abs(row.mse_weibit - np.mean(errs_w)) < 1e-9


def test_noise_floor_experiment_claims():
    df = noise_floor_experiment((1000, 10000), reps=12000)
    assert list(df["n"]) == [1000, 10000] and (df["reps"] == 12000).all()
    th = noise_floor_theory()
    assert np.allclose(df["theory_weibit"], th.c / df["n"]) and np.allclose(df["bias2_floor"], th.bias2_floor)
    # Weibit MSE tracks c/n (within 10 %), softmax stays above it
    assert np.all(np.abs(df["mse_weibit"] / df["theory_weibit"] - 1) < 0.10)
    assert np.all(df["mse_softmax"] > df["mse_weibit"])
    last = df.iloc[-1]
    # at n = 10 000 the softmax MSE sits on the floor: within Monte-Carlo error of
    # floor + Godambe variance / n, and within 4 % of the bare bias^2 floor
    assert abs(last.mse_softmax - last.theory_softmax) < 4 * last.se_mse_softmax
    assert abs(last.mse_softmax / last.bias2_floor - 1) < 0.04
    assert abs(last.bias2_softmax - th.bias2_floor) < 4 * last.se_mse_softmax
    # reproducible
    again = noise_floor_experiment((1000,), reps=12000)
    assert again["mse_softmax"].iloc[0] == df["mse_softmax"].iloc[0]


def test_noise_floor_validation():
    with pytest.raises(ValueError, match="reps"):
        noise_floor_experiment((100,), reps=1)
    with pytest.raises(ValueError, match="n"):
        noise_floor_experiment((0,), reps=10)
    with pytest.raises(ValueError, match="scores"):
        noise_floor_theory((0.1, 1.0))
