"""Tests of theory.hcl.convex: cvxpy Gram programs against the ETF and the closed forms.

The optimal value is checked against theory.hcl.optima's closed form *and* against a Python-loop
evaluation of the population loss at the ETF Gram; the objective itself is checked against a
slow loop over ordered negative-class tuples.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from theory.hcl import convex, scl_optimum, ucl_optimum


def loss_at_gram_ref(G, setting, psi, k, tau=1.0, margin=1.0, priors=None):
    """Slow reference: loop over anchor class and ordered k-tuples of negative classes."""
    C = G.shape[0]
    pi = np.full(C, 1 / C) if priors is None else np.asarray(priors, float)
    total = 0.0
    for c in range(C):
        p = pi.copy()
        if setting == "supervised":
            p[c] = 0
        p = p / p.sum()
        for tup in itertools.product(range(C), repeat=k):
            w = math.prod(p[j] for j in tup)
            if w == 0:
                continue
            t = [(G[c, j] - G[c, c]) / tau for j in tup]
            if psi == "mean":
                val = math.log(1 + sum(math.exp(x) for x in t) / k)
            elif psi == "sum":
                val = math.log(1 + sum(math.exp(x) for x in t))
            else:
                val = sum(max(0.0, x + margin) for x in t) / k
            total += pi[c] * w * val
    return total


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_population_loss_at_gram_matches_loop(setting, psi):
    rng = np.random.default_rng(0)
    for C, k in ((3, 1), (4, 2), (3, 3)):
        X = rng.normal(size=(C, C))
        G = X @ X.T
        priors = rng.dirichlet(np.ones(C))
        got = convex.population_loss_at_gram(
            G, setting=setting, psi=psi, num_negatives=k, tau=0.7, margin=0.4, priors=priors
        )
        assert got == pytest.approx(loss_at_gram_ref(G, setting, psi, k, 0.7, 0.4, priors), rel=1e-12)


def test_closed_forms_are_the_loss_at_the_etf_gram():
    for C in (3, 4, 6):
        for psi in ("mean", "sum", "triplet"):
            for k in (1, 2):
                G = convex.etf_gram_np(C)
                assert loss_at_gram_ref(G, "supervised", psi, k) == pytest.approx(
                    scl_optimum(C, psi=psi, num_negatives=k), rel=1e-12
                )
                assert loss_at_gram_ref(G, "unsupervised", psi, k) == pytest.approx(
                    ucl_optimum(C, psi=psi, num_negatives=k), rel=1e-12
                )


CASES = [(C, 1) for C in (3, 4, 5, 6)] + [(3, 2), (4, 2), (6, 2)]


def _check_solution(sol, C, normalization):
    G = sol.G
    assert G.shape == (C, C) and np.allclose(G, G.T)
    assert np.linalg.eigvalsh(G).min() > -1e-6
    if normalization == "sphere":
        np.testing.assert_allclose(np.diag(G), 1.0, atol=1e-6)
    else:
        assert np.diag(G).max() <= 1 + 1e-6
    assert sol.status == "optimal" and sol.solver in convex.SOLVERS


@pytest.mark.parametrize("normalization", ["sphere", "ball"])
@pytest.mark.parametrize("C,k", CASES)
def test_scl_program_optimum_is_etf(C, k, normalization):
    sol = convex.minimize_scl(C, psi="mean", normalization=normalization, num_negatives=k)
    _check_solution(sol, C, normalization)
    np.testing.assert_allclose(sol.G, (C * np.eye(C) - 1) / (C - 1), atol=2e-3)
    assert sol.value == pytest.approx(math.log(1 + math.exp(-C / (C - 1))), abs=1e-6)
    assert sol.value == pytest.approx(scl_optimum(C, psi="mean", num_negatives=k), abs=1e-6)
    assert convex.population_loss_at_gram(sol.G, num_negatives=k) == pytest.approx(sol.value, abs=1e-7)


@pytest.mark.parametrize("normalization", ["sphere", "ball"])
@pytest.mark.parametrize("C,k", CASES)
def test_ucl_program_optimum_is_etf(C, k, normalization):
    psi = "sum" if k == 2 else "mean"
    sol = convex.minimize_ucl(C, psi=psi, normalization=normalization, num_negatives=k)
    _check_solution(sol, C, normalization)
    np.testing.assert_allclose(sol.G, (C * np.eye(C) - 1) / (C - 1), atol=2e-3)
    ref = loss_at_gram_ref((C * np.eye(C) - 1) / (C - 1), "unsupervised", psi, k)
    assert sol.value == pytest.approx(ref, abs=1e-6)
    assert sol.value == pytest.approx(ucl_optimum(C, psi=psi, num_negatives=k), abs=1e-6)


def test_spec_section10_values():
    """C = 6, k = 2, sum form: L*_SCL = 0.471495 and L*_UCL = 0.589452 (docs/hcl.md#optimal-values)."""
    assert convex.minimize_scl(6, psi="sum", num_negatives=2, normalization="ball").value == pytest.approx(
        0.471495, abs=1e-6
    )
    assert convex.minimize_ucl(6, psi="sum", num_negatives=2, normalization="ball").value == pytest.approx(
        0.589452, abs=1e-6
    )


def test_temperature_and_uniform_priors_explicit():
    a = convex.minimize_scl(4, psi="sum", num_negatives=1, tau=0.5)
    assert a.value == pytest.approx(scl_optimum(4, psi="sum", num_negatives=1, tau=0.5), abs=1e-6)
    b = convex.minimize_scl(4, psi="sum", num_negatives=1, tau=0.5, priors=[0.25] * 4)
    assert b.value == pytest.approx(a.value, abs=1e-8)


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_unequal_priors_move_the_optimum_away_from_the_etf(setting):
    pri = np.array([0.4, 0.3, 0.2, 0.1])
    sol = convex.minimize_gram(4, setting=setting, priors=pri, normalization="ball", num_negatives=1)
    at_etf = loss_at_gram_ref(convex.etf_gram_np(4), setting, "mean", 1, priors=pri)
    assert sol.value < at_etf - 1e-3
    assert sol.etf_deviation() > 0.1
    assert loss_at_gram_ref(sol.G, setting, "mean", 1, priors=pri) == pytest.approx(sol.value, abs=1e-6)
    # the frequent classes are pushed further apart than the rare ones
    assert sol.G[0, 1] < sol.G[2, 3]


def test_triplet_optimum_value_and_non_uniqueness():
    C, margin = 4, 2.0
    sol = convex.minimize_scl(C, psi="triplet", margin=margin, num_negatives=1)
    ref = max(0.0, margin - C / (C - 1))
    assert sol.value == pytest.approx(ref, abs=1e-7)
    u = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=float)  # not an ETF
    G = u @ u.T
    assert np.abs(G - convex.etf_gram_np(C)).max() > 0.5
    assert loss_at_gram_ref(G, "supervised", "triplet", 1, margin=margin) == pytest.approx(ref, abs=1e-12)
    # small margin: the loss is 0 on a whole set of Grams
    sol0 = convex.minimize_scl(C, psi="triplet", margin=0.5, num_negatives=1)
    assert sol0.value == pytest.approx(0.0, abs=1e-7)
    assert loss_at_gram_ref(G, "supervised", "triplet", 1, margin=0.5) == 0.0
    ucl = convex.minimize_ucl(C, psi="triplet", margin=margin, num_negatives=1)
    assert ucl.value == pytest.approx(ucl_optimum(C, psi="triplet", margin=margin), abs=1e-7)


