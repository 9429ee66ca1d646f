"""Tests of theory.symbolic: sympy derivations against numpy/scipy and theory.bounds floats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from theory import bounds, symbolic
from theory.geometry import etf_gram


@pytest.mark.parametrize("C", [2, 3, 5, 8])
def test_etf_gram_eigenvalues_concrete(C):
    eig = symbolic.etf_gram_eigenvalues(C)
    assert eig == {sp.Rational(C, C - 1): C - 1, sp.Integer(0): 1}
    # independent: numpy eigenvalues of theory.geometry.etf_gram
    w = np.sort(np.linalg.eigvalsh(etf_gram(C).numpy()))
    np.testing.assert_allclose(w, [0.0] + [C / (C - 1)] * (C - 1), atol=1e-12)
    assert symbolic.etf_gram_matrix(C) == sp.Matrix(etf_gram(C).numpy()).applyfunc(sp.nsimplify)


def test_etf_gram_eigenvalues_general():
    C, eig = symbolic.etf_gram_eigenvalues_general()
    assert set(eig) == {C / (C - 1), sp.Integer(0)}
    assert sp.simplify(eig[C / (C - 1)] - (C - 1)) == 0
    assert symbolic.check_etf_spectrum()


def test_min_mean_pairwise_inner_product():
    C, value = symbolic.min_mean_pairwise_inner_product()
    assert sp.simplify(value + 1 / (C - 1)) == 0
    # numeric: the ETF attains it, random unit vectors do not go below it
    rng = np.random.default_rng(0)
    for c in (3, 5, 10):
        G = etf_gram(c).numpy()
        assert (G.sum() - np.trace(G)) / (c * (c - 1)) == pytest.approx(float(value.subs(C, c)), abs=1e-12)
        for _ in range(50):
            u = rng.normal(size=(c, c + 2))
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            H = u @ u.T
            assert (H.sum() - np.trace(H)) / (c * (c - 1)) >= float(value.subs(C, c)) - 1e-12


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_optimal_values_equal_bounds(psi):
    for C in (2, 3, 6, 10, 100):
        for K, tau, margin in ((1, 1, 1), (2, sp.Rational(1, 2), 2), (7, 2, 0)):
            e = symbolic.scl_optimum_expr(C, psi=psi, num_negatives=K, tau=tau, margin=margin)
            assert float(e) == pytest.approx(
                bounds.scl_optimum(C, psi=psi, num_negatives=K, tau=float(tau), margin=float(margin)), rel=1e-13)
            u = symbolic.ucl_optimum_expr(C, psi=psi, num_negatives=K, tau=tau, margin=margin)
            assert float(u) == pytest.approx(
                bounds.ucl_optimum(C, psi=psi, num_negatives=K, tau=float(tau), margin=float(margin)), rel=1e-13)
    assert symbolic.scl_optimum_expr(100, psi="mean") == sp.log(1 + sp.exp(sp.Rational(-100, 99)))


def test_hucl_expr_and_collision_probability():
    C, beta = sp.symbols("C beta", positive=True)
    q = symbolic.collision_probability_expr(C, beta)
    ref = sp.exp(beta) / (sp.exp(beta) + (C - 1) * sp.exp(-beta / (C - 1)))
    assert sp.simplify(q - ref) == 0
    assert sp.simplify(q.subs(beta, 0) - 1 / C) == 0
    for c, b in ((6, 2), (10, sp.Rational(1, 2)), (3, 5)):
        for psi in ("mean", "sum", "triplet"):
            e = symbolic.hucl_at_nc_expr(c, b, psi=psi, num_negatives=3)
            assert float(e) == pytest.approx(bounds.hucl_at_nc(c, float(b), psi=psi, num_negatives=3), rel=1e-13)


def test_tlambda_derivative():
    assert symbolic.check_tlambda_derivative()
    (s, lam, tau), T = symbolic.tlambda()
    d1 = symbolic.tlambda_derivative(1)
    # finite differences at a few points
    f = sp.lambdify((s, lam, tau), T)
    g = sp.lambdify((s, lam, tau), d1)
    for sv, lv, tv in ((0.3, 0.5, 0.2), (-0.7, 0.1, 1.0), (0.99, 0.9, 0.05)):
        h = 1e-6 * (1 - sv)
        fd = (f(sv + h, lv, tv) - f(sv - h, lv, tv)) / (2 * h)
        assert g(sv, lv, tv) == pytest.approx(fd, rel=1e-6)
        assert g(sv, lv, tv) == pytest.approx((1 - lv) / tv + lv / (1 - sv), rel=1e-12)
    with pytest.raises(ValueError, match="order"):
        symbolic.tlambda_derivative(0)


@pytest.mark.parametrize("K", [2, 3])
def test_weibull_top1_law_symbolic(K):
    assert symbolic.check_weibull_top1_law(K)
    q, probs = symbolic.weibull_top1_probabilities(K)
    beta = sp.Symbol("beta", positive=True)
    assert sp.simplify(sum(probs) - 1) == 0
    # numeric cross-check by scipy quadrature of the defining integral
    vals = {qi: v for qi, v in zip(q, (0.4, 0.7, 1.3)[:K])}
    for b in (0.7, 2.0):
        for j in range(K):
            qs = list(vals.values())
            dens = lambda t: b * t ** (b - 1) * qs[j] ** (-b) * math.exp(-sum((t / qk) ** b for qk in qs))  # noqa: E731
            num, _ = integrate.quad(dens, 0, np.inf)
            sym = float(probs[j].subs(vals).subs(beta, b))
            assert sym == pytest.approx(num, rel=1e-7)


@pytest.mark.parametrize("K,beta", [(2, 1), (3, 2)])
def test_weibull_top1_law_concrete_beta(K, beta):
    assert symbolic.check_weibull_top1_law(K, beta)


def test_weibull_validation():
    with pytest.raises(ValueError, match="K"):
        symbolic.weibull_top1_probabilities(1)
    with pytest.raises(ValueError, match="beta"):
        symbolic.weibull_top1_probabilities(2, -1)
    with pytest.raises(ValueError, match="C"):
        symbolic.etf_gram_matrix(1)
    with pytest.raises(ValueError, match="tau"):
        symbolic.scl_optimum_expr(3, tau=0)


def test_collision_probability_expr_is_exact_for_integer_C():
    import sympy as sp

    from theory.symbolic import collision_probability_expr

    q = collision_probability_expr(3, 1)
    assert not q.atoms(sp.Float)  # exact: no float crept in through -1/(C-1)
    assert sp.simplify(q - sp.E / (sp.E + 2 * sp.exp(sp.Rational(-1, 2)))) == 0
    with pytest.raises(ValueError, match="C must be"):
        collision_probability_expr(1, 1)
