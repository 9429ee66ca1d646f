"""Classifier-based NC3 / NC4 (theory.collapse.classifier) against closed forms at an exact simplex
ETF and against slow loop references."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import (
    SCALES,
    _collapsed,
    _noisy_classes,
    ref_class_means,
    ref_nc3,
    ref_nc3_zhu,
    ref_nc4,
)
from theory.collapse import (
    class_stats,
    nc3_self_duality,
    nc3_self_duality_zhu,
    nc4_ncc_agreement,
    ncm_accuracy,
    ncm_classifier,
)
from theory.geometry import simplex_etf

# ------------------------------------------------------------------------------------------------
# Closed forms at an exact simplex ETF
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("C,extra", [(2, 0), (3, 0), (10, 0), (10, 4), (50, 1)])
def test_nc3_closed_forms_at_an_etf(C, extra):
    d = C - 1 + extra
    v = simplex_etf(C, d, generator=torch.Generator().manual_seed(C + 7 * extra))
    shift = torch.linspace(-0.4, 0.7, d, dtype=torch.float64)
    mu = v + shift  # a shifted ETF: the centred means are the vertices v
    for W, nc3, zhu in (
        (v, 0.0, 0.0),  # W = M~
        (2.5 * v, 0.0, 0.0),  # scale-free
        (-v, 4.0, 2.0),  # ||a - (-a)||^2 = 4 for unit a; Gram -(I - J/C)/sqrt(C-1) at distance 2
    ):
        assert nc3_self_duality(W, mu) == pytest.approx(nc3, abs=1e-12)
        assert nc3_self_duality_zhu(W, mu) == pytest.approx(zhu, abs=1e-12)
    # without centring, the shifted means are not self-dual with W = M~
    assert nc3_self_duality(v, mu, global_mean=0) > 1e-3
    if extra >= 1:
        # W in the orthogonal complement of the means: Frobenius-orthogonal unit matrices -> 2
        complement = torch.linalg.svd(v).Vh[C - 1 :]  # v has rank C - 1
        g = torch.Generator().manual_seed(2)
        W_perp = torch.randn(C, extra, dtype=torch.float64, generator=g) @ complement
        assert nc3_self_duality(W_perp, mu) == pytest.approx(2.0, abs=1e-12)
        with pytest.raises(ValueError, match="W M~"):
            nc3_self_duality_zhu(W_perp, mu)


@pytest.mark.parametrize("C", [2, 3, 10, 100])
def test_nc4_closed_forms_at_an_etf(C):
    v = simplex_etf(C, C - 1, generator=torch.Generator().manual_seed(C))
    z, _ = _collapsed(v, 3)  # every sample on its vertex
    assert nc4_ncc_agreement(v, z, v) == 1.0  # W = M~, b = 0, mu_G = 0
    for similarity in ("euclidean", "dot"):  # equal norms: both NCM rules are the NCC
        W, b = ncm_classifier(v, similarity)
        assert nc4_ncc_agreement(W, z, v, b) == 1.0
    # a shifted ETF needs the bias b = -W mu_G
    shift = torch.full((C - 1,), 0.3, dtype=torch.float64)
    assert nc4_ncc_agreement(v, z + shift, v + shift, b=-(v @ shift)) == 1.0
    # a classifier that maps class c to class c + 1 never agrees
    assert nc4_ncc_agreement(v.roll(-1, dims=0), z, v) == 0.0


# ------------------------------------------------------------------------------------------------
# Random data against loop references
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nc3_matches_loops(dtype, seed, np_rng):
    rng = np_rng(300 + seed)
    C, d = 5, 7
    z, y = _noisy_classes(rng, C, d, 6, unbalanced=True)
    mu = ref_class_means(z, y, C).astype(dtype)
    W = rng.standard_normal((C, d)).astype(dtype)
    mu64, W64 = mu.astype(np.float64), W.astype(np.float64)
    for g, kwargs in (
        (mu64.mean(axis=0), {}),
        (z.mean(axis=0), {"global_mean": torch.from_numpy(z.mean(axis=0))}),
        (np.zeros(d), {"global_mean": 0.0}),
    ):
        exp = ref_nc3(W64.tolist(), mu64.tolist(), g.tolist())
        assert nc3_self_duality(W, mu, **kwargs) == pytest.approx(exp, rel=1e-12)
        assert nc3_self_duality(torch.from_numpy(W), torch.from_numpy(mu), **kwargs) == pytest.approx(
            exp, rel=1e-12
        )
        exp_zhu = ref_nc3_zhu(W64.tolist(), mu64.tolist(), g.tolist())
        assert nc3_self_duality_zhu(W, mu, **kwargs) == pytest.approx(exp_zhu, rel=1e-12)
    # Papyan's sample mean from the statistics
    st = class_stats(z, y)
    exp = ref_nc3(W64.tolist(), ref_class_means(z, y, C).tolist(), z.mean(axis=0).tolist())
    assert nc3_self_duality(W64, st.means, global_mean=st.global_mean) == pytest.approx(exp, rel=1e-12)


@pytest.mark.parametrize("mu_scale", SCALES)
@pytest.mark.parametrize("w_scale", [SCALES[0], SCALES[-1]])
def test_nc3_at_any_scale_of_the_means_and_the_weights(mu_scale, w_scale, np_rng):
    # NC3 (both forms) is invariant under a scale of the means and one of the weights
    rng = np_rng(310)
    C, d = 4, 5
    z, y = _noisy_classes(rng, C, d, 5)
    mu = ref_class_means(z, y, C)
    W = rng.standard_normal((C, d))
    g = mu.mean(axis=0)
    exp = ref_nc3(W.tolist(), mu.tolist(), g.tolist())
    assert nc3_self_duality(W * w_scale, mu * mu_scale) == pytest.approx(exp, rel=1e-12)
    exp_zhu = ref_nc3_zhu(W.tolist(), mu.tolist(), g.tolist())
    assert nc3_self_duality_zhu(W * w_scale, mu * mu_scale) == pytest.approx(exp_zhu, rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nc4_matches_loop(dtype, seed, np_rng):
    rng = np_rng(400 + seed)
    C, d = 6, 4
    z, y = _noisy_classes(rng, C, d, 10, scale=1.0, noise=1.0, unbalanced=True)
    z = z.astype(dtype)
    mu = ref_class_means(z.astype(np.float64), y, C)
    W = mu + 0.7 * rng.standard_normal((C, d))  # a noisy probe: partial agreement
    b = 0.3 * rng.standard_normal(C)
    exp = ref_nc4(W.tolist(), b.tolist(), z.astype(np.float64).tolist(), mu.tolist())
    assert 0.0 < exp < 1.0
    got = nc4_ncc_agreement(W, z, mu, b)
    assert got == exp
    assert nc4_ncc_agreement(
        torch.from_numpy(W).float(), torch.from_numpy(z), mu, torch.from_numpy(b)
    ) == pytest.approx(exp, abs=2 / len(z))
    # no bias = a zero bias; a scalar bias changes nothing
    exp0 = ref_nc4(W.tolist(), [0.0] * C, z.astype(np.float64).tolist(), mu.tolist())
    assert nc4_ncc_agreement(W, z, mu) == exp0 == nc4_ncc_agreement(W, z, mu, b=1.5)


def test_ncm_classifiers_against_loops_and_ncm_accuracy(np_rng):
    rng = np_rng(500)
    C, d = 5, 3
    z, y = _noisy_classes(rng, C, d, 12, scale=1.0, noise=1.0, unbalanced=True)
    mu = ref_class_means(z, y, C) * np.array([[1.0], [2.0], [0.5], [1.5], [1.0]])  # unequal norms
    W, b = ncm_classifier(mu)
    np.testing.assert_array_equal(W.numpy(), mu)
    np.testing.assert_allclose(b.numpy(), [-0.5 * sum(x * x for x in row) for row in mu], rtol=1e-15)
    W_dot, b_dot = ncm_classifier(mu, "dot")
    np.testing.assert_array_equal(W_dot.numpy(), mu)
    assert b_dot.tolist() == [0.0] * C
    # the Euclidean NCM written as a linear classifier is the nearest class centre
    assert nc4_ncc_agreement(W, z, mu, b) == 1.0
    assert ref_nc4(W.tolist(), b.tolist(), z.tolist(), mu.tolist()) == 1.0
    # the authors' dot-product NCM disagrees with the NCC when the norms differ
    exp = ref_nc4(mu.tolist(), [0.0] * C, z.tolist(), mu.tolist())
    assert 0.0 < exp < 1.0
    assert nc4_ncc_agreement(W_dot, z, mu, b_dot) == exp
    # ... and is the classifier of ncm_accuracy(similarity="dot"): score it on the NCC's decisions
    ncc = [min(range(C), key=lambda c, x=x: (np.linalg.norm(x - mu[c]), c)) for x in z]
    assert ncm_accuracy(mu, np.arange(C), z, np.array(ncc), similarity="dot") == exp


def test_ncm_classifier_hand_example():
    mu = np.array([[10.0, 0.0], [0.0, 1.0]])
    x = np.array([[0.5, 1.0]])  # dot: 5 vs 1 -> class 0; distance: 9.55 vs 0.5 -> class 1
    W, b = ncm_classifier(mu, "dot")
    assert nc4_ncc_agreement(W, x, mu, b) == 0.0
    W, b = ncm_classifier(mu, "euclidean")  # scores 0.5 - 50 vs 1 - 0.5
    assert b.tolist() == [-50.0, -0.5]
    assert nc4_ncc_agreement(W, x, mu, b) == 1.0


def test_nc4_many_rows_are_chunked(np_rng):
    """More rows than one scoring chunk (4096): the same as the loop."""
    rng = np_rng(600)
    C, d = 4, 3
    mu = rng.standard_normal((C, d))
    z = rng.standard_normal((5000, d))
    W = rng.standard_normal((C, d))
    assert nc4_ncc_agreement(W, z, mu) == ref_nc4(W.tolist(), [0.0] * C, z.tolist(), mu.tolist())
