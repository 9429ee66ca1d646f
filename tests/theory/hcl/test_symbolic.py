"""Tests of theory.hcl.symbolic: sympy derivations against numpy/scipy and theory.hcl.optima floats."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory.geometry import etf_gram
from theory.hcl import hucl_at_nc, scl_optimum, symbolic, ucl_optimum


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
                scl_optimum(C, psi=psi, num_negatives=K, tau=float(tau), margin=float(margin)), rel=1e-13)
            u = symbolic.ucl_optimum_expr(C, psi=psi, num_negatives=K, tau=tau, margin=margin)
            assert float(u) == pytest.approx(
                ucl_optimum(C, psi=psi, num_negatives=K, tau=float(tau), margin=float(margin)), rel=1e-13)
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
            assert float(e) == pytest.approx(hucl_at_nc(c, float(b), psi=psi, num_negatives=3), rel=1e-13)


def test_validation():
    with pytest.raises(ValueError, match="num_classes"):
        symbolic.etf_gram_matrix(1)
    with pytest.raises(ValueError, match="tau"):
        symbolic.scl_optimum_expr(3, tau=0)


def test_collision_probability_expr_is_exact_for_integer_C():
    q = symbolic.collision_probability_expr(3, 1)
    assert not q.atoms(sp.Float)  # exact: no float crept in through -1/(C-1)
    assert sp.simplify(q - sp.E / (sp.E + 2 * sp.exp(sp.Rational(-1, 2)))) == 0
    with pytest.raises(ValueError, match="num_classes must be"):
        symbolic.collision_probability_expr(1, 1)


def test_defaults_match_the_float_closed_forms():
    """One default everywhere: num_negatives = 256, tau = 1, margin = 1 (theory.options)."""
    assert float(symbolic.scl_optimum_expr(10)) == pytest.approx(scl_optimum(10), rel=1e-13)
    for psi in ("mean", "sum"):
        assert float(symbolic.ucl_optimum_expr(4, psi=psi)) == pytest.approx(ucl_optimum(4, psi=psi), rel=1e-12)
