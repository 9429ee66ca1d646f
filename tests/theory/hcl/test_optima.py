"""Closed-form optima at Neural Collapse (theory.hcl.optima) against tuple enumeration, the
spec's numbers and the batch losses at exact NC batches."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from tests.reference import psi_ref
from theory.geometry import simplex_etf
from theory.hcl import (
    binomial_mixture,
    collision_probability,
    collision_probability_batch,
    contrastive_loss,
    hucl_at_nc,
    hucl_at_nc_batch,
    plugin_value,
    random_instance,
    scl_optimum,
    ucl_optimum,
    weak_bound,
)

PSIS = ("mean", "sum", "triplet")


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


# ---------------------------------------------------------------------------------------------
# closed forms


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C", [2, 3, 10, 100])
def test_scl_optimum_formula(psi, C):
    a = -C / (C - 1)
    for K, tau, margin in ((1, 1.0, 1.0), (7, 0.5, 2.0), (256, 2.0, 0.0)):
        got = scl_optimum(C, psi=psi, tau=tau, num_negatives=K, margin=margin)
        assert got == pytest.approx(psi_ref([a] * K, psi, tau, margin), rel=1e-12, abs=1e-14)


def test_spec_numbers_scl():
    """docs/hcl.md#optimal-values (C=6, d=5, k=2, sum form: L* = 0.471495)."""
    assert scl_optimum(6, psi="sum", num_negatives=2) == pytest.approx(0.471495, abs=5e-7)
    table = {
        (10, "mean", 1.0): 0.284572,
        (100, "mean", 1.0): 0.310555,
        (200, "mean", 1.0): 0.311913,
        (10, "sum", 1.0): 4.445863,
        (100, "sum", 1.0): 4.545745,
        (200, "sum", 1.0): 4.550768,
        (10, "sum", 0.5): 3.358367,
        (100, "sum", 0.5): 3.554003,
        (200, "sum", 0.5): 3.563865,
    }
    for (C, psi, tau), v in table.items():
        assert scl_optimum(C, psi=psi, tau=tau, num_negatives=256) == pytest.approx(v, abs=5e-7)


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C,K", [(2, 3), (3, 2), (4, 3), (6, 2)])
def test_ucl_optimum_equals_tuple_enumeration(psi, C, K):
    assert ucl_optimum(C, psi=psi, num_negatives=K, tau=0.8) == pytest.approx(
        population_nc_ref(C, K, psi, tau=0.8), rel=1e-12
    )


def test_ucl_optimum_comb_sum_large_K():
    C, K = 100, 256
    a = -C / (C - 1)
    ref = sum(
        math.comb(K, m)
        * (1 / C) ** m
        * (1 - 1 / C) ** (K - m)
        * math.log(1 + (m + (K - m) * math.exp(a)) / K)
        for m in range(K + 1)
    )
    assert ucl_optimum(C) == pytest.approx(ref, rel=1e-12)
    assert ucl_optimum(100) == pytest.approx(0.3152, abs=5e-5)  # spec §3.6
    assert ucl_optimum(6, psi="sum", num_negatives=2) == pytest.approx(0.589452, abs=5e-7)  # §10


@pytest.mark.parametrize("psi", PSIS)
def test_ucl_above_scl_and_weak_bound_below(psi):
    for C in (2, 3, 10, 100):
        for K in (1, 4, 256):
            u = ucl_optimum(C, psi=psi, num_negatives=K)
            assert u > scl_optimum(C, psi=psi, num_negatives=K)
            assert weak_bound(psi=psi, num_negatives=K) <= u
    assert weak_bound() == pytest.approx(0.3133, abs=5e-5)  # spec §3.6, C = 100 mean form


def test_collision_probability_formula_and_spec():
    for C in (2, 3, 10, 100):
        for beta in (0.0, 0.3, 2.0, 7.0):
            ref = math.exp(beta) / (math.exp(beta) + (C - 1) * math.exp(-beta / (C - 1)))
            assert collision_probability(C, beta) == pytest.approx(ref, rel=1e-12)
    assert collision_probability(7, 0.0) == pytest.approx(1 / 7)
    assert collision_probability(10, 1e6) == 1.0
    spec = {
        (100, 0): 0.010,
        (100, 2): 0.071,
        (100, 5): 0.612,
        (100, 10): 0.996,
        (10, 2): 0.506,
        (10, 5): 0.966,
        (200, 5): 0.433,
        (200, 10): 0.9915,
    }
    for (C, beta), q in spec.items():
        assert collision_probability(C, beta) == pytest.approx(q, abs=5e-4)


@pytest.mark.parametrize("psi", PSIS)
@pytest.mark.parametrize("C,K,beta", [(3, 2, 1.0), (4, 3, 2.5), (6, 2, 5.0), (2, 3, 0.7)])
def test_hucl_at_nc_equals_tilted_enumeration(psi, C, K, beta):
    got = hucl_at_nc(C, beta, psi=psi, num_negatives=K, margin=0.5)
    assert got == pytest.approx(population_nc_ref(C, K, psi, beta=beta, margin=0.5), rel=1e-12)


