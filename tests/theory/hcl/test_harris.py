"""Harris-dominance checks (theory.hcl.harris): exact enumeration against a loop reference,
property-based instances, violations detected, Monte Carlo intervals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.hcl import (
    CheckResult,
    Psi,
    beta_monotonicity,
    eta_from_hardening,
    hardening,
    harris_exact,
    harris_exact_check,
    harris_monte_carlo,
    make_psi,
    random_eta,
    random_instance,
    random_psi,
)


def harris_gaps_ref(z, labels, setting, psi, eta):
    """Python-loop reference of harris_exact (pairs in (anchor, positive) ascending order)."""
    S = z @ z.T
    k = psi.k
    gaps = []
    for i in range(len(labels)):
        A = [n for n in range(len(labels)) if setting == "unsupervised" or labels[n] != labels[i]]
        w_hard = np.array([float(eta(np.array([S[i, n]]))[0]) for n in A])
        if w_hard.sum() == 0:
            continue
        w_hard /= w_hard.sum()
        for j in range(len(labels)):
            if labels[j] != labels[i]:
                continue
            e_base = e_hard = 0.0
            for tup in itertools.product(range(len(A)), repeat=k):
                val = float(psi(np.array([[S[i, A[r]] - S[i, j] for r in tup]]))[0])
                e_base += val / len(A) ** k
                e_hard += val * math.prod(w_hard[r] for r in tup)
            gaps.append(e_hard - e_base)
    return np.array(gaps)


def test_random_eta_nonnegative_nondecreasing():
    rng = np.random.default_rng(2)
    s = np.linspace(-1, 1, 401)
    for _ in range(40):
        _, eta = random_eta(rng)
        e = eta(s)
        assert (e >= 0).all() and (np.diff(e) >= -1e-12).all()


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_harris_exact_matches_loop_reference(setting):
    rng = np.random.default_rng(4)
    for _ in range(3):
        z, labels = random_instance(rng, num_points=5, num_classes=2, d=2)
        psi = random_psi(2, rng)
        eta = eta_from_hardening("exponential", beta=3.0)
        got = harris_exact(z, labels, setting=setting, psi=psi, eta=eta)
        np.testing.assert_allclose(got, harris_gaps_ref(z, labels, setting, psi, eta), atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(3, 6),
    C=st.integers(2, 3),
    d=st.integers(1, 4),
    k=st.integers(1, 3),
    setting=st.sampled_from(["supervised", "unsupervised"]),
    form=st.sampled_from(["mean", "sum", "triplet", "random"]),
    normalization=st.sampled_from(["ball", "sphere"]),
)
def test_harris_dominance_hypothesis(seed, N, C, d, k, setting, form, normalization):
    rng = np.random.default_rng(seed)
    N = max(N, C + 1)
    z, labels = random_instance(rng, num_points=N, num_classes=C, d=d, normalization=normalization)
    psi = (
        random_psi(k, rng)
        if form == "random"
        else make_psi(form, k, tau=float(rng.uniform(0.1, 2)), margin=float(rng.uniform(0, 2)))
    )
    _, eta = random_eta(rng)
    gaps = harris_exact(z, labels, setting=setting, psi=psi, eta=eta)
    assert (gaps >= -1e-12).all()


def test_harris_detects_violations():
    """The check can fail: a decreasing psi or a decreasing eta reverses the inequality."""
    rng = np.random.default_rng(5)
    z, labels = random_instance(rng, num_points=6, num_classes=2, d=2)
    decreasing_psi = Psi("minus-sum", 2, lambda t: -t.sum(axis=-1))
    eta = eta_from_hardening("exponential", beta=4.0)
    assert harris_exact(z, labels, psi=decreasing_psi, eta=eta).min() < -1e-3
    psi = make_psi("sum", 2)
    assert harris_exact(z, labels, psi=psi, eta=lambda s: np.exp(-4.0 * s)).min() < -1e-3
    # constant eta: the hard law is the base law, gaps vanish
    np.testing.assert_allclose(harris_exact(z, labels, psi=psi, eta=lambda s: np.ones_like(s)), 0, atol=1e-14)


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_harris_exact_check_result(setting):
    r = harris_exact_check(25, setting=setting, seed=1)
    assert isinstance(r, CheckResult)
    assert r.passed and r.instances == 25 and r.worst_gap >= -1e-12
    assert r.details["pairs"] > 0 and r.details["strict_pairs"] > 0


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_beta_monotonicity(setting):
    r = beta_monotonicity(15, setting=setting, seed=2)
    assert r.passed and r.worst_gap >= -1e-12
    assert (np.diff(r.details["mean_curve"]) > 0).all()
    with pytest.raises(ValueError, match="betas"):
        beta_monotonicity(2, betas=(1.0, 0.5))


def test_harris_monte_carlo():
    r = harris_monte_carlo(num_classes=5, per_class=20, d=4, num_negatives=64, num_pairs=800, seed=0)
    lo, _ = r.details["ci"]
    assert r.passed and lo > 0  # significantly positive at beta = 5
    assert r.details["hard_mean"] > r.details["base_mean"]
    # beta = 0: same law, the interval covers 0
    r0 = harris_monte_carlo(
        num_classes=5, per_class=20, d=4, num_negatives=64, num_pairs=800, eta_params={"beta": 0.0}, seed=0
    )
    lo0, hi0 = r0.details["ci"]
    assert r0.passed and lo0 <= 0 <= hi0


def test_harris_accepts_torch_hardening_directly():
    rng = np.random.default_rng(6)
    z, labels = random_instance(rng, num_points=5, num_classes=2, d=2)
    psi = make_psi("mean", 2)
    a = harris_exact(z, labels, psi=psi, eta=hardening("step", threshold=0.0, low=0.3))
    b = harris_exact(z, labels, psi=psi, eta=eta_from_hardening("step", threshold=0.0, low=0.3))
    np.testing.assert_allclose(a, b, atol=0)
    assert (a >= -1e-12).all()
    with pytest.raises(ValueError, match="eta"):
        harris_exact(z, labels, psi=psi, eta=lambda s: -np.ones_like(s))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: harris_monte_carlo(confidence=1.5), "confidence"),
        (lambda: harris_exact_check(0), "num_instances"),
        (lambda: beta_monotonicity(3, max_k=0), "max_k"),
        (lambda: harris_monte_carlo(num_classes=1), "num_classes"),
        (lambda: harris_monte_carlo(per_class=0), "per_class"),
        (lambda: harris_exact(np.zeros(3), np.zeros(3, int), psi=make_psi("mean", 1), eta=np.exp), "z"),
        (
            lambda: harris_exact(
                np.zeros((3, 2)), np.zeros(3, int), setting="x", psi=make_psi("mean", 1), eta=np.exp
            ),
            "setting",
        ),
        (lambda: random_instance(np.random.default_rng(0), num_points=2, num_classes=3), "num_points"),
    ],
)
def test_validation_of_checks(call, match):
    with pytest.raises(ValueError, match=match):
        call()
