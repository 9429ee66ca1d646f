"""Tests of theory.bounds: closed forms against slow references, the batch losses and the spec.

References used here are independent of the code under test: Python loops over negative-class
tuples with explicit ETF vectors, math.comb sums, theory.losses evaluated at exact NC batches,
and the numbers printed in spec/hcl.md §3.3, §3.6 and §10.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import bounds
from theory.geometry import simplex_etf
from theory.losses import contrastive_loss

PSIS = ("mean", "sum", "triplet")


# ---------------------------------------------------------------------------------------------
# slow references


def psi_ref(t, psi, tau=1.0, margin=1.0):
    """psi of theory.losses, written with Python floats."""
    K = len(t)
    if psi == "mean":
        return math.log(1 + sum(math.exp(x / tau) for x in t) / K)
    if psi == "sum":
        return math.log(1 + sum(math.exp(x / tau) for x in t))
    return sum(max(0.0, x / tau + margin) for x in t) / K


def population_nc_ref(C, K, psi, *, beta=0.0, setting="unsupervised", tau=1.0, margin=1.0):
    """Exact population loss at NC: loop over all K-tuples of negative classes, ETF vectors."""
    v = simplex_etf(C, C - 1).numpy()
    total = 0.0
    for c in range(C):
        classes = [c2 for c2 in range(C) if setting == "unsupervised" or c2 != c]
        w = np.array([math.exp(beta * float(v[c] @ v[c2])) for c2 in classes])
        w /= w.sum()
        for tup in itertools.product(range(len(classes)), repeat=K):
            p = float(np.prod(w[list(tup)]))
            t = [float(v[c] @ v[classes[j]] - v[c] @ v[c]) for j in tup]
            total += p * psi_ref(t, psi, tau, margin) / C
    return total


def nc_batch(counts, dtype=torch.float64):
    C = len(counts)
    v = simplex_etf(C, C - 1, dtype=dtype)
    labels = torch.tensor(np.repeat(np.arange(C), counts), dtype=torch.long)
    return v[labels], labels


# ---------------------------------------------------------------------------------------------
# psi family


@pytest.mark.parametrize("psi", PSIS)
def test_make_psi_matches_loop(psi):
    rng = np.random.default_rng(0)
    for k in (1, 2, 5):
        f = bounds.make_psi(psi, k, tau=0.7, margin=0.3)
        t = rng.normal(0, 3, size=(20, k))
        got = f(t)
        ref = [psi_ref(list(row), psi, 0.7, 0.3) for row in t]
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_make_psi_stable_for_large_arguments():
    f = bounds.make_psi("sum", 3, tau=0.01)
    assert np.isfinite(f(np.array([[100.0, -100.0, 50.0]]))).all()


def test_random_psi_admissible():
    """Random psi are coordinate-wise non-decreasing and midpoint convex."""
    rng = np.random.default_rng(1)
    for _ in range(40):
        k = int(rng.integers(1, 4))
        f = bounds.random_psi(k, rng)
        x = rng.normal(size=(200, k))
        y = rng.normal(size=(200, k))
        assert (f(x + np.abs(y)) >= f(x) - 1e-12).all()
        assert (f((x + y) / 2) <= (f(x) + f(y)) / 2 + 1e-12).all()


def test_random_eta_nonnegative_nondecreasing():
    rng = np.random.default_rng(2)
    s = np.linspace(-1, 1, 401)
    for _ in range(40):
        _, eta = bounds.random_eta(rng)
        e = eta(s)
        assert (e >= 0).all() and (np.diff(e) >= -1e-12).all()


# ---------------------------------------------------------------------------------------------
# closed forms


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C", [2, 3, 10, 100])
def test_scl_optimum_formula(psi, C):
    a = -C / (C - 1)
    for K, tau, margin in ((1, 1.0, 1.0), (7, 0.5, 2.0), (256, 2.0, 0.0)):
        got = bounds.scl_optimum(C, psi=psi, tau=tau, num_negatives=K, margin=margin)
        assert got == pytest.approx(psi_ref([a] * K, psi, tau, margin), rel=1e-12, abs=1e-14)


def test_spec_numbers_scl():
    """spec/hcl.md §3.3 table and §10 (C=6, d=5, k=2, sum form: L* = 0.471495)."""
    assert bounds.scl_optimum(6, psi="sum", num_negatives=2) == pytest.approx(0.471495, abs=5e-7)
    table = {
        (10, "mean", 1.0): 0.284572, (100, "mean", 1.0): 0.310555, (200, "mean", 1.0): 0.311913,
        (10, "sum", 1.0): 4.445863, (100, "sum", 1.0): 4.545745, (200, "sum", 1.0): 4.550768,
        (10, "sum", 0.5): 3.358367, (100, "sum", 0.5): 3.554003, (200, "sum", 0.5): 3.563865,
    }
    for (C, psi, tau), v in table.items():
        assert bounds.scl_optimum(C, psi=psi, tau=tau, num_negatives=256) == pytest.approx(v, abs=5e-7)


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C,K", [(2, 3), (3, 2), (4, 3), (6, 2)])
def test_ucl_optimum_equals_tuple_enumeration(psi, C, K):
    assert bounds.ucl_optimum(C, psi=psi, num_negatives=K, tau=0.8) == pytest.approx(
        population_nc_ref(C, K, psi, tau=0.8), rel=1e-12
    )


def test_ucl_optimum_comb_sum_large_K():
    C, K = 100, 256
    a = -C / (C - 1)
    ref = sum(
        math.comb(K, m) * (1 / C) ** m * (1 - 1 / C) ** (K - m) * math.log(1 + (m + (K - m) * math.exp(a)) / K)
        for m in range(K + 1)
    )
    assert bounds.ucl_optimum(C) == pytest.approx(ref, rel=1e-12)
    assert bounds.ucl_optimum(100) == pytest.approx(0.3152, abs=5e-5)  # spec §3.6
    assert bounds.ucl_optimum(6, psi="sum", num_negatives=2) == pytest.approx(0.589452, abs=5e-7)  # §10


@pytest.mark.parametrize("psi", PSIS)
def test_ucl_above_scl_and_weak_bound_below(psi):
    for C in (2, 3, 10, 100):
        for K in (1, 4, 256):
            u = bounds.ucl_optimum(C, psi=psi, num_negatives=K)
            assert u > bounds.scl_optimum(C, psi=psi, num_negatives=K)
            assert bounds.weak_bound(psi=psi, num_negatives=K) <= u
    assert bounds.weak_bound() == pytest.approx(0.3133, abs=5e-5)  # spec §3.6, C = 100 mean form


def test_collision_probability_formula_and_spec():
    for C in (2, 3, 10, 100):
        for beta in (0.0, 0.3, 2.0, 7.0):
            ref = math.exp(beta) / (math.exp(beta) + (C - 1) * math.exp(-beta / (C - 1)))
            assert bounds.collision_probability(C, beta) == pytest.approx(ref, rel=1e-12)
    assert bounds.collision_probability(7, 0.0) == pytest.approx(1 / 7)
    assert bounds.collision_probability(10, 1e6) == 1.0
    spec = {(100, 0): 0.010, (100, 2): 0.071, (100, 5): 0.612, (100, 10): 0.996, (10, 2): 0.506,
            (10, 5): 0.966, (200, 5): 0.433, (200, 10): 0.9915}
    for (C, beta), q in spec.items():
        assert bounds.collision_probability(C, beta) == pytest.approx(q, abs=5e-4)


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C,K,beta", [(3, 2, 1.0), (4, 3, 2.5), (6, 2, 5.0), (2, 3, 0.7)])
def test_hucl_at_nc_equals_tilted_enumeration(psi, C, K, beta):
    got = bounds.hucl_at_nc(C, beta, psi=psi, num_negatives=K, margin=0.5)
    assert got == pytest.approx(population_nc_ref(C, K, psi, beta=beta, margin=0.5), rel=1e-12)


def test_hucl_spec_numbers():
    for beta, v in {0: 0.3152, 2: 0.3430, 5: 0.5614, 10: 0.6919, 30: 0.6931}.items():
        assert bounds.hucl_at_nc(100, beta) == pytest.approx(v, abs=5e-5)
    for beta, v in {0: 0.589, 2: 0.924, 5: 1.092}.items():
        assert bounds.hucl_at_nc(6, beta, psi="sum", num_negatives=2) == pytest.approx(v, abs=5e-4)
    assert bounds.hucl_at_nc(6, 1e4, psi="sum", num_negatives=2) == pytest.approx(math.log(3), abs=1e-12)
    assert bounds.hucl_at_nc(100, 1e4) == pytest.approx(math.log(2), abs=1e-12)


@pytest.mark.parametrize("psi", ["mean", "sum"])
def test_hucl_monotone_and_not_tight(psi):
    betas = np.linspace(0, 20, 41)
    vals = [bounds.hucl_at_nc(10, b, psi=psi, num_negatives=16) for b in betas]
    assert (np.diff(vals) > 0).all()
    assert vals[0] == pytest.approx(bounds.ucl_optimum(10, psi=psi, num_negatives=16), rel=1e-14)


def test_plugin_vs_binomial_jensen():
    """Mean form: plug-in log(1 + E e^t) >= E_K log(1 + mean e^t) (log concave); equal for K=1 limit."""
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        b = bounds.binomial_mixture(q, 5, psi="mean", num_negatives=8)
        p = bounds.plugin_value(q, 5, psi="mean", num_negatives=8)
        assert p >= b - 1e-15
        assert bounds.binomial_mixture(q, 5, psi="mean", num_negatives=20000) == pytest.approx(p, abs=1e-4)
        # triplet: linear, both agree
        assert bounds.binomial_mixture(q, 5, psi="triplet", num_negatives=8) == pytest.approx(
            bounds.plugin_value(q, 5, psi="triplet", num_negatives=8), abs=1e-14
        )


# ---------------------------------------------------------------------------------------------
# agreement with theory.losses at exact NC batches


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("psi", PSIS)
def test_scl_optimum_equals_batch_loss_at_nc(dtype, psi):
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    gen = torch.Generator().manual_seed(0)
    for counts in ([2, 3, 1, 4], [5, 5, 5], [1, 1]):
        z, labels = nc_batch(counts, dtype)
        for beta in (0.0, 3.0, 100.0):
            for est in ("expectation", "sampled"):
                got = contrastive_loss(z, labels, setting="supervised", beta=beta, psi=psi, tau=0.5,
                                       estimator=est, num_negatives=17, generator=gen)
                ref = bounds.scl_optimum(len(counts), psi=psi, tau=0.5, num_negatives=17)
                assert float(got) == pytest.approx(ref, abs=tol, rel=tol)


def collision_batch_ref(counts, beta, self_negative):
    C = len(counts)
    out = []
    for c in range(C):
        same = counts[c] - (0 if self_negative else 1)
        other = sum(counts) - counts[c]
        num = same * math.exp(beta)
        out.append(num / (num + other * math.exp(-beta / (C - 1))))
    return out


def test_collision_probability_batch_reference():
    for counts in ([3, 1, 4], [2, 2, 2, 2], [1, 5]):
        for beta in (0.0, 1.0, 4.0):
            for sn in (True, False):
                np.testing.assert_allclose(
                    bounds.collision_probability_batch(counts, beta, self_negative=sn),
                    collision_batch_ref(counts, beta, sn), rtol=1e-12,
                )
    # equal counts with self-negatives reproduce the population q(beta)
    q = bounds.collision_probability_batch([7] * 5, 2.0)
    np.testing.assert_allclose(q, bounds.collision_probability(5, 2.0), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("psi", PSIS)
def test_hucl_batch_formula_equals_expectation_estimator(dtype, psi):
    tol = 1e-12 if dtype == torch.float64 else 3e-5
    for counts in ([3, 5, 2, 0, 4], [4, 4, 4], [1, 2]):
        z, labels = nc_batch(counts, dtype)
        for beta in (0.0, 2.0, 30.0):
            for sn in (True, False):
                for sp in (True, False):
                    got = contrastive_loss(z, labels, setting="unsupervised", beta=beta, psi=psi, num_negatives=9,
                                           self_negative=sn, self_positive=sp, tau=0.8)
                    ref = bounds.hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=9, tau=0.8,
                                                  estimator="expectation", self_negative=sn, self_positive=sp)
                    assert float(got) == pytest.approx(ref, abs=tol, rel=tol)


@pytest.mark.parametrize("psi,beta", [("mean", 0.0), ("mean", 2.0), ("sum", 5.0), ("triplet", 1.0)])
def test_hucl_batch_binomial_matches_sampled_estimator(psi, beta):
    """The binomial formula is the expectation of the K-sample estimator (Monte Carlo, 5 SE)."""
    counts = [5, 3, 4, 2, 6]
    z, labels = nc_batch(counts)
    gen = torch.Generator().manual_seed(1)
    vals = [float(contrastive_loss(z, labels, setting="unsupervised", beta=beta, psi=psi, estimator="sampled",
                                   num_negatives=4, generator=gen)) for _ in range(150)]
    mean, se = np.mean(vals), np.std(vals, ddof=1) / math.sqrt(len(vals))
    ref = bounds.hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=4)
    assert abs(mean - ref) <= 5 * se + 1e-12
    if psi == "mean":  # and it differs from the plug-in value by much more than the noise
        plug = bounds.hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=4, estimator="expectation")
        assert plug - ref > 5 * se


def test_weak_bound_holds_for_random_balanced_batches():
    rng = np.random.default_rng(3)
    for _ in range(20):
        C, per, d = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
        z = torch.from_numpy(bounds.random_instance(rng, num_points=C * per, num_classes=C, d=d)[0])
        labels = torch.arange(C).repeat_interleave(per)
        for psi in PSIS:
            got = float(contrastive_loss(z, labels, setting="unsupervised", beta=float(rng.uniform(0, 5)),
                                         psi=psi, num_negatives=8))
            assert got >= bounds.weak_bound(psi=psi, num_negatives=8) - 1e-12


# ---------------------------------------------------------------------------------------------
# Harris dominance


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


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_harris_exact_matches_loop_reference(setting):
    rng = np.random.default_rng(4)
    for _ in range(3):
        z, labels = bounds.random_instance(rng, num_points=5, num_classes=2, d=2)
        psi = bounds.random_psi(2, rng)
        eta = bounds.eta_from_hardening("exponential", beta=3.0)
        got = bounds.harris_exact(z, labels, setting=setting, psi=psi, eta=eta)
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
    domain=st.sampled_from(["ball", "sphere"]),
)
def test_harris_dominance_hypothesis(seed, N, C, d, k, setting, form, domain):
    rng = np.random.default_rng(seed)
    N = max(N, C + 1)
    z, labels = bounds.random_instance(rng, num_points=N, num_classes=C, d=d, domain=domain)
    psi = bounds.random_psi(k, rng) if form == "random" else bounds.make_psi(
        form, k, tau=float(rng.uniform(0.1, 2)), margin=float(rng.uniform(0, 2)))
    _, eta = bounds.random_eta(rng)
    gaps = bounds.harris_exact(z, labels, setting=setting, psi=psi, eta=eta)
    assert (gaps >= -1e-12).all()


def test_harris_detects_violations():
    """The check can fail: a decreasing psi or a decreasing eta reverses the inequality."""
    rng = np.random.default_rng(5)
    z, labels = bounds.random_instance(rng, num_points=6, num_classes=2, d=2)
    decreasing_psi = bounds.Psi("minus-sum", 2, lambda t: -t.sum(axis=-1))
    eta = bounds.eta_from_hardening("exponential", beta=4.0)
    assert bounds.harris_exact(z, labels, psi=decreasing_psi, eta=eta).min() < -1e-3
    psi = bounds.make_psi("sum", 2)
    assert bounds.harris_exact(z, labels, psi=psi, eta=lambda s: np.exp(-4.0 * s)).min() < -1e-3
    # constant eta: the hard law is the base law, gaps vanish
    np.testing.assert_allclose(bounds.harris_exact(z, labels, psi=psi, eta=lambda s: np.ones_like(s)), 0, atol=1e-14)


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_harris_exact_check_result(setting):
    r = bounds.harris_exact_check(25, setting=setting, seed=1)
    assert isinstance(r, bounds.CheckResult)
    assert r.passed and r.instances == 25 and r.worst_gap >= -1e-12
    assert r.details["pairs"] > 0 and r.details["strict_pairs"] > 0


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_beta_monotonicity(setting):
    r = bounds.beta_monotonicity(15, setting=setting, seed=2)
    assert r.passed and r.worst_gap >= -1e-12
    assert (np.diff(r.details["mean_curve"]) > 0).all()
    with pytest.raises(ValueError, match="betas"):
        bounds.beta_monotonicity(2, betas=(1.0, 0.5))


def test_harris_monte_carlo():
    r = bounds.harris_monte_carlo(num_classes=5, per_class=20, d=4, num_negatives=64, num_pairs=800, seed=0)
    lo, hi = r.details["ci"]
    assert r.passed and lo > 0  # significantly positive at beta = 5
    assert r.details["hard_mean"] > r.details["base_mean"]
    # beta = 0: same law, the interval covers 0
    r0 = bounds.harris_monte_carlo(num_classes=5, per_class=20, d=4, num_negatives=64, num_pairs=800,
                                   eta_params={"beta": 0.0}, seed=0)
    lo0, hi0 = r0.details["ci"]
    assert r0.passed and lo0 <= 0 <= hi0


# ---------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: bounds.scl_optimum(1), "C"),
        (lambda: bounds.scl_optimum(3, tau=0), "tau"),
        (lambda: bounds.scl_optimum(3, psi="max"), "psi"),
        (lambda: bounds.ucl_optimum(3, num_negatives=0), "num_negatives"),
        (lambda: bounds.hucl_at_nc(3, -1.0), "beta"),
        (lambda: bounds.hucl_at_nc(3, 1.0, estimator="exact"), "estimator"),
        (lambda: bounds.weak_bound(margin=-1), "margin"),
        (lambda: bounds.binomial_mixture(1.5, 3), "q"),
        (lambda: bounds.collision_probability_batch([3], 1.0), "counts"),
        (lambda: bounds.collision_probability_batch([3, -1], 1.0), "counts"),
        (lambda: bounds.hucl_at_nc_batch([1, 0], 1.0, self_negative=False), "class 0"),
        (lambda: bounds.harris_monte_carlo(confidence=1.5), "confidence"),
        (lambda: bounds.make_psi("sum", 2)(np.zeros((3, 4))), "last dimension"),
    ],
)
def test_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_harris_accepts_torch_hardening_directly():
    from theory.sampling import hardening

    rng = np.random.default_rng(6)
    z, labels = bounds.random_instance(rng, num_points=5, num_classes=2, d=2)
    psi = bounds.make_psi("mean", 2)
    a = bounds.harris_exact(z, labels, psi=psi, eta=hardening("step", threshold=0.0, low=0.3))
    b = bounds.harris_exact(z, labels, psi=psi, eta=bounds.eta_from_hardening("step", threshold=0.0, low=0.3))
    np.testing.assert_allclose(a, b, atol=0)
    assert (a >= -1e-12).all()
    with pytest.raises(ValueError, match="eta"):
        bounds.harris_exact(z, labels, psi=psi, eta=lambda s: -np.ones_like(s))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: bounds.harris_exact_check(0), "num_instances"),
        (lambda: bounds.beta_monotonicity(3, max_k=0), "max_k"),
        (lambda: bounds.harris_monte_carlo(num_classes=1), "num_classes"),
        (lambda: bounds.harris_monte_carlo(per_class=0), "per_class"),
        (lambda: bounds.harris_exact(np.zeros(3), np.zeros(3, int), psi=bounds.make_psi("mean", 1), eta=np.exp), "z"),
        (lambda: bounds.harris_exact(np.zeros((3, 2)), np.zeros(3, int), setting="x",
                                     psi=bounds.make_psi("mean", 1), eta=np.exp), "setting"),
        (lambda: bounds.random_instance(np.random.default_rng(0), num_points=2, num_classes=3), "num_points"),
    ],
)
def test_validation_of_checks(call, match):
    with pytest.raises(ValueError, match=match):
        call()