def test_scs_solver_agrees():
    sol = convex.minimize_scl(4, solver="SCS", solver_options={"eps": 1e-7}, num_negatives=1)
    assert sol.solver == "SCS"
    assert sol.value == pytest.approx(scl_optimum(4), abs=1e-4)


def test_failed_solve_raises_clear_error():
    with pytest.raises(RuntimeError, match="CLARABEL.*status"):
        convex.minimize_scl(5, num_negatives=2, solver="CLARABEL", solver_options={"max_iter": 1})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 3, "setting": "selfsup"}, "setting"),
        ({"num_classes": 3, "psi": "hinge"}, "psi"),
        ({"num_classes": 3, "normalization": "cube"}, "normalization"),
        ({"num_classes": 3, "num_negatives": 0}, "num_negatives"),
        ({"num_classes": 3, "tau": 0.0}, "tau"),
        ({"num_classes": 3, "margin": -1.0}, "margin"),
        ({"num_classes": 3, "priors": [0.5, 0.5]}, "priors"),
        ({"num_classes": 3, "priors": [0.5, 0.4, 0.2]}, "priors"),
        ({"num_classes": 3, "solver": "MOSEK"}, "solver"),
    ],
)
def test_validation(kwargs, match):
    kwargs = {"num_negatives": 1, **kwargs}  # num_negatives is a required keyword
    with pytest.raises(ValueError, match=match):
        convex.minimize_gram(**kwargs)
    with pytest.raises(ValueError, match="square"):
        convex.population_loss_at_gram(np.zeros((2, 3)), num_negatives=1)
