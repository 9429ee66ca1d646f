"""Link selection in the T_lambda family (theory.weince.links) against loops and simulations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from theory.weince.links import (
    candidates_from_similarity,
    link_select,
    tlambda_loglik,
    two_view_link_candidates,
)

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
    z1, z2 = (
        torch.randn(5, 3, generator=g, dtype=torch.float64),
        torch.randn(5, 3, generator=g, dtype=torch.float64),
    )
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    want = candidates_from_similarity((z @ z.T).numpy(), (np.arange(10) + 5) % 10)
    assert np.allclose(two_view_link_candidates(z1, z2), want, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# identification: a flat likelihood reports "not identified" instead of an arbitrary lambda-hat
# ---------------------------------------------------------------------------------------------


def _equal_shortfall_partner(s_a, tau):
    """s_b != s_a with -log(1 - s_b) - s_b / tau = -log(1 - s_a) - s_a / tau (g is convex, min at 1 - tau)."""
    from scipy import optimize

    g = lambda s: -math.log(1 - s) - s / tau  # noqa: E731
    return optimize.brentq(lambda s: g(s) - g(s_a), 1 - tau + 1e-9, 1 - 1e-9, xtol=1e-15)


def test_flat_likelihood_with_distinct_similarities_is_not_identified():
    # rows [s_a, s_b] with equal T_lambda increments: every lambda gives the same logit difference
    # (s_a - s_b)/tau, so l(lambda) is exactly flat although the candidates differ
    tau = 0.5
    rows = []
    for s_a in (0.1, 0.2, 0.3, 0.4):
        s_b = _equal_shortfall_partner(s_a, tau)
        assert abs(s_b - s_a) > 0.1
        rows += [[s_a, s_b], [s_b, s_a], [s_b, s_a]]
    cand = np.array(rows)
    lls = [tlambda_loglik(cand, lam, tau) for lam in np.linspace(0, 1, 11)]
    assert max(lls) - min(lls) < 1e-12  # the slow check that the likelihood is flat
    res = link_select(cand, tau=tau)
    assert res.identified is False and math.isnan(res.lam_hat)
    assert res.lr_stat == 0.0 and res.p_chi2 == 1.0 and res.p_boundary == 1.0
    assert res.loglik_range < 1e-9 and res.tau_hat == tau
    assert abs(res.loglik - lls[0]) < 1e-12


def test_constant_rows_are_not_identified_and_tau_not_fitted():
    cand = np.repeat(np.linspace(-0.2, 0.7, 9)[:, None], 5, axis=1)  # all candidates of a row equal
    res = link_select(cand, tau=None, n_grid=7)
    assert res.identified is False and math.isnan(res.lam_hat) and math.isnan(res.tau_hat)
    assert abs(res.loglik - (-9 * math.log(5))) < 1e-12


def test_identified_cases():
    res = link_select(simulate_tlambda(500, 8, 0.5, 0.5, seed=9), tau=0.5)
    assert res.identified is True and 0.0 <= res.lam_hat <= 1.0 and res.loglik_range > 1.0
    # one informative row among flat ones is enough to identify lambda
    flat = np.repeat(np.linspace(-0.2, 0.7, 20)[:, None], 4, axis=1)
    mixed = [flat, np.array([[0.95, 0.1, 0.2, 0.3]])]
    r2 = link_select(mixed, tau=0.5)
    assert r2.identified is True and r2.lam_hat == 1.0  # the likelihood increases in lambda here
    assert tlambda_loglik(mixed, 1.0) > tlambda_loglik(mixed, 0.0)
    # flat_tol is the stated tolerance: raising it past the range declares it flat
    r3 = link_select(mixed, tau=0.5, flat_tol=1.0)
    assert r3.identified is False
    with pytest.raises(ValueError, match="flat_tol"):
        link_select(mixed, flat_tol=-1.0)


@pytest.mark.parametrize("tau", [None, 0.5])
@pytest.mark.parametrize(
    "bounds,match",
    [
        ((1.0,), "tau_bounds must be a pair"),
        ((0.1, 1.0, 2.0), "tau_bounds must be a pair"),
        (1.0, "tau_bounds must be a pair"),
        ((0.0, 1.0), r"tau_bounds\[0\] must be > 0"),
        ((2.0, 1.0), "tau_bounds must be increasing"),
        ((0.1, float("nan")), r"tau_bounds\[1\] must be a finite"),
    ],
)
def test_bad_tau_bounds_raise_naming_them(tau, bounds, match):
    cand = simulate_tlambda(50, 6, 0.3, 0.5, seed=5)
    with pytest.raises(ValueError, match=match):
        link_select(cand, tau=tau, tau_bounds=bounds)


def test_a_grid_beyond_memory_raises_naming_n_grid():
    cand = simulate_tlambda(50, 6, 0.3, 0.5, seed=6)
    with pytest.raises(
        ValueError, match=r"^n_grid = 1000000000 needs [0-9,.]+ GiB .* over the memory limit of"
    ):
        link_select(cand, n_grid=10**9)