def test_hucl_spec_numbers():
    for beta, v in {0: 0.3152, 2: 0.3430, 5: 0.5614, 10: 0.6919, 30: 0.6931}.items():
        assert hucl_at_nc(100, beta) == pytest.approx(v, abs=5e-5)
    for beta, v in {0: 0.589, 2: 0.924, 5: 1.092}.items():
        assert hucl_at_nc(6, beta, psi="sum", num_negatives=2) == pytest.approx(v, abs=5e-4)
    assert hucl_at_nc(6, 1e4, psi="sum", num_negatives=2) == pytest.approx(math.log(3), abs=1e-12)
    assert hucl_at_nc(100, 1e4) == pytest.approx(math.log(2), abs=1e-12)


@pytest.mark.parametrize("psi", ["mean", "sum"])
def test_hucl_monotone_and_not_tight(psi):
    betas = np.linspace(0, 20, 41)
    vals = [hucl_at_nc(10, b, psi=psi, num_negatives=16) for b in betas]
    assert (np.diff(vals) > 0).all()
    assert vals[0] == pytest.approx(ucl_optimum(10, psi=psi, num_negatives=16), rel=1e-14)


def test_plugin_vs_binomial_jensen():
    """Mean form: plug-in log(1 + E e^t) >= E_K log(1 + mean e^t) (log concave); equal for K=1 limit."""
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        b = binomial_mixture(q, 5, psi="mean", num_negatives=8)
        p = plugin_value(q, 5, psi="mean", num_negatives=8)
        assert p >= b - 1e-15
        assert binomial_mixture(q, 5, psi="mean", num_negatives=20000) == pytest.approx(p, abs=1e-4)
        # triplet: linear, both agree
        assert binomial_mixture(q, 5, psi="triplet", num_negatives=8) == pytest.approx(
            plugin_value(q, 5, psi="triplet", num_negatives=8), abs=1e-14
        )


# ---------------------------------------------------------------------------------------------
# agreement with theory.hcl.contrastive_loss at exact NC batches


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("psi", PSIS)
def test_scl_optimum_equals_batch_loss_at_nc(dtype, psi, nc_batch):
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    gen = torch.Generator().manual_seed(0)
    for counts in ([2, 3, 1, 4], [5, 5, 5], [1, 1]):
        z, labels = nc_batch(counts, dtype=dtype)
        for beta in (0.0, 3.0, 100.0):
            for est in ("expectation", "sampled"):
                got = contrastive_loss(
                    z,
                    labels,
                    setting="supervised",
                    beta=beta,
                    psi=psi,
                    tau=0.5,
                    estimator=est,
                    num_negatives=17,
                    generator=gen,
                )
                ref = scl_optimum(len(counts), psi=psi, tau=0.5, num_negatives=17)
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
                    collision_probability_batch(counts, beta, self_negative=sn),
                    collision_batch_ref(counts, beta, sn),
                    rtol=1e-12,
                )
    # equal counts with self-negatives reproduce the population q(beta)
    q = collision_probability_batch([7] * 5, 2.0)
    np.testing.assert_allclose(q, collision_probability(5, 2.0), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("psi", PSIS)
def test_hucl_batch_formula_equals_expectation_estimator(dtype, psi, nc_batch):
    tol = 1e-12 if dtype == torch.float64 else 3e-5
    for counts in ([3, 5, 2, 0, 4], [4, 4, 4], [1, 2]):
        z, labels = nc_batch(counts, dtype=dtype)
        for beta in (0.0, 2.0, 30.0):
            for sn in (True, False):
                for sp in (True, False):
                    got = contrastive_loss(
                        z,
                        labels,
                        setting="unsupervised",
                        beta=beta,
                        psi=psi,
                        num_negatives=9,
                        self_negative=sn,
                        self_positive=sp,
                        tau=0.8,
                    )
                    ref = hucl_at_nc_batch(
                        counts,
                        beta,
                        psi=psi,
                        num_negatives=9,
                        tau=0.8,
                        estimator="expectation",
                        self_negative=sn,
                        self_positive=sp,
                    )
                    assert float(got) == pytest.approx(ref, abs=tol, rel=tol)


@pytest.mark.parametrize("psi,beta", [("mean", 0.0), ("mean", 2.0), ("sum", 5.0), ("triplet", 1.0)])
def test_hucl_batch_binomial_matches_sampled_estimator(psi, beta, nc_batch):
    """The binomial formula is the expectation of the K-sample estimator (Monte Carlo, 5 SE).

    600 independent draws of the estimator in one call: 600 stacked copies of the batch (the
    run-batched kernel draws independently for every run)."""
    counts = [5, 3, 4, 2, 6]
    z, labels = nc_batch(counts)
    vals = contrastive_loss(
        z.expand(600, *z.shape).contiguous(),
        labels,
        setting="unsupervised",
        beta=beta,
        psi=psi,
        estimator="sampled",
        num_negatives=4,
        generator=torch.Generator().manual_seed(1),
    ).numpy()
    mean, se = np.mean(vals), np.std(vals, ddof=1) / math.sqrt(len(vals))
    ref = hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=4)
    assert abs(mean - ref) <= 5 * se + 1e-12
    if psi == "mean":  # and it differs from the plug-in value by much more than the noise
        plug = hucl_at_nc_batch(counts, beta, psi=psi, num_negatives=4, estimator="expectation")
        assert plug - ref > 5 * se


