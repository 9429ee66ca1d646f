"""Tests of theory.weince.symbolic: the T_lambda derivative and the Weibull top-1 law."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from theory.weince import symbolic


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

            def dens(t, b=b, qs=qs, j=j):
                return b * t ** (b - 1) * qs[j] ** (-b) * math.exp(-sum((t / qk) ** b for qk in qs))

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
