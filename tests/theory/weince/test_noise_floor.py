"""The softmax-vs-Weibit noise floor (theory.weince.noise_floor) against brentq and manual loops."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from theory.weince.noise_floor import noise_floor_experiment, noise_floor_theory, softmax_link_mle

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
        assert abs(gi - optimize.brentq(lambda b, mi=mi: mean(b) - mi, -100, 100, xtol=1e-14)) < 1e-9


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

                b = optimize.brentq(lambda b, m=m: mean(b) - m, -100, 100, xtol=1e-14)
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