def test_weak_bound_holds_for_random_balanced_batches():
    rng = np.random.default_rng(3)
    for _ in range(20):
        C, per, d = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
        z = torch.from_numpy(random_instance(rng, num_points=C * per, num_classes=C, d=d)[0])
        labels = torch.arange(C).repeat_interleave(per)
        for psi in PSIS:
            got = float(
                contrastive_loss(
                    z, labels, setting="unsupervised", beta=float(rng.uniform(0, 5)), psi=psi, num_negatives=8
                )
            )
            assert got >= weak_bound(psi=psi, num_negatives=8) - 1e-12


# ---------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: scl_optimum(1), "num_classes"),
        (lambda: scl_optimum(3, tau=0), "tau"),
        (lambda: scl_optimum(3, psi="max"), "psi"),
        (lambda: ucl_optimum(3, num_negatives=0), "num_negatives"),
        (lambda: hucl_at_nc(3, -1.0), "beta"),
        (lambda: hucl_at_nc(3, 1.0, estimator="exact"), "estimator"),
        (lambda: weak_bound(margin=-1), "margin"),
        (lambda: binomial_mixture(1.5, 3), "q"),
        (lambda: collision_probability_batch([3], 1.0), "counts"),
        (lambda: collision_probability_batch([3, -1], 1.0), "counts"),
        (lambda: hucl_at_nc_batch([1, 0], 1.0, self_negative=False), "class 0"),
    ],
)
def test_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------------
# large K: bounded memory, a stated error bound, a stated limit
def _exact_mixture(q, C, psi, tau, K, margin):
    """Full binomial sum, written independently (scipy pmf over all m, psi of the multiset)."""
    from scipy.stats import binom

    a = -C / (C - 1)
    m = np.arange(K + 1)
    if psi == "triplet":
        vals = (m * margin + (K - m) * max(0.0, a / tau + margin)) / K
    else:
        mean = (m + (K - m) * np.exp(a / tau)) / K
        vals = np.log1p(mean * (K if psi == "sum" else 1))
    return float(np.dot(binom.pmf(m, K, q), vals))


@pytest.mark.parametrize("K", [3000, 40_000])
@pytest.mark.parametrize("q", [0.0, 1e-5, 0.01, 0.3, 0.999, 1.0])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_windowed_mixture_equals_the_full_sum(K, q, psi):
    from theory.hcl.optima import _binomial_mixture

    got = _binomial_mixture(q, 7, psi, 0.8, K, 0.5, 0)  # exact_limit=0: always the window
    want = _exact_mixture(q, 7, psi, 0.8, K, 0.5)
    assert abs(got - want) <= 1e-14 * max(1.0, abs(want))


def test_large_num_negatives_is_fast_and_bounded():
    import time

    from theory.hcl.optima import EXACT_NEGATIVES, MAX_NEGATIVES, _binomial_window

    t0 = time.perf_counter()
    for K in (10**7, 10**9):
        u = ucl_optimum(100, num_negatives=K)
        h = hucl_at_nc(10, 2.0, num_negatives=K)
        assert 0 < u < math.log(2) and 0 < h < math.log(2)
        lo, hi = _binomial_window(K, 0.5)
        assert hi - lo < 10 * math.sqrt(K) + 100  # O(sqrt K) terms, never O(K)
    assert time.perf_counter() - t0 < 5.0
    # the limit K -> infinity of the mean form is the plug-in value (law of large numbers)
    assert ucl_optimum(100, num_negatives=10**9) == pytest.approx(plugin_value(0.01, 100), abs=1e-6)
    assert EXACT_NEGATIVES < 10**7
    with pytest.raises(ValueError, match=rf"num_negatives must be an integer in \[1, {MAX_NEGATIVES}\]"):
        ucl_optimum(100, num_negatives=MAX_NEGATIVES + 1)
    assert scl_optimum(100, num_negatives=10**9, psi="sum") == pytest.approx(
        math.log1p(10**9 * math.exp(-100 / 99)), rel=1e-14
    )


def test_symbolic_and_convex_limits():
    from theory.hcl import convex, symbolic

    assert float(symbolic.scl_optimum_expr(10, num_negatives=10**7)) == pytest.approx(
        scl_optimum(10), rel=1e-13
    )
    with pytest.raises(ValueError, match=r"num_negatives must be an integer in \[1, 1024\]"):
        symbolic.ucl_optimum_expr(10, num_negatives=10**7)
    with pytest.raises(ValueError, match=r"num_negatives must be an integer in \[1, 1024\]"):
        symbolic.hucl_at_nc_expr(10, 1, num_negatives=1025)
    with pytest.raises(ValueError, match="MAX_TUPLES"):
        convex.population_loss_at_gram(np.eye(10), num_negatives=10**7)
    with pytest.raises(ValueError, match="MAX_PROGRAM_TERMS"):
        convex.minimize_gram(10, num_negatives=50)
